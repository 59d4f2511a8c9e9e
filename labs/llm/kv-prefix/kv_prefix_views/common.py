"""Names the lab's views share, and the runs they read."""

from __future__ import annotations

from typing import Any

from site_hooks.formatting import format_ratio, format_seconds

NAMES = {"shared_system": "one shared system prompt", "multi_turn": "multi-turn chats",
         "few_shot": "few-shot prompts, examples reordered"}
CACHING = {"off": "off", "hash": "hash chain", "radix": "radix tree"}
ORDER = {"fcfs": "first come", "longest-prefix": "longest prefix first"}
POOL = {"holds": "holds the working set", "evicts": "forces eviction"}


def run(record: dict[str, Any], workload: str, caching: str, order: str = "fcfs", pool: str = "holds") -> dict[str, Any]:
    return record["workloads"][workload]["runs"][f"{caching}-{order}-{pool}"]


def summary(record: dict[str, Any], workload: str) -> dict[str, Any]:
    return record["workloads"][workload]["figures"]


def ttft_sentence(record: dict[str, Any], workload: str, pool: str = "holds") -> str:
    """Median TTFT with the hash-chain cache against without, worded by whether the middle halves part."""
    off, on = run(record, workload, "off", pool=pool)["figures"], run(record, workload, "hash", pool=pool)["figures"]
    lower = summary(record, workload)[f"hash-fcfs-{pool}_ttft_lower"]
    ratio = format_ratio(summary(record, workload)[f"hash-fcfs-{pool}_ttft_p50_over_off"])
    numbers = f"median {format_seconds(on['ttft_p50_s'])} against {format_seconds(off['ttft_p50_s'])}, {ratio}"
    if lower is True:
        return f"caching cut the time to first token ({numbers}; the middle halves of the two runs do not overlap)"
    if lower is False:
        return f"caching raised the time to first token ({numbers}; the middle halves of the two runs do not overlap)"
    return f"the time to first token moved within the runs' own spread ({numbers}): this run cannot tell"
