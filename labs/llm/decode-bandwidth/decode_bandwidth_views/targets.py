"""The targets, met or missed: the fastest of this lab's modes against hf-dynamic and against the memory floor at
batch 1, what limits the cells that miss, and the run's wall time."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import COMPILED, WALL_TIME_TARGET_S, cell_table, group_key, headline_key
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_ratio, join

from .common import threads_text


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
    profile, target = record["profile"], record["config"]["benchmark"]["targets"]["step_over_floor"]
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
         f"{format_ms(ours['matrices_floor_ns'])} ms ({format_ratio(ours['matrices_over_floor'])}, "
         f"{'within' if ours['matrices_over_floor'] <= target else 'beyond'} {target:g}× on their own); attention read the KV cache in {format_ms(rows['attention']['ns_per_step'])} ms against "
         f"{format_ms(rows['attention']['floor_ns'])} ms ({format_ratio(rows['attention']['ratio_to_floor'])})."),
        (f"Operators that move almost no bytes (norms, GELU, residual adds, the cache write) took "
         f"{format_ms(ours['small_ops_ns'])} ms; {gap}."),
        (f"Within {target:g}× of that cell's floor the whole step would have to take at most "
         f"{format_ms(ours['target_budget_ns'])} ms, and the weights alone used {ours['matrices_over_budget']:.0%} of that. The profile is of the longest context; at shorter "
         "ones the KV cache is a smaller share of the bytes, so the weights and the small operators weigh more."),
    ]


def targets_view(record: dict[str, Any]) -> Block:
    targets = record["config"]["benchmark"]["targets"]
    dtype, threads = headline_key(record)
    cells = cell_table(record)
    bound = [g for g in record["groups"] if (g["dtype"], g["threads"], g["batch"]) == (dtype, threads, 1)]
    rows, sentences = [], []
    for group in bound:
        key = group_key(group)
        best, hf = cells[(*key, group["best_ours"])], cells[(*key, "hf-dynamic")]
        over_hf = group["best_over_hf_dynamic"]
        rows.append({"context": group["context"], "best": best["mode"], "over_hf": over_hf,
                     "met_hf": over_hf <= targets["best_over_hf_dynamic"], "over_floor": best["step_over_floor"],
                     "met_floor": best["step_over_floor"] <= targets["step_over_floor"],
                     "hf_over_floor": hf["step_over_floor"]})
    for name, target, key, label in (("hf", targets["best_over_hf_dynamic"], "over_hf", "hf-dynamic's step"),
                                      ("floor", targets["step_over_floor"], "over_floor", "the memory floor")):
        missed = [r for r in rows if not r[f"met_{name}"]]
        if missed:
            sentences.append(
                f"Missed ≤ {target:g}× {label} at context{'s' if len(missed) > 1 else ''} "
                + join([f"{r['context']} ({format_ratio(r[key])})" for r in missed]) + ".")
    if any(not (r["met_hf"] and r["met_floor"]) for r in rows):
        compute = [g for g in bound if g["compute_floor_ns_per_step"] > g["floor_ns_per_step"]]
        sentences.extend(limit_sentences(record, compute[0] if compute else bound[0]))
    met_hf, met_floor = ([r for r in rows if r[name]] for name in ("met_hf", "met_floor"))
    summary = (f"At batch 1, {dtype}, {threads_text(threads)}: the fastest of this lab's modes took at most "
               f"{targets['best_over_hf_dynamic']:g}× hf-dynamic's step at {len(met_hf)} of "
               f"{len(rows)} contexts, and stayed within {targets['step_over_floor']:g}× the measured memory floor at "
               f"{len(met_floor)} of {len(rows)}.")
    wall = record["wall_time_s"]
    sentences.append(
        f"The whole benchmark, from building the models to the end of the client workload (starting Python and "
        f"importing torch and transformers come on top), took {wall:.0f} s: "
        f"{'within' if wall <= WALL_TIME_TARGET_S else 'beyond'} the {WALL_TIME_TARGET_S / 60:g}-minute "
        f"({WALL_TIME_TARGET_S} s) target.")
    table = Table(headings=["Context", "Fastest of ours", f"÷ hf-dynamic (target ≤ {targets['best_over_hf_dynamic']})",
                            "Met", f"÷ floor (target ≤ {targets['step_over_floor']})", "Met", "hf-dynamic ÷ floor"],
                  rows=[(r["context"], r["best"], format_ratio(r["over_hf"]), "yes" if r["met_hf"] else "no",
                         format_ratio(r["over_floor"]), "yes" if r["met_floor"] else "no",
                         format_ratio(r["hf_over_floor"])) for r in rows])
    return Block(paragraphs=[summary], tables=[table], notes=sentences)
