"""The page's concept diagrams: the bytes of one step, weights against KV, as the record stores them from
step_bytes for every batch x context of the headline grid; and which regime holds in each cell
(formulas.regime on the record's two floors and medians, stored per cell). site_hooks.diagrams draws them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from decode_bandwidth.figures.formulas import REGIMES, best_cell, cell_table
from decode_bandwidth.grid import headline_key
from site_hooks.blocks import Block
from site_hooks.chart import log_ticks
from site_hooks.diagrams import Canvas, Diagram, legend
from site_hooks.formatting import format_bytes, format_ms, format_ratio, join

from .common import threads_text

# Each bar's segments: the step's byte counts (groups[].bytes) each draws, its fill and its legend.
SEGMENTS = ((("weights",), "old", "weights, read once"), (("kv_read",), "new", "KV cache, read"),
            (("kv_written", "embedding_rows"), "shared", "KV written and embedding rows"))
REGIME_FILLS = {"memory": "old", "compute": "new", "overhead": "shared", "unresolved": "empty"}
REGIME_SHORT = {"memory": "bandwidth", "compute": "compute", "overhead": "overhead", "unresolved": "unclear"}
COMPARED = ("ours", "hf-dynamic")  # the regime grids: the fastest of this lab's modes, and transformers' dynamic cache


def headline_groups(record: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    dtype, threads = headline_key(record)
    return {(g["batch"], g["context"]): g for g in record["groups"] if (g["dtype"], g["threads"]) == (dtype, threads)}


def stacked_bar(canvas: Canvas, x: float, y: float, height: float, parts: Sequence[tuple[Sequence[float], str]],
                scale: float) -> None:
    """Segments left to right, each as wide as its amounts together x ``scale``, in its fill; slivers under half a
    unit are left out."""
    for amounts, fill in parts:
        width = sum(amounts) * scale
        if width >= 0.5:
            canvas.rect(x, y, width, height, fill)
        x += width


def step_bytes_canvas(groups: Sequence[dict[str, Any]], title: str, description: str) -> Canvas:
    """One bar per group, a gap between batches, each total and its floor at the right, the legend below."""
    left, bar_w, row_h, gap = 128, 230, 26, 12
    batches = {group["batch"] for group in groups}
    canvas = Canvas(width=left + bar_w + 170, height=30 + len(groups) * row_h + (len(batches) - 1) * gap
                    + 24 * len(SEGMENTS) + 16, slug="step-bytes", title=title, description=description)
    widest = max(group["bytes"]["total"] for group in groups)
    canvas.text(left + bar_w + 14, 16, "bytes → floor", anchor="start", size=14, weight="bold")
    y = 30
    for index, group in enumerate(groups):
        if index and group["batch"] != groups[index - 1]["batch"]:
            y += gap
        canvas.text(left - 10, y + row_h / 2 + 5, f"B {group['batch']} × T {group['context']:,}", anchor="end", size=14)
        stacked_bar(canvas, left, y + 4, row_h - 8,
                    [([group["bytes"][key] for key in keys], fill) for keys, fill, _ in SEGMENTS], bar_w / widest)
        canvas.text(left + bar_w + 14, y + row_h / 2 + 5,
                    f"{format_bytes(group['bytes']['total'])} → {format_ms(group['floor_ns_per_step'])} ms",
                    anchor="start", size=14)
        y += row_h
    legend(canvas, left, y + 12, [(fill, text) for _, fill, text in SEGMENTS])
    return canvas


def step_bytes_view(record: dict[str, Any]) -> Block:
    """One stacked bar per batch x context: weight bytes, KV bytes, the rest; at the right, the floor they set."""
    dtype, threads = headline_key(record)
    groups = list(headline_groups(record).values())
    canvas = step_bytes_canvas(groups, f"The bytes one decode step must move, {dtype}",
                               "; ".join(f"batch {g['batch']}, context {g['context']}: "
                                         f"{format_bytes(g['bytes']['weights'])} of weights, "
                                         f"{format_bytes(g['bytes']['kv_read'])} of KV, floor "
                                         f"{format_ms(g['floor_ns_per_step'])} ms" for g in groups))
    over = [g for g in groups if g["bytes"]["kv_read"] > g["bytes"]["weights"]]
    crossover = record["kv_crossover"]["batch_x_context"]
    reached = f", passed in {len(over)} of {len(groups)} cells." if over else ", which no cell here reaches."
    caption = (f"Bars to one scale, from step_bytes on the record's model, {dtype}. The weights cost the same "
               f"at every batch; the KV read grows with batch × context and equals them at B × T ≈ {crossover:,.0f}"
               f"{reached} The right column divides each total by the read bandwidth measured beside that cell's "
               f"steps at {threads_text(threads)}, its floor: no step can be faster than that.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])


def cell_regimes(record: dict[str, Any], who: str) -> dict[tuple[int, int], dict[str, Any]]:
    """(batch, context) -> the cell of the fastest of ours (who = "ours") or of one mode, with its stored regime."""
    dtype, threads = headline_key(record)
    cells = cell_table(record)
    return {(batch, context): best_cell(record, (dtype, threads, batch, context)) if who == "ours"
            else cells[(dtype, threads, batch, context, who)] for batch, context in headline_groups(record)}


def regime_canvas(record: dict[str, Any], regimes: dict[tuple[int, int], dict[str, Any]], who: str, title: str,
                  description: str) -> Canvas:
    """Contexts across, batches down; each cell filled by its regime, with its step ÷ the higher floor under it."""
    bench = record["config"]["benchmark"]
    batches, contexts = bench["batches"], bench["contexts"]
    groups = headline_groups(record)
    cell_w, cell_h, left, top = 88, 58, 56, 44
    canvas = Canvas(width=left + len(contexts) * cell_w + 10, height=top + len(batches) * cell_h + 8,
                    slug=f"regimes-{who}", max_width="22rem", title=title, description=description)
    canvas.text(left + len(contexts) * cell_w / 2, 14, "context (positions) →", size=12)
    for col, context in enumerate(contexts):
        canvas.text(left + col * cell_w + cell_w / 2, top - 8, f"{context:,}", size=12)
    for row, batch in enumerate(batches):
        y = top + row * cell_h
        canvas.text(left - 8, y + cell_h / 2 + 4, f"B {batch}", anchor="end", size=12)
        for col, context in enumerate(contexts):
            cell, group = regimes[(batch, context)], groups[(batch, context)]
            higher = "compute" if group["compute_floor_ns_per_step"] > group["floor_ns_per_step"] else "memory"
            x = left + col * cell_w
            canvas.rect(x, y, cell_w - 3, cell_h - 3, REGIME_FILLS[cell["regime"]], rx=3)
            canvas.text(x + cell_w / 2 - 1, y + 17, REGIME_SHORT[cell["regime"]], size=12, weight="bold")
            canvas.text(x + cell_w / 2 - 1, y + 32, format_ratio(cell["step_over_higher_floor"]), size=11)
            canvas.text(x + cell_w / 2 - 1, y + 46, f"{higher} floor", size=11)
    return canvas


def regime_grid_view(record: dict[str, Any]) -> Block:
    """Batch x context grids coloured by the regime that holds, for the fastest of ours and for hf-dynamic."""
    diagrams = []
    for who in COMPARED:
        regimes = cell_regimes(record, who)
        name = "fastest of this lab's modes" if who == "ours" else who
        canvas = regime_canvas(record, regimes, who, f"Which bound holds: {name}",
                               "; ".join(f"batch {b}, context {c}: {REGIMES[cell['regime']]}, "
                                         f"{format_ratio(cell['step_over_higher_floor'])} the higher floor"
                                         for (b, c), cell in regimes.items()))
        diagrams.append(Diagram(canvas.svg(), canvas.title))
    counts = join([f"{n} {label}" for key, label in REGIMES.items() if (n := record["headline_regimes"][key])])
    caption = ("Each cell sets the median step against the higher of its two floors (bytes ÷ measured bandwidth, "
               "flops ÷ measured matmul rate), which names the bound: bandwidth or compute. Where that floor explains "
               "under half of the step, most of the time goes to neither, and the cell is overhead-bound; where the middle "
               "half of a cell's repetitions falls on both sides of that line, or the line moves across it between its "
               "group's floor and the run's best read, the run cannot say, and it reads unclear. The faster of "
               f"this lab's caches: {counts} of {len(headline_groups(record))} cells. "
               "Under each regime: the step ÷ the higher floor, and which floor that is.")
    return Block(diagrams=diagrams, notes=[caption])


# The roofline: each mode's fill, by the order of the grid's modes (ours first, then transformers').
ROOFLINE_FILLS = ("new", "old", "shared", "wrong", "empty")


def roofline_canvas(record: dict[str, Any]) -> Canvas:
    """Every timed cell of the headline grid placed by its arithmetic intensity (flops per byte of its step) and
    the flops per second it achieved, on log axes, under this run's two ceilings: the read bandwidth (a slope) and
    the matmul rate (flat). A cell on the slope ran at its memory floor; far below it, at neither ceiling."""
    dtype, threads = headline_key(record)
    bandwidth = record["hardware"]["bandwidth"][str(threads)]["bytes_per_s"]
    peak = record["hardware"]["matmul"][f"{dtype}/{threads}"]["flops_per_s"]
    groups = {(g["batch"], g["context"]): g for g in record["groups"] if (g["dtype"], g["threads"]) == (dtype, threads)}
    cells = [c for c in cell_table(record).values() if (c["dtype"], c["threads"]) == (dtype, threads)]
    modes = list(dict.fromkeys(c["mode"] for c in cells))
    intensities = [g["flops_per_byte"] for g in groups.values()]
    ridge = peak / bandwidth
    x_low, x_high = min(intensities) / 2, max(ridge, max(intensities)) * 2
    y_low, y_high = min(c["flops_per_s"] for c in cells) / 2, peak * 2
    width, left, top, plot_w, plot_h = 640, 60, 34, 560, 290

    def px(x: float) -> float:
        return round(left + plot_w * math.log(x / x_low) / math.log(x_high / x_low), 1)

    def py(y: float) -> float:
        return round(top + plot_h * (1 - math.log(y / y_low) / math.log(y_high / y_low)), 1)

    canvas = Canvas(width=width, height=top + plot_h + 60 + 20 * len(modes), slug="roofline", max_width="40rem",
                    title=f"Roofline: every cell of the {dtype}, {threads_text(threads)} grid",
                    description="; ".join(f"{c['mode']} batch {c['batch']} context {c['context']}: "
                                          f"{groups[(c['batch'], c['context'])]['flops_per_byte']:.2f} flops per byte, "
                                          f"{c['flops_per_s'] / 1e9:.2f} GFLOP/s" for c in cells))
    canvas.line(left, top + plot_h, left + plot_w, top + plot_h)
    canvas.line(left, top, left, top + plot_h)
    for tick in log_ticks(x_low, x_high):
        canvas.text(px(tick), top + plot_h + 16, f"{tick:g}", size=11)
    for tick in log_ticks(y_low, y_high):
        canvas.text(left - 6, py(tick) + 4, f"{tick / 1e9:g}", size=11, anchor="end")
    canvas.text(left + plot_w / 2, top + plot_h + 34, "flops per byte of the step (log)", size=12)
    canvas.text(left - 6, top - 14, "GFLOP/s (log)", size=12, anchor="start")
    # the ceilings: bandwidth x intensity up to the ridge, then the matmul rate
    canvas.line(px(x_low), py(bandwidth * x_low), px(ridge), py(peak), width=2)
    canvas.line(px(ridge), py(peak), px(x_high), py(peak), width=2)
    canvas.text(px(ridge), py(peak) - 8, f"matmul {peak / 1e9:,.0f} GFLOP/s", size=11, anchor="end")
    middle = math.sqrt(x_low * ridge)  # the label sits above the slope, halfway to the ridge
    canvas.text(px(middle) - 6, py(bandwidth * middle) - 8, f"read {bandwidth / 1e9:.1f} GB/s", size=11, anchor="end")
    for cell in cells:
        x, y = px(groups[(cell["batch"], cell["context"])]["flops_per_byte"]), py(cell["flops_per_s"])
        canvas.rect(x - 4, y - 4, 8, 8, ROOFLINE_FILLS[modes.index(cell["mode"]) % len(ROOFLINE_FILLS)], rx=4)
    legend(canvas, left, top + plot_h + 48, [(ROOFLINE_FILLS[i % len(ROOFLINE_FILLS)], mode) for i, mode in enumerate(modes)],
           gap=20)
    return canvas


def roofline_picture_view(record: dict[str, Any]) -> Block:
    """The roofline with every headline cell on it, and what its two ceilings are."""
    canvas = roofline_canvas(record)
    dtype, threads = headline_key(record)
    caption = (f"One dot per timed cell ({dtype}, {threads_text(threads)}): flops per byte of its step across, the "
               "flops per second its median achieved up. On the slope a step ran at its memory floor.")
    return Block(diagrams=[Diagram(canvas.svg(), canvas.title)], notes=[caption])
