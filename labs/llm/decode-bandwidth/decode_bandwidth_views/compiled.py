"""ours-compiled beside ours-prealloc at batch 1: the same step with generated one-row multiplies, and its compile cost."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.formulas import COMPILED, cell_table
from site_hooks.blocks import Block, Strong, Table
from site_hooks.formatting import format_ms, format_ratio, format_seconds

from .wording import ratio_range, threads_text

EAGER = "ours-prealloc"


def compiled_view(record: dict[str, Any]) -> Block:
    cells = cell_table(record)
    compile_s = record["compiled"]["compile_s"]
    rows, ratios = [], []
    for group in record["groups"]:
        if group["batch"] != 1:
            continue
        key = (group["dtype"], group["threads"], 1, group["context"])
        eager, compiled = cells[(*key, EAGER)], cells[(*key, COMPILED)]
        ratio = compiled["median_ns_per_step"] / eager["median_ns_per_step"]
        ratios.append(ratio)
        better = compiled["median_ns_per_step"] < eager["median_ns_per_step"]
        rows.append((f"{group['dtype']}, {threads_text(group['threads'])}", f"{group['context']:,}",
                     format_ms(eager["median_ns_per_step"]), format_ratio(eager["step_over_floor"]),
                     Strong(format_ms(compiled["median_ns_per_step"])) if better else format_ms(compiled["median_ns_per_step"]),
                     format_ratio(compiled["step_over_floor"]), format_ratio(ratio)))
    table = Table(headings=["Dtype, threads", "Context", f"{EAGER} (ms)", "÷ floor", f"{COMPILED} (ms)", "÷ floor",
                            f"{COMPILED} ÷ {EAGER}"], rows=rows)
    compiles = ", ".join(f"{format_seconds(seconds)} in {key.split('/')[0]} at {threads_text(int(key.split('/')[1]))}"
                         for key, seconds in compile_s.items())
    return Block(css="lab-decode-compiled", tables=[table], notes=[
        f"Median step at batch 1, every batch-1 group of the run; the faster of the two in bold. {COMPILED} took "
        f"{ratio_range(ratios)} the step time of {EAGER}.",
        f"Compiling its one-row kernels, once per dtype and thread count before anything was timed: {compiles}. "
        f"Kernel: {record['compiled']['kernel']}.",
    ])
