"""The weight layout, measured: each matrix kind at batch 1, stored (in, out) or (out, in)."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_number, format_ratio

LABELS = {"in_out": "(in, out)", "out_in": "(out, in)"}


def layout_view(record: dict[str, Any]) -> Block:
    layout = record["layout"]
    rows = []
    for row in layout["rows"]:
        faster = "in_out" if row["in_out_ns"] <= row["out_in_ns"] else "out_in"
        rows.append({**row, "ratio": row["out_in_ns"] / row["in_out_ns"], "faster": LABELS[faster],
                     "stored_is_faster": row["stored"] == faster})
    agree = sum(r["stored_is_faster"] for r in rows)
    head = next(r for r in rows if r["kind"] == "output head")
    table = Table(headings=["Matrix", "Shape (in, out)", "Bytes each", "(in, out), addmm (ms)", "(out, in), F.linear (ms)",
                            "(out, in) ÷ (in, out)", "Stored"],
                  rows=[(r["kind"], f"{r['shape_in_out'][0]} × {r['shape_in_out'][1]}", format_number(r["bytes_per_matrix"]),
                         format_ms(r["in_out_ns"]), format_ms(r["out_in_ns"]), format_ratio(r["ratio"]),
                         LABELS[r["stored"]]) for r in rows])
    return Block(css="lab-decode-layout", tables=[table], notes=[
        f"One matrix-vector product at batch {layout['batch']} in {layout['dtype']}, per matrix, best of "
        f"{layout['passes']} passes; each pass runs every layer's matrix of that kind once, so the weights come from "
        "memory as in a real step.",
        f"The output head, read whole every step, took {format_ms(head['in_out_ns'])} ms stored (in, out) and "
        f"{format_ms(head['out_in_ns'])} ms stored (out, in).",
        f"In this run the layout the decoder stores was the faster one for {agree} of {len(rows)} kinds of matrix"
        + ("." if agree == len(rows) else "; "
           + ", ".join(f"{r['kind']} ran faster {r['faster']} ({format_ratio(max(r['ratio'], 1 / r['ratio']))})"
                       for r in rows if not r["stored_is_faster"]) + "."),
    ])
