"""Key results and the check-yourself answers: each sentence worded by code from the figures derived from the record."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import REGIMES, best_cell, cell_table
from decode_bandwidth.floors import READ_KERNELS
from decode_bandwidth.grid import COMPILED, OURS, headline_key
from site_hooks.blocks import Block, answer
from site_hooks.formatting import format_bytes, format_ms, format_ratio, join, spelled

from .common import against, gbs, parted_side, ratio_range, threads_text
from .pictures import headline_groups
from .trained import trained_item


def parity_item(record: dict[str, Any]) -> str:
    # the tolerance and the largest difference are the appendix's (the equivalence view)
    agree = all(entry["within_tolerance"] for entry in record["equivalence"]["modes"].values())
    return (f"Equal to transformers: before any timing, this decoder in all {spelled(len(OURS))} modes ({COMPILED} one "
            f"row at a time) and transformers' GPT-2 (its full pass and both its caches) "
            f"{'matched' if agree else 'did not all match'} one full pass of this decoder.")


def floor_item(record: dict[str, Any]) -> str:
    dtype, threads = headline_key(record)
    bandwidth = record["hardware"]["bandwidth"][str(threads)]
    context = record["config"]["benchmark"]["contexts"][0]
    group = headline_groups(record)[(1, context)]
    return (f"The floor: of {spelled(len(READ_KERNELS))} read kernels the fastest at {threads_text(threads)} was {bandwidth['best_kernel']}, "
            f"{gbs(bandwidth['bytes_per_s'])} at its best. A batch-1 step at context {context:,} moves "
            f"{format_bytes(group['bytes']['total'])} in {dtype}: {format_ms(group['floor_ns_per_step'])} ms at the "
            f"{gbs(group['floor_bytes_per_s'])} read beside its group.")


def best_at(record: dict[str, Any], batch: int, context: int) -> dict[str, Any]:
    """The cell of the fastest of this lab's modes at the headline dtype and thread count."""
    return best_cell(record, (*headline_key(record), batch, context))


def transformers_at(record: dict[str, Any], batch: int, context: int) -> dict[str, Any]:
    """transformers' GPT-2 with its dynamic cache, at the headline dtype and thread count."""
    dtype, threads = headline_key(record)
    return cell_table(record)[(dtype, threads, batch, context, "hf-dynamic")]


def batch_one_item(record: dict[str, Any]) -> str:
    contexts = record["config"]["benchmark"]["contexts"]
    best = [best_at(record, 1, c) for c in contexts]
    hf = [transformers_at(record, 1, c) for c in contexts]
    closest = min(best, key=lambda cell: cell["step_over_floor"])
    return (f"Batch 1, {regimes_by_context(best)}: the fastest of this lab's modes came closest to the floor at context "
            f"{closest['context']:,}, {format_ms(closest['median_ns_per_step'])} ms or {format_ratio(closest['step_over_floor'])} the floor; "
            f"across contexts it took {ratio_range([c['step_over_floor'] for c in best])} the floor, "
            f"transformers' dynamic cache {ratio_range([c['step_over_floor'] for c in hf])}.")


def regimes_by_context(cells: list[dict[str, Any]]) -> str:
    """Each regime the cells fall in, with the contexts it holds at: one regime named alone, never one cell's
    regime claimed for all."""
    by_regime: dict[str, list[int]] = {}
    for cell in cells:
        by_regime.setdefault(cell["regime"], []).append(cell["context"])
    if len(by_regime) == 1:
        return f"{REGIMES[next(iter(by_regime))]} at every context"
    return "; ".join(f"{REGIMES[regime]} at context{'s' if len(contexts) > 1 else ''} "
                     f"{join([f'{c:,}' for c in contexts])}" for regime, contexts in by_regime.items())


def versus_item(record: dict[str, Any]) -> str:
    contexts = record["config"]["benchmark"]["contexts"]
    groups = headline_groups(record)
    ratios = [groups[(1, c)]["best_over_hf_dynamic"] for c in contexts]
    sides = [parted_side(ratio, groups[(1, c)]["best_parted_from_hf_dynamic"]) for ratio, c in zip(ratios, contexts)]
    word = against(ratios, sides, contexts, "transformers' GPT-2 with its dynamic cache")
    return (f"At batch 1, over contexts {contexts[0]:,} to {contexts[-1]:,}, the fastest of this lab's modes was "
            f"{word}, as a ratio of step times.")


