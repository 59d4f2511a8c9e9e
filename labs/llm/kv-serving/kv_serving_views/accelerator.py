"""On an accelerator: the trained server's budget and batching gain beside the same quantities for Llama-3-8B on an
H100, as arithmetic (kv_serving.accelerator and llm_models.accelerator compute them; no GPU ran here)."""

from __future__ import annotations

from typing import Any

from kv_serving.accelerator import served_here
from llm_models.accelerator import LONG_CONTEXT, MODEL, FullBudget, full_budget, sources
from site_hooks.blocks import Block, Table, takeaway
from site_hooks.formatting import format_bytes, format_number, plural


def table(here: dict[str, Any], there: FullBudget) -> Table:
    long = format_number(LONG_CONTEXT)
    rows = [
        ["KV budget", f"{format_bytes(here['budget'])} (the trained server's)",
         f"{format_bytes(there.budget_bytes)} ({format_bytes(there.machine.memory_bytes or 0)} less "
         f"{format_bytes(there.weights_bytes)} of weights)"],
        ["one cached token", f"{format_number(here['token'])} bytes ({here['dtype']})",
         f"{format_number(there.token_bytes)} bytes ({there.machine.dtype})"],
        [f"{long}-token sequences the budget admits",
         f"{format_number(here['sequences'])} ({format_number(here['tokens'])} tokens in all)",
         format_number(there.sequences)],
        ["batched tokens per second over one request at a time",
         f"{here['gain']:.2f}× measured, at {here['rate']:g} arrivals per second",
         f"{there.gain:.1f}× by the memory floor alone, {there.sequences} sequences of {long} tokens"],
    ]
    headings = ["", "this CPU: the trained server (measured)", f"{there.machine.name}: {MODEL} (arithmetic)"]
    return Table(headings, rows,
                 caption="The left column is this record's trained run; the right is the decode lab's formula for a "
                         "Llama step with the datasheet's peak bandwidth, its memory taken as decimal bytes, the "
                         "weights beside the cache and no workspace kept. Arithmetic, not a measurement: no "
                         "accelerator ran here.")


def lessons(here: dict[str, Any], there: FullBudget) -> list[str]:
    long = format_number(LONG_CONTEXT)
    sentences = []
    if here["sequences"] == 0:
        sentences.append(f"This server's budget does not hold one {long}-token sequence "
                         f"({format_number(here['tokens'])} tokens in all); the accelerator's holds {there.sequences}.")
    else:
        sentences.append(f"This server's budget holds {plural(here['sequences'], f'{long}-token sequence')}, the "
                         f"accelerator's {there.sequences}.")
    sentences.append("Filled, the accelerator's batch is still bound by bytes: the budget, not the flops, is what "
                     "caps it." if not there.compute_bound else
                     "Filled, the accelerator's batch is bound by arithmetic: past it, more memory would not buy "
                     "more tokens.")
    sentences.append(f"The floor alone promises {there.gain:.1f}× there for {there.sequences} long sequences; this "
                     f"server measured {here['gain']:.2f}× with at most {here['peak_running']} of its "
                     f"{here['requests']} requests running at once: other batches, so neither figure ranks the "
                     f"machines.")
    return sentences


def accelerator_view(record: dict[str, Any]) -> Block:
    here, there = served_here(record), full_budget()
    return Block(css="lab-accelerator", tables=[table(here, there)], sources=sources())


def accelerator_lessons_view(record: dict[str, Any]) -> Block:
    return Block(items=lessons(served_here(record), full_budget()))


def accelerator_takeaway_view(record: dict[str, Any]) -> Block:
    here, there = served_here(record), full_budget()
    return takeaway(f"one formula prices both budgets: {format_bytes(there.budget_bytes)} holds {there.sequences} "
                    f"sequences of {format_number(LONG_CONTEXT)} tokens there, {format_bytes(here['budget'])} holds "
                    f"{format_number(here['tokens'])} tokens here; admission by bytes is the lesson that carries over.")
