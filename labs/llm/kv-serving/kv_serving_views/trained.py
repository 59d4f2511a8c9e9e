""""The trained model under load": real prompts against the one engine serving SmolLM2-135M, the batch it ran,
its latencies, batched against one at a time, and whether every request wrote what it writes alone."""

from __future__ import annotations

from typing import Any

from kv_serving.figures import formulas
from site_hooks.blocks import Block, Chart, Table, answer
from site_hooks.formatting import format_bytes, format_ratio, join, plural
from site_hooks.timeline_chart import timeline

from .common import percent, spread


def speedup_sentence(trained: dict[str, Any]) -> str:
    """Batched over one at a time: the paired rounds where the record has them (their middle half chooses the words),
    then the sweep's single runs at the highest rate."""
    speedup, serial = trained["speedup_over_serial"], trained["serial"]
    single = (f"at {serial['rate']:g} arrivals per second, the sweep's batched run wrote {format_ratio(speedup)} the "
              f"output tokens per second of the same prompts admitted one at a time")
    rounds = trained.get("batching_rounds")
    if rounds is None:
        verdict = "" if speedup > 1 else ": no gain at all, on this run batching bought nothing"
        return f"{single[0].upper()}{single[1:]}{verdict}."
    return f"{rounds_sentence(rounds)} In single runs, {single}."


ROUNDS_READINGS = {
    "above": "batching wrote {ratio} the output tokens per second of one at a time",
    "within": "batching wrote {ratio} the output tokens per second of one at a time, within its rounds' noise of no "
              "gain",
    "below": "batching wrote fewer output tokens per second than one at a time ({ratio}): on this run it bought "
             "nothing",
}


def rounds_sentence(rounds: dict[str, Any]) -> str:
    """'In 4 paired rounds ... batching wrote 3.1× (2.9–3.3) ...': the wording by where the rounds' middle half lies
    against 1 (above: batched faster in most rounds)."""
    ratio = rounds["paired"]
    text = f"{format_ratio(ratio['median'])} (middle half {ratio['low']:.2f}–{ratio['high']:.2f})"
    return (f"In {plural(rounds['rounds'], 'paired round')}, each sending the same {rounds['requests']} prompts at "
            f"once (up to {rounds['max_tokens']} tokens each) to the batching server and to the one-at-a-time server, in "
            f"turns, {ROUNDS_READINGS[rounds['side']].format(ratio=text)}.")


def matching_sentence(trained: dict[str, Any]) -> str:
    """Whether every batched request wrote, token for token, what it wrote alone."""
    compared, matching = trained["requests_compared"], trained["requests_matching_solo"]
    unfinished = trained["requests_unfinished"]
    aside = (f" ({plural(unfinished, 'other request')} did not complete, so wrote nothing to compare: the "
             f"admission table shows where a policy ran out of memory.)" if unfinished else "")
    if matching == compared:
        return (f"Every one of the {compared} completed requests of the batched runs wrote, token for token, what the "
                f"same prompt wrote alone in the one-at-a-time run.{aside}")
    return (f"{matching} of the {compared} completed requests of the batched runs wrote, token for token, what the "
            f"same prompt wrote alone; the others parted from their solo run at some token. A batch adds its floats "
            f"in another order than a row alone, and where two logits are nearly equal that can change a greedy "
            f"choice; the record keeps both runs' tokens, not the logits at the parting.{aside}")


def admission_note(trained: dict[str, Any]) -> str | None:
    """Where the count safe for the longest request and the count sized for the mean one came out the same (a prompt
    set of requests of nearly one size), say so: the benchmark then runs that count once, and one row stands for
    both (an older record ran it twice, two rows of one policy)."""
    counts = {p["name"]: p["options"][p["options"].index("--max-running") + 1]
              for p in trained["admission"]["policies"] if "--max-running" in p["options"]}
    safe = counts.get("count_safe")
    if safe is None or counts.get("count_average", safe) != safe:
        return None
    blocks = trained["request_blocks"]
    rows = ("one count row stands for both" if "count_average" not in counts else "the two count rows run one "
            "policy twice")
    return (f"On these prompts the count safe for the longest request and the count sized for the mean one are the "
            f"same, {safe} running: each request needs {min(blocks)} to {max(blocks)} blocks, so {rows}. The random "
            f"model's workload below, whose requests differ far more in length, is where the two counts part.")