def batching_item(record: dict[str, Any]) -> str:
    bench = record["config"]["benchmark"]
    batch, context = bench["batches"][-1], bench["contexts"][0]
    groups = headline_groups(record)
    one, many = groups[(1, context)], groups[(batch, context)]
    counts = [f"{n} {label}" for key, label in REGIMES.items() if (n := record["headline_regimes"][key])]
    verb = "is" if counts[0].startswith("1 ") else "are"
    counts[0] = counts[0].replace(" ", f" {verb} ", 1)
    return (f"Batching shares the weight read: at context {context:,} a batch-{batch} step took "
            f"{format_ratio(many['best_over_batch_1'])} the batch-1 step for {batch} times the tokens, "
            f"{format_ms(many['best_ns_per_token'])} ms per token against {format_ms(one['best_ns_per_token'])} ms. "
            f"Of the grid's {len(groups)} cells, {join(counts)}.")


def key_results_view(record: dict[str, Any]) -> Block:
    """Five claims a reader meets first; the client's view and the tolerances are further down the page."""
    return Block(css="lab-key-results", items=[parity_item(record), floor_item(record),
                                               f"{batch_one_item(record)} {versus_item(record)}",
                                               batching_item(record), trained_item(record)])


def answer_gap_view(record: dict[str, Any]) -> Block:
    """Where a batch-1 step's time above its floor goes, from the profile of ours-prealloc."""
    profile = record["profile"]
    ours = profile["modes"]["ours-prealloc"]
    rows = {row["kind"]: row for row in ours["rows"]}
    key = (profile["dtype"], profile["threads"], profile["batch"], profile["context"], "ours-prealloc")
    cell = cell_table(record)[key]
    timed, profiled = cell["median_ns_per_step"], ours["total_ns_per_step"]
    between = (f"and {format_ms(-ours['total_minus_timed_ns'])} ms fell between operators, in Python and dispatch"
               if profiled < timed else "and the profiler's own cost made the profiled step "
               f"{format_ms(ours['total_minus_timed_ns'])} ms longer than the timed one")
    return answer(f"At batch {profile['batch']}, context {profile['context']:,}, ours-prealloc took "
            f"{format_ms(timed)} ms against a floor of {format_ms(cell['floor_ns_per_step'])} ms "
            f"({format_ratio(cell['step_over_floor'])}). In its profile the five weight matrices took "
            f"{format_ms(ours['matrices_ns'])} ms against their own floor of {format_ms(ours['matrices_floor_ns'])} ms "
            f"({format_ratio(ours['matrices_over_floor'])}); attention read the cache in "
            f"{format_ms(rows['attention']['ns_per_step'])} ms against {format_ms(rows['attention']['floor_ns'])} ms; "
            f"norms, GELU, adds and the cache write took {format_ms(ours['small_ops_ns'])} ms; {between}.")


def answer_bound_view(record: dict[str, Any]) -> Block:
    """At the grid's largest batch and context: what dominates the bytes, and which floor is the higher."""
    bench = record["config"]["benchmark"]
    batch, context = bench["batches"][-1], bench["contexts"][-1]
    group = headline_groups(record)[(batch, context)]
    cell = best_at(record, batch, context)
    weights, kv = group["bytes"]["weights"], group["bytes"]["kv_read"]
    memory, compute = group["floor_ns_per_step"], group["compute_floor_ns_per_step"]
    higher = "the arithmetic floor" if compute > memory else "the memory floor"
    dominant = "cache dominates" if kv > weights else "weights dominate"
    return answer(f"At batch {batch}, context {context:,} the step reads {format_bytes(kv)} of KV cache against {format_bytes(weights)} of weights ({format_ratio(group['kv_over_weights'])}): the {dominant} the bytes. "
                  f"Its memory floor is {format_ms(memory)} ms and its arithmetic floor {format_ms(compute)} ms, so {higher} is the higher bound. "
                  f"The fastest of this lab's modes ({cell['mode']}) took {format_ms(cell['median_ns_per_step'])} ms, "
                  f"{format_ratio(cell['step_over_higher_floor'])} that bound: {REGIMES[cell['regime']]}.")


def answer_crossover_view(record: dict[str, Any]) -> Block:
    crossover = record["kv_crossover"]
    model = record["config"]["model"]
    return answer(f"Weights ÷ KV bytes per position: {crossover['weight_bytes']:,} ÷ {crossover['kv_bytes_per_position']:,} "
            f"= {crossover['batch_x_context']:,.0f} positions of batch × context: at the full "
            f"{model['max_positions']:,}-position context, {crossover['full_context_sequences']:.1f} "
            f"sequences. The dtype cancels: bfloat16 halves both sides. Fewer "
            f"key/value heads (grouped-query attention) would shrink the denominator and push the crossover out.")
