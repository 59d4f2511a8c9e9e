"""The table cells and the occupancy chart the admission, cancellation and rate views share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from site_hooks.formatting import format_latency, format_percent, join
from site_hooks.timeline_chart import timeline


def pct(summary: dict[str, Any], name: str, q: str) -> float | None:
    """One stored percentile of a latency, None where no request was measured."""
    return (summary[name] or {}).get(q)


def spread(summary: dict[str, Any], name: str) -> str:
    """A latency's median and 99th percentile in one cell."""
    return f"{format_latency(pct(summary, name, 'p50'))} / {format_latency(pct(summary, name, 'p99'))}"


def percent(share: float | None) -> str:
    """A stored share as a whole percentage; 'n/a' where the record has none (a share of nothing)."""
    return "n/a" if share is None else format_percent(share)


def short_label(run: dict[str, Any]) -> str:
    """A policy's name short enough for a table cell: its limit, not its derivation."""
    if run["name"] == "kv_budget_bytes":
        return f"KV bytes, {run['server']['budget_blocks']}-block budget"
    return f"count, at most {run['options'][-1]} running"


def blocks_timeline(runs: Sequence[tuple[str, dict[str, Any]]], limits: Sequence[tuple[int, str]], title: str,
                    description: str) -> str:
    """Blocks in use against time, one line per run from its /metrics samples, the pool and budgets dashed."""
    lines = [(label, [(s["t_s"], s["used_blocks"]) for s in run["occupancy"]]) for label, run in runs]
    return timeline(lines, limits, title, description, x_label="seconds since the first request",
                    y_label="KV blocks in use")


def thread_counts(counts: Sequence[int]) -> str:
    """'1 thread', '1 and 2 threads': the thread counts a table's rows were timed at."""
    return join([f"{count:,}" for count in counts]) + (" thread" if list(counts) == [1] else " threads")
