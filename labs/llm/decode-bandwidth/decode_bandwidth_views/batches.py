"""Bigger batches, the same weight bytes: the layout measurement repeated at every batch of the grid."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import cell_table, group_table, other_layout
from decode_bandwidth.grid import headline_key
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_ratio, join

from .common import gbs


def batches_view(record: dict[str, Any]) -> Block:
    """The weight multiplies of one step at each batch: the same bytes, a different kernel."""
    dtype, threads = headline_key(record)
    cells, groups = cell_table(record), group_table(record)
    context = record["config"]["benchmark"]["contexts"][0]
    matrix_bytes = record["layout"]["matrix_bytes"]
    rows = []
    for layout in [record["layout"], *record["layout_batches"]]:
        flipped = [row["kind"] for row in layout["rows"] if row[f"{row['stored']}_ns"] > row[f"{other_layout(row['stored'])}_ns"]]
        cell = cells[(dtype, threads, layout["batch"], context, "ours-prealloc")]
        rows.append({"batch": layout["batch"], "stored_ns": layout["stored_step_ns"], "best_ns": layout["best_step_ns"],
                     "rate": gbs(layout["stored_bytes_per_s"]), "flipped": ", ".join(flipped) or "none",
                     "step_ns": cell["median_ns_per_step"], "floor_ns": cell["floor_ns_per_step"],
                     "over_first": layout["stored_over_batch_1"], "step_over_first": cell["over_batch_1"],
                     "floor_over_first": groups[(dtype, threads, layout["batch"], context)]["floor_over_batch_1"]})
    first, last = rows[0], rows[-1]
    sentences = [] if len(rows) == 1 else [
        f"From batch {first['batch']} to batch {last['batch']} the weight multiplies went from "
        f"{format_ms(first['stored_ns'])} to {format_ms(last['stored_ns'])} ms "
        f"({format_ratio(last['over_first'])}) for the same bytes, while the step's memory floor "
        f"at context {context} rose {format_ratio(last['floor_over_first'])} and the timed step "
        f"{format_ratio(last['step_over_first'])}. "
        + "".join(f"At batch {r['batch']} they took {format_ratio(r['over_first'])} their "
                  f"batch-{first['batch']} time. " for r in rows[1:-1])
        + "A batch-1 multiply is a matrix-vector product and a larger batch a matrix-matrix product, which the "
          "library runs with other kernels: on these short, wide shapes their speed, not the bytes, sets the time.",
    ]
    if any(r["flipped"] != "none" for r in rows):
        sentences.append("The stored layout was chosen at batch 1; " + join(
            [f"at batch {r['batch']} the other layout would have been faster for {r['flipped']} "
             f"({format_ms(r['best_ns'])} ms with the faster layout of every kind)" for r in rows if r["flipped"] != "none"])
            + ". One layout serves every batch here, because a second copy of the weights would double the bytes "
              "held.")
    table = Table(headings=["Batch", "Weight multiplies, stored layout (ms)", "Their weights read at",
                            "Faster layout per kind (ms)", "Kinds faster the other way",
                            f"ours-prealloc step at context {context} (ms)", "Its memory floor (ms)"],
                  rows=[(r["batch"], format_ms(r["stored_ns"]), r["rate"], format_ms(r["best_ns"]), r["flipped"],
                         format_ms(r["step_ns"]), format_ms(r["floor_ns"])) for r in rows])
    layout = record["layout"]
    legend = (f"The layout measurement above, repeated at every batch of the headline grid ({layout['dtype']}): all of "
              f"one step's weight multiplies, each matrix kind timed alone (best of {layout['passes']} passes) and "
              f"summed over its matrices. The same {matrix_bytes:,} bytes of weight matrices are read at every batch; "
              "only the kernel that multiplies them changes.")
    scaling = dtype_scaling(record)
    return Block(tables=[table, *scaling.tables], notes=[legend, *sentences, *scaling.notes])


def dtype_scaling(record: dict[str, Any]) -> Block:
    """The same weight multiplies per batch in every timed dtype: whether a batch costs more than batch 1 depends
    on the dtype's kernels, not on its bytes."""
    series = {record["layout"]["dtype"]: [record["layout"], *record["layout_batches"]]}
    for dtype, layouts in record["layout_batches_other_dtypes"].items():
        series[dtype] = [record["layout_other_dtypes"][dtype], *layouts]
    if len(series) == 1 or len(series[record["layout"]["dtype"]]) == 1:
        return Block(tables=[], notes=[])
    batches = [layout["batch"] for layout in series[record["layout"]["dtype"]]]
    rows, growth = [], {}
    for dtype, layouts in series.items():
        growth[dtype] = layouts[-1]["stored_over_batch_1"]
        rows.append((dtype, *(format_ms(layout["stored_step_ns"]) for layout in layouts), format_ratio(growth[dtype])))
    table = Table(headings=["Dtype", *(f"Batch {b} (ms)" for b in batches), f"Batch {batches[-1]} ÷ batch {batches[0]}"],
                  rows=rows, caption="One step's weight multiplies per batch, in every timed dtype")
    return Block(tables=[table], notes=[
        f"From batch {batches[0]} to batch {batches[-1]} the weight multiplies took "
        + join([f"{format_ratio(ratio)} their batch-{batches[0]} time in {dtype}" for dtype, ratio in growth.items()])
        + " on the same matrices (a 16-bit dtype holds half the bytes). A multiply whose time stays flat as rows are "
          "added is bound by reading its weights, and batching it is nearly free; one that grows is bound by its "
          "kernel's arithmetic on these shapes."])
