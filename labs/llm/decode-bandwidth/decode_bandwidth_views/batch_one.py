"""Batch 1 against transformers and the floor: the fastest of this lab's modes against hf-dynamic and against the
memory floor at every context, what holds the step above its floor, and the run's wall time."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import cell_table
from decode_bandwidth.grid import COMPILED, group_key, headline_key
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_ratio

from .common import ratio_range, threads_text


def compiled_sentences(record: dict[str, Any]) -> list[str]:
    """The fastest path's weights, from the kernel table: its generated loop over every matrix at batch 1."""
    layout = record["layout"]
    return [f"What limits them: the weights. Through {COMPILED}'s generated loop alone, the five kinds of weight "
            f"matrix took {format_ms(layout['compiled_step_ns'])} ms per step at batch 1 in the kernel table, against "
            f"{format_ms(layout['matrix_floor_ns'])} ms for their bytes at the floor's rate "
            f"({format_ratio(layout['compiled_over_floor'])}): the loop "
            "streams below the best read kernel's rate, and the rest of the step comes on top."]


def limit_sentences(record: dict[str, Any], group: dict[str, Any]) -> list[str]:
    """What holds a cell above its memory floor, from the record's own figures, a few short sentences."""
    if group["compute_floor_ns_per_step"] > group["floor_ns_per_step"]:
        return [f"What limits them: at this batch the arithmetic floor ({format_ms(group['compute_floor_ns_per_step'])} "
                "ms at the measured matmul rate) is above the memory floor, so the step is bound by compute, not by bytes."]
    profile = record["profile"]
    ours = profile["modes"]["ours-prealloc"]
    rows = {row["kind"]: row for row in ours["rows"]}
    cell = cell_table(record)[(profile["dtype"], profile["threads"], profile["batch"], profile["context"], "ours-prealloc")]
    timed, profiled = cell["median_ns_per_step"], ours["total_ns_per_step"]
    gap = (f"{format_ms(-ours['total_minus_timed_ns'])} ms of the timed step's {format_ms(timed)} ms is time between "
           f"operators (Python and dispatch) that no row holds" if profiled < timed else
           f"the profiled rows add to {format_ms(ours['total_minus_timed_ns'])} ms more than the timed step, the "
           "profiler's own cost")
    return [
        *compiled_sentences(record),
        (f"In the profile of ours-prealloc (batch {profile['batch']}, context {profile['context']}) "
         f"the five weight matrices took {format_ms(ours['matrices_ns'])} ms against their own floor of "
         f"{format_ms(ours['matrices_floor_ns'])} ms ({format_ratio(ours['matrices_over_floor'])}); attention read the "
         f"KV cache in {format_ms(rows['attention']['ns_per_step'])} ms against "
         f"{format_ms(rows['attention']['floor_ns'])} ms ({format_ratio(rows['attention']['ratio_to_floor'])})."),
        (f"Operators that move almost no bytes (norms, GELU, residual adds, the cache write) took "
         f"{format_ms(ours['small_ops_ns'])} ms; {gap}."),
        ("The profile is of the longest context; at shorter ones the KV cache is a smaller share of the bytes, so the "
         "weights and the small operators weigh more."),
    ]


def batch_one_view(record: dict[str, Any]) -> Block:
    """Per context at batch 1: the fastest of ours against hf-dynamic and against the floor, then what holds the
    step above its floor, and the run's wall time."""
    dtype, threads = headline_key(record)
    cells = cell_table(record)
    bound = [g for g in record["groups"] if (g["dtype"], g["threads"], g["batch"]) == (dtype, threads, 1)]
    rows = []
    for group in bound:
        key = group_key(group)
        best, hf = cells[(*key, group["best_ours"])], cells[(*key, "hf-dynamic")]
        rows.append((f"{group['context']:,}", best["mode"], format_ratio(group["best_over_hf_dynamic"]),
                     format_ratio(best["step_over_floor"]), format_ratio(hf["step_over_floor"])))
    summary = (f"At batch 1, {dtype}, {threads_text(threads)}: the fastest of this lab's modes took "
               f"{ratio_range([g['best_over_hf_dynamic'] for g in bound])} hf-dynamic's step and "
               f"{ratio_range([cells[(*group_key(g), g['best_ours'])]['step_over_floor'] for g in bound])} the "
               "measured memory floor.")
    compute = [g for g in bound if g["compute_floor_ns_per_step"] > g["floor_ns_per_step"]]
    sentences = limit_sentences(record, compute[0] if compute else bound[0])
    sentences.append(
        f"The whole benchmark, from building the models to the end of the client workload (starting Python and "
        f"importing torch and transformers come on top), took {record['wall_time_s']:.0f} s.")
    table = Table(headings=["Context", "Fastest of ours", "÷ hf-dynamic", "÷ floor", "hf-dynamic ÷ floor"], rows=rows)
    return Block(paragraphs=[summary], tables=[table], notes=sentences)
