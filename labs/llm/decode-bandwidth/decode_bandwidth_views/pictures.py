"""The page's concept diagrams: the bytes of one step, weights against KV, drawn from formulas.step_bytes for
every batch x context of the headline grid; and which regime holds in each cell (formulas.regime on the record's
two floors and medians). site_hooks.diagrams draws them."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import (
    BYTES_PER_ELEMENT,
    REGIMES,
    best_ours,
    cell_table,
    headline_key,
    regime,
    step_bytes,
)
from site_hooks.blocks import Block
from site_hooks.diagrams import Canvas, Diagram, legend
from site_hooks.formatting import format_bytes, format_ms, format_ratio, join

from .common import threads_text

SEGMENTS = (("weights", "old", "weights, read once"), ("kv_read", "new", "KV cache, read"),
            ("rest", "shared", "KV written and embedding rows"))
REGIME_FILLS = {"memory": "old", "compute": "new", "overhead": "shared"}
COMPARED = ("ours", "hf-dynamic")  # the regime grids: the fastest of this lab's modes, and transformers' dynamic cache


def headline_groups(record: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    dtype, threads = headline_key(record)
    return {(g["batch"], g["context"]): g for g in record["groups"] if (g["dtype"], g["threads"]) == (dtype, threads)}


def bar_rows(record: dict[str, Any]) -> list[tuple[int, int, dict[str, int]]]:
    """(batch, context, bytes by segment) for every headline cell, from the lab's own byte formula."""
    model, bench = record["config"]["model"], record["config"]["benchmark"]
    size = BYTES_PER_ELEMENT[bench["dtype"]]
    rows = []
    for batch in bench["batches"]:
        for context in bench["contexts"]:
            needed = step_bytes(model, size, batch, context)
            rows.append((batch, context, {"weights": needed["weights"], "kv_read": needed["kv_read"],
                                          "rest": needed["kv_written"] + needed["embedding_rows"],
                                          "total": needed["total"]}))
    return rows


def stacked_bar(canvas: Canvas, x: float, y: float, height: float, parts: list[tuple[float, str]],
                scale: float) -> None:
    """Segments left to right, each ``amount x scale`` wide in its fill; slivers under half a unit are left out."""
    for amount, fill in parts:
        width = amount * scale
        if width >= 0.5:
            canvas.rect(x, y, width, height, fill)
        x += width


def step_bytes_view(record: dict[str, Any]) -> Block:
    """One stacked bar per batch x context: weight bytes, KV bytes, the rest; at the right, the floor they set."""
    dtype, threads = headline_key(record)
    groups = headline_groups(record)
    rows = bar_rows(record)
    widest = max(parts["total"] for _, _, parts in rows)
    left, bar_w, row_h, gap = 128, 230, 26, 12
    batches = sorted({batch for batch, _, _ in rows})
    height = 30 + len(rows) * row_h + (len(batches) - 1) * gap + 24 * len(SEGMENTS) + 16
    canvas = Canvas(width=left + bar_w + 170, height=height, slug="step-bytes",
                    title=f"The bytes one decode step must move, {dtype}",
                    description="; ".join(f"batch {b}, context {c}: {format_bytes(p['weights'])} of weights, "
                                          f"{format_bytes(p['kv_read'])} of KV, floor "
                                          f"{format_ms(groups[(b, c)]['floor_ns_per_step'])} ms" for b, c, p in rows))
    canvas.text(left + bar_w + 14, 16, "bytes → floor", anchor="start", size=14, weight="bold")
    y = 30
    for index, (batch, context, parts) in enumerate(rows):
        if index and batch != rows[index - 1][0]:
            y += gap
        canvas.text(left - 10, y + row_h / 2 + 5, f"B {batch} × T {context:,}", anchor="end", size=14)
        stacked_bar(canvas, left, y + 4, row_h - 8, [(parts[key], fill) for key, fill, _ in SEGMENTS], bar_w / widest)
        floor = groups[(batch, context)]["floor_ns_per_step"]
        canvas.text(left + bar_w + 14, y + row_h / 2 + 5, f"{format_bytes(parts['total'])} → {format_ms(floor)} ms",
                    anchor="start", size=14)
        y += row_h
    legend(canvas, left, y + 12, [(fill, text) for _, fill, text in SEGMENTS])
    over = [(b, c) for b, c, p in rows if p["kv_read"] > p["weights"]]
    crossover = record["kv_crossover"]["batch_x_context"]
    caption = (f"Bars to one scale, from formulas.step_bytes on the record's model, {dtype}. The weights cost the same "
               f"at every batch; the KV read grows with batch × context and equals them at B × T ≈ {crossover:,.0f}"
               + (f", passed in {len(over)} of {len(rows)} cells." if over else ", which no cell here reaches.")
               + f" The right column divides each total by the fastest read bandwidth measured at "
               f"{threads_text(threads)}: no step can be faster than that floor.")
    return Block(css="lab-picture", diagrams=[Diagram(canvas.svg(), caption)])


