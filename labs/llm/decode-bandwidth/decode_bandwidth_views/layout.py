"""The kernels behind a batch-1 multiply, measured: each matrix kind in both layouts, through oneDNN and compiled.
The page's body shows the rates as a chart (``kernel_chart_view``); its appendix has every time (``layout_view``)."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.grid import COMPILED, LAYOUT_KERNELS, headline_key
from site_hooks.blocks import Block, Chart, Strong, Table
from site_hooks.chart import BarGroup, bar_chart
from site_hooks.formatting import format_ms, format_number, format_ratio, join

from .common import gbs

LABELS = {"in_out": "(in, out)", "out_in": "(out, in)"}
# The kernels a row may hold (decode_bandwidth.grid.LAYOUT_KERNELS), in the table's order: the stored layout's two BLAS calls,
# then two more kernels over an (out, in) copy of the same matrix.
KERNELS = dict(zip(LAYOUT_KERNELS, ("addmm, (in, out)", "F.linear, (out, in)", "oneDNN linear, packed",
                                    f"{COMPILED}'s generated loop"), strict=True))


def floor_rate(record: dict[str, Any]) -> tuple[float, str]:
    """The floor's read rate at the headline thread count and the kernel that reached it."""
    _, threads = headline_key(record)
    entry = record["hardware"]["bandwidth"][str(threads)]
    return entry["bytes_per_s"], entry["best_kernel"]


def present_kernels(rows: list[dict[str, Any]]) -> list[str]:
    return [key for key in KERNELS if all(key in row["bytes_per_s"] for row in rows)]


def kernel_chart_view(record: dict[str, Any]) -> Block:
    layout = record["layout"]
    rows, (rate_floor, floor_kernel) = layout["rows"], floor_rate(record)
    present = present_kernels(rows)
    svg = bar_chart([BarGroup(row["kind"], [row["bytes_per_s"][key] / 1e9 for key in present]) for row in rows],
                    series=[KERNELS[key] for key in present],
                    title=f"GB/s each kernel streamed a matrix at, batch {layout['batch']}, {layout['dtype']}",
                    x_label=f"GB/s (the floor's read rate: {gbs(rate_floor)})",
                    description="; ".join(f"{row['kind']}: " + ", ".join(f"{KERNELS[key]} {gbs(row['bytes_per_s'][key])}"
                                                                        for key in present) for row in rows))
    wins: dict[str, list[str]] = {}
    for row in rows:
        wins.setdefault(row["fastest"], []).append(row["kind"])
    slowest = min(rows, key=lambda row: row["fastest_over_floor"])
    quickest = max(rows, key=lambda row: row["fastest_over_floor"])
    low, high = (row["bytes_per_s"][row["fastest"]] for row in (slowest, quickest))
    per_kind = "; ".join(f"{KERNELS[key]} for {join(kinds)}" for key, kinds in wins.items())
    notes = [
        f"Fastest per kind: {per_kind}. The fastest kernel streamed {gbs(low)} to {gbs(high)} "
        f"({format_ratio(slowest['fastest_over_floor'])} to {format_ratio(quickest['fastest_over_floor'])} the floor's "
        f"rate of {gbs(rate_floor)}, which {floor_kernel} reached over the floor's buffer).",
    ]
    missing = [KERNELS[key] for key in KERNELS if key not in present]
    if missing:
        notes.append(f"Not measured in this run: {join(missing)} (absent from this PyTorch build or this dtype).")
    return Block(charts=[Chart(svg, (
        f"One matrix-vector product per matrix, best of {layout['passes']} passes; each pass runs every layer's "
        "matrix of that kind once, as a real step does; a kind whose matrices together fit the last-level cache "
        "can come from the cache and stream faster than the floor's rate."))], notes=notes)


def layout_view(record: dict[str, Any]) -> Block:
    layout = record["layout"]
    rows, (rate_floor, floor_kernel) = layout["rows"], floor_rate(record)
    present = present_kernels(rows)
    table_rows = []
    for row in rows:
        best = row["fastest"]
        cells = [Strong(format_ms(row[f"{key}_ns"])) if key == best else format_ms(row[f"{key}_ns"]) for key in present]
        table_rows.append((row["kind"], f"{row['shape_in_out'][0]} × {row['shape_in_out'][1]}",
                           format_number(row["bytes_per_matrix"]), *cells, gbs(row["bytes_per_s"][best]),
                           format_ratio(row["fastest_over_floor"]), LABELS[row["stored"]]))
    table = Table(headings=["Matrix", "Shape (in, out)", "Bytes each", *(f"{KERNELS[key]} (ms)" for key in present),
                            "Fastest streamed at", "÷ floor's rate", "ours-prealloc stores"], rows=table_rows)
    stored_faster = [row for row in rows if row[f"{row['stored']}_ns"] <= row["out_in_ns" if row["stored"] == "in_out"
                                                                             else "in_out_ns"]]
    notes = [
        f"The times behind the kernel chart: milliseconds per matrix at batch {layout['batch']} in {layout['dtype']}, "
        f"the fastest kernel in bold, its rate against the floor's {gbs(rate_floor)} ({floor_kernel}).",
        f"Of the two BLAS layouts, the one ours-prealloc stores was the faster for {len(stored_faster)} of "
        f"{len(rows)} kinds in this run.",
    ]
    return Block(tables=[table], notes=notes)
