"""The kernels behind a batch-1 multiply, measured: each matrix kind in both layouts, through oneDNN and compiled."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.formulas import COMPILED, headline_key
from site_hooks.blocks import Block, Strong, Table
from site_hooks.formatting import format_ms, format_number, format_ratio, join

from .wording import gbs

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


def layout_view(record: dict[str, Any]) -> Block:
    layout = record["layout"]
    _, threads = headline_key(record)
    floor_rate = record["hardware"]["bandwidth"][str(threads)]["bytes_per_s"]
    floor_kernel = record["hardware"]["bandwidth"][str(threads)]["best_kernel"]
    rows = layout["rows"]
    present = [key for key in KERNELS if all(key in row for row in rows)]
    table_rows = []
    for row in rows:
        best = fastest(row)
        cells = [Strong(format_ms(row[key])) if key == best else format_ms(row[key]) for key in present]
        table_rows.append((row["kind"], f"{row['shape_in_out'][0]} × {row['shape_in_out'][1]}",
                           format_number(row["bytes_per_matrix"]), *cells, gbs(rate(row, best)),
                           format_ratio(rate(row, best) / floor_rate), LABELS[row["stored"]]))
    table = Table(headings=["Matrix", "Shape (in, out)", "Bytes each", *(f"{KERNELS[key]} (ms)" for key in present),
                            "Fastest streamed at", "÷ floor's rate", "ours-prealloc stores"], rows=table_rows)
    wins: dict[str, list[str]] = {}
    for row in rows:
        wins.setdefault(fastest(row), []).append(row["kind"])
    stored_faster = [row for row in rows if row[f"{row['stored']}_ns"] <= row["out_in_ns" if row["stored"] == "in_out"
                                                                             else "in_out_ns"]]
    notes = [
        f"One matrix-vector product at batch {layout['batch']} in {layout['dtype']}, per matrix, best of "
        f"{layout['passes']} passes; each pass runs every layer's matrix of that kind once, so the weights come from "
        f"memory as in a real step. The floor's rate is {gbs(floor_rate)} ({floor_kernel}, the fastest of the "
        "read kernels at this thread count); the fastest kernel in bold.",
        "Fastest per kind: " + "; ".join(f"{KERNELS[key]} for {join(kinds)}" for key, kinds in wins.items()) + ".",
        f"Of the two BLAS layouts, the one ours-prealloc stores was the faster for {len(stored_faster)} of "
        f"{len(rows)} kinds in this run.",
    ]
    missing = [KERNELS[key] for key in KERNELS if key not in present]
    if missing:
        notes.append(f"Not measured in this run: {join(missing)} (absent from this PyTorch build or this dtype).")
    return Block(css="lab-decode-layout", tables=[table], notes=notes)