def cell_regimes(record: dict[str, Any], who: str) -> dict[tuple[int, int], tuple[str, float, str]]:
    """(batch, context) -> (regime key, median ÷ higher floor, mode) for the fastest of ours or for one mode."""
    dtype, threads = headline_key(record)
    cells = cell_table(record)
    result = {}
    for (batch, context), group in headline_groups(record).items():
        key = (dtype, threads, batch, context)
        cell = best_ours(cells, key) if who == "ours" else cells[(*key, who)]
        memory, compute = group["floor_ns_per_step"], group["compute_floor_ns_per_step"]
        result[(batch, context)] = (regime(cell["median_ns_per_step"], memory, compute),
                                    cell["median_ns_per_step"] / max(memory, compute), cell["mode"])
    return result


def regime_grid_view(record: dict[str, Any]) -> Block:
    """Batch x context grids coloured by the regime that holds, for the fastest of ours and for hf-dynamic."""
    bench = record["config"]["benchmark"]
    batches, contexts = bench["batches"], bench["contexts"]
    cell_w, cell_h, left, top = 88, 58, 56, 44
    diagrams = []
    for who in COMPARED:
        regimes = cell_regimes(record, who)
        name = "fastest of this lab's modes" if who == "ours" else who
        canvas = Canvas(width=left + len(contexts) * cell_w + 10, height=top + len(batches) * cell_h + 8,
                        slug=f"regimes-{who}", max_width="22rem", title=f"Which bound holds: {name}",
                        description="; ".join(f"batch {b}, context {c}: {REGIMES[r]}, {format_ratio(x)} the higher floor"
                                              for (b, c), (r, x, _) in regimes.items()))
        canvas.text(left + len(contexts) * cell_w / 2, 14, "context (positions) →", size=12)
        for col, context in enumerate(contexts):
            canvas.text(left + col * cell_w + cell_w / 2, top - 8, f"{context:,}", size=12)
        for row, batch in enumerate(batches):
            y = top + row * cell_h
            canvas.text(left - 8, y + cell_h / 2 + 4, f"B {batch}", anchor="end", size=12)
            for col, context in enumerate(contexts):
                key, times, _ = regimes[(batch, context)]
                group = headline_groups(record)[(batch, context)]
                higher = "compute" if group["compute_floor_ns_per_step"] > group["floor_ns_per_step"] else "memory"
                x = left + col * cell_w
                canvas.rect(x, y, cell_w - 3, cell_h - 3, REGIME_FILLS[key], rx=3)
                canvas.text(x + cell_w / 2 - 1, y + 17, REGIMES[key].split("-")[0], size=12, weight="bold")
                canvas.text(x + cell_w / 2 - 1, y + 32, format_ratio(times), size=11)
                canvas.text(x + cell_w / 2 - 1, y + 46, f"{higher} floor", size=11)
        diagrams.append(Diagram(canvas.svg(), canvas.title))
    ours = cell_regimes(record, "ours")
    counts = {label: n for key, label in REGIMES.items() if (n := sum(1 for r, _, _ in ours.values() if r == key))}
    caption = ("Each cell sets the median step against the higher of its two floors (bytes ÷ measured bandwidth, "
               "flops ÷ measured matmul rate), which names the bound: bandwidth or compute. Where that floor explains "
               "under half of the step, most of the time goes to neither, and the cell is overhead-bound. The faster of "
               "this lab's caches: " + join([f"{n} {label}" for label, n in counts.items()]) + f" of {len(ours)} cells. "
               "Under each regime: the step ÷ the higher floor, and which floor that is.")
    return Block(css="lab-picture", diagrams=diagrams, notes=[caption])
