"""The workloads, the warm-against-cold check, each workload's runs, the two indexes and the two orders."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_percent, format_seconds

from .common import CACHING, NAMES, ORDER, POOL, run, summary


def workloads_view(record: dict[str, Any]) -> Block:
    rows = []
    for name, workload in record["workloads"].items():
        s = summary(record, name)
        rows.append((NAMES[name], f"{len(workload['sessions'])} sessions, {s['requests']} requests",
                     f"{s['first_prompt_tokens_min']:,}–{s['first_prompt_tokens_max']:,}",
                     f"{workload['pools']['holds']:,}", f"{workload['pools']['evicts']:,}"))
    config = record["config"]
    return Block(tables=[Table(["workload", "traffic", "first prompt, tokens", "pool that holds it, blocks",
                                "pool that forces eviction, blocks"], rows,
                               caption=f"A block holds {config['block_size']} positions of every layer's keys and "
                                       f"values. Sessions start {format_seconds(config['gap_s'])} apart; a chat's next "
                                       f"turn is sent when its reply ends; every reply stops at the end of its turn "
                                       f"or after {config['max_tokens']} tokens.")])


def equivalence_view(record: dict[str, Any]) -> Block:
    checked = record["equivalence"]
    parts = []
    for index in ("hash", "radix"):
        c = checked[index]
        parts.append(f"under the {CACHING[index]}, the request found {c['cached_tokens']} of its {c['prompt_tokens']} "
                     f"prompt tokens cached, and over {c['steps']} rows of logits (its first token's and each decode "
                     f"step's) the largest |warm − cold| was {c['max_abs_difference']:.1e}, where the tolerance allows "
                     f"{c['allowed_there']:.1e}")
    tolerance = checked["tolerance"]
    return Block(paragraphs=[f"On the trained model in float32, {'; '.join(parts)} (atol {tolerance['atol']:g} + rtol "
                             f"{tolerance['rtol']:g} × |cold|, the serving lab's trained float32 tolerance). The "
                             f"benchmark times nothing unless this holds."])


def runs_view(workload: str) -> Callable[[dict[str, Any]], Block]:
    def view(record: dict[str, Any]) -> Block:
        rows = []
        for entry in record["workloads"][workload]["runs"].values():
            f = entry["figures"]
            rows.append((CACHING[entry["caching"]], ORDER[entry["order"]], entry["pool"],
                         format_percent(f["hit_rate"]), f"{f['prefilled_tokens']:,}", format_seconds(f["ttft_p50_s"]),
                         format_seconds(f["ttft_p99_s"]), f"{f['output_tokens_per_s']:.1f}", f"{f['evictions']:,}",
                         f"{f['cached_blocks_peak']:,}"))
        return Block(tables=[Table(
            ["cache", "order", "pool", "hit rate", "tokens prefilled", "TTFT p50", "TTFT p99", "output tokens/s",
             "evictions", "blocks cached, peak"], rows,
            caption=f"{NAMES[workload].capitalize()}: one run per row, {summary(record, workload)['requests']} "
                    f"requests each. The p99 of so few requests is their slowest one or close to it; output tokens/s "
                    f"counts every request's tokens over the run's span.")])
    return view


def indexes_view(record: dict[str, Any]) -> Block:
    """Where the hash chain and the radix tree found the same cached tokens, and where (and by how much) they did not."""
    differ = [f"{NAMES[name]}, {ORDER[e['order']]}, in the pool that {POOL[e['pool']]}: the hash chain found "
              f"{e['hash_hit_tokens']:,} cached tokens, the tree {e['radix_hit_tokens']:,}"
              for name in record["workloads"] for e in summary(record, name)["indexes_differ"]]
    with_room = all(value for name in record["workloads"] for key, value in summary(record, name).items()
                    if key.startswith("indexes_agree_") and key.endswith("_holds"))
    said = ("Wherever the pool held every block, the two indexes found exactly the same cached tokens: both match "
            "whole blocks from position 0." if with_room else
            "The two indexes found different cached tokens even where the pool held every block (listed below).")
    said += (f" They parted in: {'; '.join(differ)}." if differ
             else " They found the same tokens in every run here, evicting or not.")
    return Block(paragraphs=[said])


def few_shot_view(record: dict[str, Any]) -> Block:
    groups = summary(record, "few_shot")["order_groups"]
    predicted = summary(record, "few_shot")["predicted_hit_rate"]
    measured = run(record, "few_shot", "hash")["figures"]["hit_rate"]
    return Block(paragraphs=[
        f"{groups['shared_order_requests']} of the requests list the examples in one order, "
        f"{groups['own_order_requests']} each in an order of its own. With every block kept (hash chain, first come), "
        f"the first request in the shared order found {groups['shared_order_first']:,} tokens cached and the later "
        f"ones {groups['shared_order_later_min']:,}–{groups['shared_order_later_max']:,}; a request in its own order "
        f"found {groups['own_order_min']:,}–{groups['own_order_max']:,}, the whole blocks of the instruction before "
        f"the first example. The examples are the same; a prefix cache matches tokens from position 0, so a "
        f"reordered list shares only the head in front of it. The prefix rule (each request finds its longest common "
        f"prefix with an earlier one, in whole blocks) predicts a hit rate of {format_percent(predicted)}; the run "
        f"found {format_percent(measured)}."])


def order_view(record: dict[str, Any]) -> Block:
    """Longest prefix first against first come, in the pool that forces eviction: hit rates, and TTFT worded by
    whether the runs' middle halves part."""
    rows = []
    for name in record["workloads"]:
        for caching in ("hash", "radix"):
            fcfs, lpm = (run(record, name, caching, order, "evicts")["figures"] for order in ("fcfs", "longest-prefix"))
            lower = summary(record, name)[f"{caching}-evicts_longest_prefix_ttft_lower"]
            verdict = {True: "lower", False: "higher", None: "within the spread"}[lower]
            rows.append((NAMES[name], CACHING[caching], f"{format_percent(fcfs['hit_rate'])} → "
                         f"{format_percent(lpm['hit_rate'])}", f"{format_seconds(fcfs['ttft_p50_s'])} → "
                         f"{format_seconds(lpm['ttft_p50_s'])} ({verdict})",
                         f"{format_seconds(fcfs['ttft_p99_s'])} → {format_seconds(lpm['ttft_p99_s'])}"))
    return Block(tables=[Table(["workload", "cache", "hit rate", "TTFT p50", "TTFT p99"], rows,
                               caption="First come → longest cached prefix first, in the pool that forces eviction. "
                                       "'lower' or 'higher' only where the middle halves of the two runs' TTFTs do "
                                       "not overlap.")])
