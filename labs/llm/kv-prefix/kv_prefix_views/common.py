"""Names the lab's views share, the runs they read, and times written alike within one sentence or table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from site_hooks.formatting import join

NAMES = {"shared_system": "one shared system prompt", "multi_turn": "multi-turn chats",
         "few_shot": "few-shot prompts, examples reordered"}
CACHING = {"off": "off", "hash": "hash chain", "radix": "radix tree"}
ORDER = {"fcfs": "first come", "longest-prefix": "longest prefix first"}
POOL = {"holds": "holds the working set", "evicts": "forces eviction"}
MILLI, MICRO = 1e-3, 1e-6

# How the middle halves of a cached run's TTFTs lay against the uncached run's (labkit.summary.halves_below), said
# first in a sentence and said again after it.
FIRST = {"below": "lay wholly below the uncached run's", "overlap": "overlapped the uncached run's",
         "above": "lay wholly above the uncached run's"}
AGAIN = {"below": "they lay wholly below", "overlap": "they overlapped", "above": "they lay wholly above"}
LEAD = {"below": "caching cut the time to first token", "above": "caching raised the time to first token",
        "overlap": "the time to first token moved within the runs' own spread"}


def times(values: Sequence[float]) -> list[str]:
    """Durations that stand side by side (one sentence, one table) in one unit and one precision, so that a
    sentence never reads '1 s against 7 s' beside '929 ms': seconds to the hundredth once the largest reaches a
    second; else milliseconds (or microseconds) to three figures of the largest."""
    top = max(abs(value) for value in values)
    if top >= 1:
        return [f"{value:.2f} s" for value in values]
    if top >= MILLI:
        shown, unit = [value / MILLI for value in values], "ms"
    else:
        shown, unit = [value / MICRO for value in values], "µs"
    peak = max(abs(value) for value in shown)
    decimals = 0 if peak >= 100 else 1 if peak >= 10 else 2
    return [f"{value:.{decimals}f} {unit}" for value in shown]


def one_time(value: float) -> str:
    """A duration alone in its sentence, written as ``times`` writes it."""
    return times([value])[0]


def run(record: dict[str, Any], workload: str, caching: str, order: str = "fcfs", pool: str = "holds") -> dict[str, Any]:
    return record["workloads"][workload]["runs"][f"{caching}-{order}-{pool}"]


def summary(record: dict[str, Any], workload: str) -> dict[str, Any]:
    return record["workloads"][workload]["figures"]


def request_by_request(record: dict[str, Any], workload: str, pool: str) -> str:
    """'; request by request, ... took 0.65x (middle half 0.53-0.85) of its uncached time, wholly below 1': the hash
    chain's first-come run paired with the uncached one request by request, where the spread across requests hides
    what each request gained (requests differ in length far more than one request's two runs do)."""
    paired = summary(record, workload).get(f"hash-fcfs-{pool}_ttft_over_off_per_request")
    if not paired:
        return ""
    side = (", wholly below 1" if paired["high"] < 1 else ", wholly above 1" if paired["low"] > 1 else
            ", a middle half that holds 1")
    return (f"; request by request, the hash chain's first-come run took {paired['median']:.2f}× (middle half "
            f"{paired['low']:.2f}–{paired['high']:.2f}) of each request's uncached time{side}")


def ttft_sentence(record: dict[str, Any], workload: str, pool: str = "holds") -> str:
    """Time to first token with the cache against without, read over every cached run in ``pool`` that did the
    same work (same tokens found and prefilled): in how many the middle half of the requests' TTFTs lay wholly
    below the uncached run's, overlapped it or lay above it. One verdict only where all of them agree, so the
    verdict never depends on which of them a table shows."""
    alike = summary(record, workload)[f"same_work_{pool}"]
    low, high, off = times([alike["ttft_p50_min_s"], alike["ttft_p50_max_s"], alike["off_ttft_p50_s"]])
    unit = f" {high.split()[-1]}"  # one unit for the range: "1.34–1.67 s"
    medians = f"median {low} against {off}" if low == high else f"medians {low.removesuffix(unit)}–{high} against {off}"
    counted = {kind: alike[kind] for kind in ("below", "overlap", "above") if alike[kind]}
    if len(counted) == 1:
        (kind,) = counted
        group = ("in the one cached run that did this work the middle half of TTFT" if alike["runs"] == 1 else
                 f"in all {alike['runs']} cached runs that did the same work the middle halves of TTFT")
        tail = f": across requests these runs cannot tell{request_by_request(record, workload, pool)}" \
            if kind == "overlap" else ""
        return f"{LEAD[kind]}: {group} {FIRST[kind]} ({medians}){tail}"
    first, *rest = counted
    parts = [f"in {counted[first]} of the {alike['runs']} cached runs that did the same work the middle halves of TTFT "
             f"{FIRST[first]}", *(f"in {counted[kind]} {AGAIN[kind]}" for kind in rest)]
    return f"the cached runs part on time to first token: {join(parts)} ({medians})"
