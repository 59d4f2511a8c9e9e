"""Time per step against the floor: the roofline charts, every batch against its floor, then one per batch."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import cell_table
from decode_bandwidth.grid import headline_key
from site_hooks.blocks import Block, Chart
from site_hooks.chart import Series, line_chart

from .common import threads_text

CHARTED = ["ours-prealloc", "ours-concat", "hf-dynamic"]  # with the floors: the per-batch charts' lines
X_LABEL, Y_LABEL = "context (positions attended)", "ms per step (median, whiskers min–max)"


def step_series(label: str, cells: list[dict[str, Any]], contexts: list[int], **style: Any) -> Series:
    return Series(label, contexts, [c["median_ns_per_step"] / 1e6 for c in cells],
                  [c["min_ns_per_step"] / 1e6 for c in cells], [c["max_ns_per_step"] / 1e6 for c in cells], **style)


def floor_series(label: str, values_ns: list[float], contexts: list[int], **style: Any) -> Series:
    values = [value / 1e6 for value in values_ns]
    return Series(label, contexts, values, values, values, dashed=True, **style)


def roofline_view(record: dict[str, Any]) -> Block:
    dtype, threads = headline_key(record)
    bench = record["config"]["benchmark"]
    cells = cell_table(record)
    groups = {(g["batch"], g["context"]): g for g in record["groups"] if (g["dtype"], g["threads"]) == (dtype, threads)}
    contexts = bench["contexts"]
    overview = []  # the roofline: this lab's preallocated step against its floor, one pair of lines per batch
    for index, batch in enumerate(bench["batches"]):  # a batch's step and its floor share a colour
        picked = [cells[(dtype, threads, batch, c, "ours-prealloc")] for c in contexts]
        overview.append(step_series(f"ours-prealloc, batch {batch}", picked, contexts, colour_of=index))
        overview.append(floor_series(f"floor, batch {batch}", [groups[(batch, c)]["floor_ns_per_step"] for c in contexts],
                                     contexts, colour_of=index))
    title = f"Decode step against the memory floor, every batch ({dtype}, {threads_text(threads)})"
    description = "; ".join(f"{s.label}: " + ", ".join(f"context {c} {y:.1f} ms" for c, y in zip(s.x, s.y))
                            for s in overview)
    charts = [Chart(line_chart(overview, title, X_LABEL, Y_LABEL, description), title)]
    for batch in bench["batches"]:
        series = [step_series(mode, [cells[(dtype, threads, batch, c, mode)] for c in contexts], contexts)
                  for mode in CHARTED]
        row = [groups[(batch, c)] for c in contexts]
        series.append(floor_series("memory floor", [g["floor_ns_per_step"] for g in row], contexts))
        series.append(floor_series("arithmetic floor", [g["compute_floor_ns_per_step"] for g in row], contexts))
        description = "; ".join(
            f"context {c}: " + ", ".join(f"{s.label} {s.y[i]:.1f} ms" for s in series) for i, c in enumerate(contexts))
        title = f"Decode step at batch {batch} ({dtype}, {threads_text(threads)})"
        charts.append(Chart(line_chart(series, title, X_LABEL, Y_LABEL, description), title))
    return Block(charts=charts, notes=[
        "Median time of one decode step against the number of positions it attends over, first every batch against "
        "its floor, then one chart per batch size with all modes; whiskers span the fastest and slowest repetition. "
        "The memory floor is the bytes the step must move ÷ the read bandwidth measured in the same run. hf-static "
        "is in the table of every cell, in the appendix."])
