"""The kernels behind a batch-1 multiply, measured: each matrix kind in both layouts, through oneDNN and compiled.
The page's body shows the rates as a chart (``kernel_chart_view``); its appendix has every time (``layout_view``)."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import COMPILED, headline_key
from site_hooks.blocks import Block, Chart, Strong, Table
from site_hooks.chart import BarGroup, bar_chart
from site_hooks.formatting import format_ms, format_number, format_ratio, join

from .common import gbs

LABELS = {"in_out": "(in, out)", "out_in": "(out, in)"}
# The kernels a row may hold, in the table's order: the stored layout's two BLAS calls, then two more kernels
# over an (out, in) copy of the same matrix.
KERNELS = {"in_out_ns": "addmm, (in, out)", "out_in_ns": "F.linear, (out, in)", "onednn_ns": "oneDNN linear, packed",
           "compiled_ns": f"{COMPILED}'s generated loop"}


def fastest(row: dict[str, Any]) -> str:
    """The key of the row's fastest kernel."""
    return min((key for key in KERNELS if key in row), key=lambda key: row[key])


def rate(row: dict[str, Any], key: str) -> float:
    """Bytes per second the kernel streamed that matrix at."""
    return row["bytes_per_matrix"] / row[key] * 1e9


def floor_rate(record: dict[str, Any]) -> tuple[float, str]:
    """The floor's read rate at the headline thread count and the kernel that reached it."""
    _, threads = headline_key(record)
    entry = record["hardware"]["bandwidth"][str(threads)]
    return entry["bytes_per_s"], entry["best_kernel"]


def present_kernels(rows: list[dict[str, Any]]) -> list[str]:
    return [key for key in KERNELS if all(key in row for row in rows)]


def kernel_chart_view(record: dict[str, Any]) -> Block:
    layout = record["layout"]
    rows, (rate_floor, floor_kernel) = layout["rows"], floor_rate(record)
    present = present_kernels(rows)
    svg = bar_chart([BarGroup(row["kind"], [rate(row, key) / 1e9 for key in present]) for row in rows],
                    series=[KERNELS[key] for key in present],
                    title=f"GB/s each kernel streamed a matrix at, batch {layout['batch']}, {layout['dtype']}",
                    x_label=f"GB/s (the floor's read rate: {gbs(rate_floor)})",
                    description="; ".join(f"{row['kind']}: " + ", ".join(f"{KERNELS[key]} {gbs(rate(row, key))}"
                                                                        for key in present) for row in rows))
    wins: dict[str, list[str]] = {}
    for row in rows:
        wins.setdefault(fastest(row), []).append(row["kind"])
    best = [rate(row, fastest(row)) for row in rows]
    notes = [
        "Fastest per kind: " + "; ".join(f"{KERNELS[key]} for {join(kinds)}" for key, kinds in wins.items())
        + f". The fastest kernel streamed {gbs(min(best))} to {gbs(max(best))} ({format_ratio(min(best) / rate_floor)}"
          f" to {format_ratio(max(best) / rate_floor)} the floor's rate of {gbs(rate_floor)}, which {floor_kernel} "
          "reached over the floor's buffer).",
    ]
    missing = [KERNELS[key] for key in KERNELS if key not in present]
    if missing:
        notes.append(f"Not measured in this run: {join(missing)} (absent from this PyTorch build or this dtype).")
    return Block(css="lab-decode-kernels", charts=[Chart(svg, (
        f"One matrix-vector product per matrix, best of {layout['passes']} passes; each pass runs every layer's "
        "matrix of that kind once, so the weights come from memory as in a real step."))], notes=notes)


def layout_view(record: dict[str, Any]) -> Block:
    layout = record["layout"]
    rows, (rate_floor, floor_kernel) = layout["rows"], floor_rate(record)
    present = present_kernels(rows)
    table_rows = []
    for row in rows:
        best = fastest(row)
        cells = [Strong(format_ms(row[key])) if key == best else format_ms(row[key]) for key in present]
        table_rows.append((row["kind"], f"{row['shape_in_out'][0]} × {row['shape_in_out'][1]}",
                           format_number(row["bytes_per_matrix"]), *cells, gbs(rate(row, best)),
                           format_ratio(rate(row, best) / rate_floor), LABELS[row["stored"]]))
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
    return Block(css="lab-decode-layout", tables=[table], notes=notes)