def prompts_sentence(trained: dict[str, Any]) -> str:
    """The prompts as the record lists them: how many, their lengths in tokens, the output each may write."""
    model, tokens = trained["model"], trained["prompt_tokens"]
    return (f"{plural(trained['requests'], 'real prompt')} of {min(tokens)} to {max(tokens)} tokens from "
            f"{trained['prompt_file']} (SHA-256 {trained['prompts_sha256'][:12]}…), chat questions through the "
            f"model's chat template and text continuations, each answered with at most {trained['max_tokens']} tokens "
            f"by kv_serving.server --model smollm2 ({model['layers']} layers, {model['dtype']}), a fresh server per "
            f"run.")


def arrivals_sentence(trained: dict[str, Any]) -> str:
    """The rates the prompts were sent at, how long each run's arrivals lasted against the run, and whether each run
    was a burst (arrivals over before formulas.BURST_SHARE of it had passed) rather than a steady stream."""
    points = sorted(trained["points"], key=lambda p: p["rate"])
    spans = join([f"at {p['rate']:g}/s the {p['summary']['requests']} arrivals took {p['arrival_span_s']:.2f} s of a "
                  f"{p['summary']['duration_s']:.1f} s run" for p in points])
    bursts = [f"{p['rate']:g}/s" for p in points if p["arrival_share"] < formulas.BURST_SHARE]
    if len(bursts) == len(points):
        verdict = (" At every rate the arrivals were over before half the run had passed: each run is a burst and "
                   "then a drain of the queue, not a steady stream at its rate.")
    elif bursts:
        verdict = (f" At {join(bursts)} the arrivals were over before half the run had passed: a burst and then a "
                   f"drain of the queue, not a steady stream at its rate.")
    else:
        verdict = ""
    rates = join([f"{p['rate']:g}" for p in points])
    return (f"The load generator sent them at {plural(len(points), 'Poisson rate')}, {rates} per second: "
            f"{spans}.{verdict}")


def byte_server(trained: dict[str, Any]) -> dict[str, Any]:
    """The server counters of the trained admission run that admitted by KV bytes."""
    return next(p for p in trained["admission"]["policies"] if p["name"] == "kv_budget_bytes")["server"]


def budget_sentence(trained: dict[str, Any]) -> str:
    """The byte server's budget as a share of the trained admission pool, against the count servers' whole pool;
    only where the budget is smaller than the pool, that the table compares a smaller budget too."""
    policies = trained["admission"]["policies"]
    by_bytes = byte_server(trained)
    by_count = [p for p in policies if p["name"] != "kv_budget_bytes"]
    counts = sorted({p["server"]["peak_running"] for p in by_count})
    share = by_bytes["budget_share_of_pool"]
    lead = (f"The byte server's budget is {percent(share)} of the pool, "
            f"{by_bytes['budget_blocks']} of its {by_bytes['num_blocks']} blocks, and it ran up to "
            f"{plural(by_bytes['peak_running'], 'request')} at once; the count "
            f"{'server' if len(by_count) == 1 else 'servers'}, limited only by the pool, ran "
            f"up to {join([f'{c:,}' for c in counts], 'or')}.")
    if share < 1:
        return lead + " So the table sets a smaller budget beside the whole pool, not only one policy beside another."
    return lead


