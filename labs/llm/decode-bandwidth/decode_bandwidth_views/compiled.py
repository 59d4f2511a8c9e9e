"""ours-compiled beside ours-prealloc at batch 1: the same step with generated one-row multiplies, and its compile cost."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import cell_table
from decode_bandwidth.grid import COMPILED
from site_hooks.blocks import Block, Strong, Table
from site_hooks.formatting import format_ms, format_ratio, format_seconds

from .common import ratio_range, threads_text

EAGER = "ours-prealloc"


def batch_1_pairs(record: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(group, ours-prealloc cell, ours-compiled cell) of every batch-1 group, in the record's order."""
    cells = cell_table(record)
    pairs = []
    for group in record["groups"]:
        if group["batch"] == 1:
            key = (group["dtype"], group["threads"], 1, group["context"])
            pairs.append((group, cells[(*key, EAGER)], cells[(*key, COMPILED)]))
    return pairs


def compile_text(record: dict[str, Any]) -> str:
    return ", ".join(f"{format_seconds(seconds)} in {key.split('/')[0]} at {threads_text(int(key.split('/')[1]))}"
                     for key, seconds in record["compiled"]["compile_s"].items())


def compiled_summary_view(record: dict[str, Any]) -> Block:
    """The body's two sentences: how much the generated loop bought per dtype and thread count, and its cost."""
    by_run: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for group, _, compiled in batch_1_pairs(record):
        by_run.setdefault((group["dtype"], group["threads"]), []).append(
            (group["compiled_over_prealloc"], compiled["step_over_floor"]))
    parts = [f"{ratio_range([r for r, _ in pairs])} of {EAGER}'s step in {dtype} at {threads_text(threads)} "
             f"({ratio_range([f for _, f in pairs])} its floor)" for (dtype, threads), pairs in by_run.items()]
    return Block(paragraphs=[
        f"At batch 1 {COMPILED} took " + "; ".join(parts) + ", over every context.",
        "The price is a compile, once per dtype and thread count before anything is timed, "
        + ("from an empty cache: " if record["compiled"]["cold_cache"] else
           "reusing what earlier runs left in inductor's cache (a fresh machine pays more): ")
        + f"{compile_text(record)}.",
    ])


def compiled_view(record: dict[str, Any]) -> Block:
    rows, ratios = [], []
    for group, eager, compiled in batch_1_pairs(record):
        ratio = group["compiled_over_prealloc"]
        ratios.append(ratio)
        better = compiled["median_ns_per_step"] < eager["median_ns_per_step"]
        eager_ms, compiled_ms = format_ms(eager["median_ns_per_step"]), format_ms(compiled["median_ns_per_step"])
        rows.append((f"{group['dtype']}, {threads_text(group['threads'])}", f"{group['context']:,}",
                     eager_ms if better else Strong(eager_ms), format_ratio(eager["step_over_floor"]),
                     Strong(compiled_ms) if better else compiled_ms,
                     format_ratio(compiled["step_over_floor"]), format_ratio(ratio)))
    table = Table(headings=["Dtype, threads", "Context", f"{EAGER} (ms)", "÷ floor", f"{COMPILED} (ms)", "÷ floor",
                            f"{COMPILED} ÷ {EAGER}"], rows=rows)
    return Block(tables=[table], notes=[
        f"Median step at batch 1, every batch-1 group of the run; the faster of the two in bold. {COMPILED} took "
        f"{ratio_range(ratios)} the step time of {EAGER}.",
        f"Compiling its one-row kernels: {compile_text(record)}. Kernel: {record['compiled']['kernel']}.",
    ])
