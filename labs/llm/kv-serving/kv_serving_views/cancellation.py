""""Cancellation on and off": decode work and cache held for clients that left."""

from __future__ import annotations

from typing import Any

from kv_serving.figures.formulas import mode
from site_hooks.blocks import Block, Chart, Table
from site_hooks.formatting import plural

from .common import blocks_timeline


def cancellation_view(record: dict[str, Any]) -> Block:
    """Two servers, the same departing clients: blocks in use, decode work for the departed, what it cost."""
    honoured, ignored = mode(record, True), mode(record, False)
    pool = honoured["server"]["num_blocks"]
    chart = blocks_timeline([("disconnects honoured", honoured), ("disconnects ignored", ignored)],
                                   [(pool, f"pool: {pool} blocks")], "KV blocks in use while every client leaves partway",
                            f"honoured: mean {honoured['mean_used_blocks']:.0f} blocks; ignored: mean "
                            f"{ignored['mean_used_blocks']:.0f} blocks")
    work, memory = [], []
    for label, m in (("honoured", honoured), ("ignored", ignored)):
        server = m["server"]
        work.append((label, m["summary"]["left"], f"{server['tokens_generated']:,}",
                     f"{server['decode_rows_after_disconnect']:,}", f"{server['rows_dropped']:,}",
                     f"{server['tokens_after_disconnect']:,}",
                     f"{server['decode_steps_with_departed']:,} of {server['decode_steps']:,}"))
        memory.append((label, f"{m['tokens_unread']:,}",
                       f"{server['block_seconds_after_disconnect']:.2f}", server["num_used_blocks"]))
    workload = record["cancellation"]["workload"]
    lead = (f"{workload['requests']} clients, each leaving after a random number of tokens; a row is one request's "
            f"token in one step.")
    return Block(css="lab-medians", paragraphs=[lead],
                 charts=[Chart(chart, "The same workload against two servers; only the handling of disconnects "
                                      "differs.")],
                 tables=[Table(["Disconnects", "Clients that left", "Tokens streamed", "Rows decoded after the server "
                               "noticed a departure", "Of those: computed, then thrown away", "Of those: sent to a "
                               "closed connection", "Decode steps holding such rows"], work,
                              caption="Decode work for clients that had gone (a row is one request's token in one "
                                      "step)"),
                        Table(["Disconnects", "Tokens streamed that no client received",
                               "Block-seconds held after the server noticed", "Blocks in use once idle"], memory,
                              caption="What the departed clients cost afterwards")])


def cancellation_detail_view(record: dict[str, Any]) -> Block:
    """The cancellation experiment in sentences, and from which moment its counts start."""
    return Block(css="lab-findings", paragraphs=cancellation_sentences(record), notes=when_counted_sentence(record))


def cancellation_sentences(record: dict[str, Any]) -> list[str]:
    honoured, ignored = mode(record, True), mode(record, False)
    h, i = honoured["server"], ignored["server"]
    cancellation = record["cancellation"]
    workload = cancellation["workload"]
    per_request = (f"{cancellation['rows_per_cancelled']:.2f} per cancelled request"
                   if h["cancelled"] else "with no request cancelled")
    bound = ("no more rows than cancelled requests, as the scheduler drops at most the row of the step already "
             "under way for each (a scheduler test checks this per request)" if h["rows_dropped"] <= h["cancelled"]
             else "more rows than cancelled requests")
    prefills = (f", and {plural(h['prefills_after_disconnect'], 'prefill')} whose client left while it ran"
                if h["prefills_after_disconnect"] else "")
    held, held_honoured = i["block_seconds_after_disconnect"], h["block_seconds_after_disconnect"]
    times = (f", {cancellation['block_seconds_ignored_over_honoured']:.0f} times as many" if held_honoured > 0
             else "")
    return [
        f"{workload['requests']} clients each disconnected after a random number of tokens. With disconnects "
        f"honoured, the server cancelled {plural(h['cancelled'], 'request')}. It still decoded "
        f"{plural(h['decode_rows_after_disconnect'], 'row')} for departed clients ({per_request}) in "
        f"{plural(h['decode_steps_with_departed'], 'step')} that were already under way when it noticed{prefills}; "
        f"it threw away {plural(h['rows_dropped'], 'computed row')} and sent "
        f"{plural(h['tokens_after_disconnect'], 'token')} to closed connections: {bound}. It held "
        f"{held_honoured:.2f} block-seconds of cache for them after noticing.",
        f"Ignoring disconnects, the server decoded {plural(i['decode_rows_after_disconnect'], 'row')} for departed "
        f"clients, in {i['decode_steps_with_departed']:,} of its {i['decode_steps']:,} decode steps (against "
        f"{h['decode_steps']:,} steps in all when honoured), sent {plural(i['tokens_after_disconnect'], 'token')} "
        f"into connections nobody read, and held {held:.2f} block-seconds{times}, because each departed request ran "
        f"on to its max_tokens.",
        f"Once both servers were idle, {h['num_used_blocks']} and {i['num_used_blocks']} blocks were still in use: "
        + ("no block leaked either way." if h["num_used_blocks"] == i["num_used_blocks"] == 0 else "blocks leaked."),
    ]


def when_counted_sentence(record: dict[str, Any]) -> list[str]:
    """Which moment the counts start from, and what the record says about the time before it."""
    parts, early = [], record["cancellation"]["tokens_before_noticed"]
    for label, m in (("honoured", mode(record, True)), ("ignored", mode(record, False))):
        s = m["server"]
        unread, before = m["tokens_unread"], m["tokens_unread_before_noticed"]
        parts.append(f"With disconnects {label}, the server streamed {s['tokens_generated']:,} tokens and the clients "
                     f"received {m['summary']['output_tokens']:,}; "
                     + ("every token it streamed was received." if unread == 0 else
                        f"of the {unread:,} nobody received, {s['tokens_after_disconnect']:,} were sent after the "
                        f"server noticed and {before:,} before."))
    return [
        "The counts of work for departed clients (rows, steps, block-seconds) start when the server noticed a "
        "departure, which is when the client's "
        "disconnect reached it and closed its response stream, not when the client closed its end: the server "
        "cannot see that earlier moment. The decode work is bounded all the same, because every computed row is "
        "either streamed or thrown away, and the clients count what they received, so the work no client used is "
        "the rows thrown away plus the tokens streamed that nobody received, whenever they were computed.",
        " ".join(parts),
        ("So no streamed token fell between a client's close and the server's noticing." if early == 0 else
         f"So {plural(early, 'token')} went out between a client's close and the server's noticing, work the "
         f"counts after noticing leave out."),
        "The block-seconds have no such check: they start when the server noticed and leave out the cache held "
        "before, which the record does not measure."]