def answer_concurrent_view(record: dict[str, Any]) -> Block:
    """Whether clients asking at once waited for each other, from the highest rate's batch and its solo runs."""
    trained = record["trained"]
    top = max(trained["points"], key=lambda p: p["rate"])
    server = top["server"]
    together = server["peak_running"] > 1
    text = ((f"No: at {top['rate']:g} arrivals per second up to {server['peak_running']} requests ran in one decode "
             f"step, {server['mean_batch']:.1f} on average, each at its own position over its own blocks. "
             if together else
             f"On this run they did: at {top['rate']:g} arrivals per second no decode step carried more than one "
             f"request. ")
            + f"{top['matching_solo']} of its {top['completed_compared']} completed requests wrote the same tokens as "
              f"alone.")
    return answer(text)


def trained_admission_view(record: dict[str, Any]) -> Block:
    """The trained model under the admission policies, over one pool at the highest rate: the byte budget's
    share of that pool said first, since the count servers have the whole of it."""
    trained = record["trained"]
    policies = [(run["label"], run["summary"]["completed"], run["server"]["peak_running"],
                 f"{format_bytes(run['peak_kv_bytes'])} of {format_bytes(run['budget_kv_bytes'])}",
                 run["server"]["failed_for_memory"], f"{run['summary']['throughput_tokens_per_s']:,.1f}",
                 spread(run["summary"], "ttft_s")) for run in trained["admission"]["policies"]]
    return Block(css="lab-medians", paragraphs=[budget_sentence(trained), *filter(None, [admission_note(trained)])],
                 tables=[Table(["Admission", "Completed", "Peak running", "Peak KV of budget", "Failed for memory",
                                "Tokens/s", "Time to first token p50 / p99"], policies,
                               caption=f"Admission on the trained model, a pool of {trained['admission_blocks']} "
                                       f"blocks, at {trained['serial']['rate']:g} arrivals per second; the byte "
                                       f"budget {percent(byte_server(trained)['budget_share_of_pool'])} of the pool")])


def trained_view(record: dict[str, Any]) -> Block:
    trained = record["trained"]
    points, serial = trained["points"], trained["serial"]
    rows, latencies = [], []
    for p in [*points, serial]:
        s, server = p["summary"], p["server"]
        name = f"one at a time, {p['rate']:g}" if p is serial else f"{p['rate']:g}"
        rows.append((name, s["completed"], p["stopped"], f"{server['mean_batch']:.1f}", server["peak_running"],
                     f"{format_bytes(p['peak_kv_bytes'])} of {format_bytes(p['budget_kv_bytes'])}",
                     f"{s['throughput_tokens_per_s']:,.1f}",
                     "(the solo run)" if p is serial else f"{p['matching_solo']} of {p['completed_compared']}"))
        latencies.append((name, spread(s, "ttft_s"), spread(s, "itl_s")))
    batch_chart = timeline([(f"one at a time, {p['rate']:g}/s" if p is serial else f"{p['rate']:g}/s",
                             [(x["t_s"], x["running"]) for x in p["occupancy"]]) for p in [*points, serial]],
                           [(max(p["server"]["peak_running"] for p in points), "largest batch")],
                           "Requests in the decode batch over time, per arrival rate",
                           "; ".join(f"{p['rate']:g}/s: peak {p['server']['peak_running']} running" for p in points),
                           x_label="seconds since the first request", y_label="requests running")
    return Block(css="lab-medians",
                 paragraphs=[prompts_sentence(trained), arrivals_sentence(trained), speedup_sentence(trained),
                             matching_sentence(trained)],
                 charts=[Chart(batch_chart, "Each run's own /metrics samples: how many requests one decode step "
                                            "carried as the prompts arrived and finished.")],
                 tables=[Table(["Rate (/s)", "Completed", "Ended their turn", "Mean batch", "Peak running",
                                "Peak KV of budget", "Tokens/s", "Same tokens as alone"], rows,
                               caption="The trained model under load: batching and throughput per run"),
                         Table(["Rate (/s)", "Time to first token p50 / p99", "Between tokens p50 / p99"], latencies,
                               caption="The trained model under load: latency measured by the client")])

