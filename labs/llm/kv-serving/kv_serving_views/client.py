"""What a client of the trained server sees per token, beside the step that makes it: one streamed request alone on
an idle one-at-a-time server of its own (prefix-cached) against the same served step in this process, in paired rounds at each context. The
wording (longer, shorter, within noise) follows where each context's middle half of per-round ratios lies against
1 (labkit.summary.side_of_one), never the medians alone."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_ratio, join, plural

READINGS = {"above": "the client waited longer", "below": "the client waited less: the server's process stepped faster",
            "within": "within its rounds' noise"}


def ratio_text(paired: dict[str, Any]) -> str:
    """'1.08× (1.05–1.12)': the median of per-round ratios and their middle half."""
    return f"{format_ratio(paired['median'])} ({paired['low']:.2f}–{paired['high']:.2f})"


def verdict(rows: list[dict[str, Any]]) -> str:
    """One sentence over every context, chosen by the sides their rounds lie on."""
    sides = {row["side"] for row in rows}
    contexts = join([f"{row['context']:,}" for row in rows])
    if sides == {"above"}:
        extra = [row["added_ns"] for row in rows]
        return (f"At every context ({contexts} positions) a client waited longer between tokens than the step "
                f"itself takes ({join([ratio_text(row['paired']) for row in rows])} of it): the server adds "
                f"{format_ms(min(extra), 2)}–{format_ms(max(extra), 2)} ms per token on the way out in this run "
                "(medians).")
    if sides == {"within"}:
        return (f"At every context ({contexts} positions) the client's interval between tokens was within its "
                f"rounds' noise of the step itself ({join([ratio_text(row['paired']) for row in rows])}): what the "
                "server adds on the way out is smaller than this run could tell apart.")
    if sides == {"below"}:
        return (f"At every context ({contexts} positions) the client's interval came out shorter than the step timed "
                f"in this process ({join([ratio_text(row['paired']) for row in rows])}): the server's process ran "
                "its step faster than this one did, so the ratio bounds what the server adds rather than measuring it.")
    return ("Context by context: " + "; ".join(
        f"at {row['context']:,} positions {ratio_text(row['paired'])}, {READINGS[row['side']]}" for row in rows) + ".")


NONE = ("This record holds no client-side timing of the trained server: it was made before the benchmark measured "
        "one.")


def by_weights(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows of each weight format, in the record's order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["weights"], []).append(row)
    return groups


def client_verdict_view(record: dict[str, Any]) -> Block:
    """One sentence per weight format, the page's only words on it outside its fold."""
    client = record["trained"].get("client_steps")
    if client is None:
        return Block(paragraphs=[NONE])
    return Block(paragraphs=[f"{weights} weights: {verdict(rows)}" for weights, rows in by_weights(client["rows"]).items()])


def cached_text(client: dict[str, Any]) -> str:
    """How the rounds' prompts were prefilled: from the server's prefix cache (warmed by one untimed request per
    context), or whole each round."""
    if client.get("prefix_caching") is None:
        return " Each round's request prefilled its whole prompt: its time to first token is that prefill's."
    return (f" The server caches prefixes ({client['prefix_caching']} index): one untimed request per context filled "
            "that cache before the rounds, so each round's request prefilled only the prompt's last partial block, "
            "and its time to first token below is that short prefill's, not a whole prompt's; the decode steps read "
            "the same blocks either way.")


def client_view(record: dict[str, Any]) -> Block:
    client = record["trained"].get("client_steps")
    if client is None:
        return Block(paragraphs=[NONE])
    rows = client["rows"]
    dtype = record["trained"]["model"]["dtype"]  # the trained model's activations, whatever its weights' format
    table = Table(["Weights", "Context", "Client's gap between tokens (ms)", "The step in process (ms)",
                   "Client ÷ step, per round", "Reading", "Time to first token (ms)"],
                  [(row["weights"], f"{row['context']:,}", format_ms(row["client_median_ns"]),
                    format_ms(row["in_process_median_ns"]),
                    ratio_text(row["paired"]), READINGS[row["side"]], format_ms(row["client_ttft_median_ns"]))
                   for row in rows],
                  caption=f"This run's medians, {dtype}, {plural(client['threads'], 'thread')}; the ratio is the median "
                          "of the per-round ratios with their middle half")
    return Block(paragraphs=[
        f"In each of {plural(client['rounds'], 'round')} per context and weight format, the server's decode step ran "
        f"{client['tokens'] - 1} times in this process and one client streamed a completion of {client['tokens']} "
        "tokens from a server over the same weights that runs one request at a time (idle otherwise; int8: the "
        "server started with --weights int8, the decode lab's int8 step, whose page gives its quality), its prompt "
        "the first context − 1 tokens of the long text, so each of its decode steps attends over about as many "
        f"positions; the two sides took turns going first.{cached_text(client)} The client's gap between two tokens "
        "is one step plus whatever lies between the engine and the socket: the hand-off from the engine's thread to "
        "the event loop, detokenising, the HTTP chunk. A ratio is taken inside one round only, where the machine's "
        "drift slows both sides alike."],
        tables=[table])
