"""On an accelerator, as arithmetic: the comparison decode_bandwidth.accelerator computes, worded. The table says
which column is measured and which is a datasheet's; each sentence that compares the two is chosen from the
comparison, so a machine with another ridge point gets other words."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.accelerator import SHORT_CONTEXT, Comparison, compare
from llm_models.accelerator import LONG_CONTEXT, MAX_BATCH, Machine, sources
from site_hooks.blocks import Block, Table, takeaway
from site_hooks.formatting import format_bytes, format_number, format_seconds


def batch_text(batch: int | None) -> str:
    """Where a machine turns compute-bound: 'batch 440', or 'never (up to batch 4,096)'."""
    return f"batch {batch}" if batch is not None else f"never (up to batch {format_number(MAX_BATCH)})"


def turn_text(batch: int | None) -> str:
    """The same inside a sentence: 'at batch 440' or 'never (up to batch 4,096)'."""
    return f"at batch {batch}" if batch is not None else batch_text(batch)


def flops_text(flops_per_s: float) -> str:
    return f"{flops_per_s / 1e12:,.4g} TFLOP/s" if flops_per_s >= 1e12 else f"{flops_per_s / 1e9:.3g} GFLOP/s"


def rate_text(machine: Machine, value: str) -> str:
    return f"{value} ({'achieved, measured in this run' if machine.measured else 'peak, datasheet'})"


def comparison_table(c: Comparison) -> Table:
    cpu, device = c.machines
    rows = [
        ["memory bandwidth", *(rate_text(m, f"{format_bytes(m.bandwidth_bytes_per_s)}/s") for m in c.machines)],
        ["matrix throughput", *(rate_text(m, f"{flops_text(m.flops_per_s)} {m.dtype}") for m in c.machines)],
        ["ridge point (flops ÷ bandwidth)", *(f"{m.ridge_flops_per_byte:.3g} flops per byte" for m in c.machines)],
        [f"{c.model}: a batch-1 step's flops per byte, {SHORT_CONTEXT} tokens",
         *(f"{value:.2g}" for value in c.batch1_intensity)],
        [f"{c.model}: batch-1 floor per token, {format_number(LONG_CONTEXT)} tokens",
         *(format_seconds(value) for value in c.floor_s)],
        [f"decode turns compute-bound, {SHORT_CONTEXT} tokens", *(batch_text(b) for b in c.short_batch)],
        [f"decode turns compute-bound, {format_number(LONG_CONTEXT)} tokens", *(batch_text(b) for b in c.long_batch)],
        [f"one {format_number(LONG_CONTEXT)}-token sequence's cache", *(format_bytes(b) for b in c.sequence_bytes)],
        [f"{format_number(LONG_CONTEXT)}-token sequences beside the weights",
         *("not recorded (the record holds no memory size)" if n is None else format_number(n) for n in c.fits)],
    ]
    headings = ["", f"{cpu.name}, {cpu.dtype}", f"{device.name}, {device.dtype}"]
    return Table(headings, rows, caption=(
        f"Both columns: this lab's formula for a Llama step (weights, the cache read and written, and the flops of "
        f"every multiply) on {c.model}'s published configuration; the machines' rates differ"
        f"{dtype_clause(cpu.dtype, device.dtype)}. Arithmetic, not a measurement: {c.model} ran on neither machine, no "
        f"accelerator ran here, and its memory is the datasheet's, taken as decimal bytes with no workspace kept."))


def dtype_clause(left: str, right: str) -> str:
    """', and so do their dtypes (float32 and bfloat16)' where the two columns' dtypes differ, else nothing."""
    return "" if left == right else f", and so do their dtypes ({left} and {right})"


def carry_over(c: Comparison) -> list[str]:
    """Which lessons of this CPU carry to the accelerator and which invert, each worded from the comparison."""
    cpu_i, device_i = c.batch1_intensity
    sentences = []
    if all(c.bytes_bound_at_batch_1):
        sentences.append(f"Batch 1 waits on bytes on both machines ({cpu_i:.2g} and {device_i:.2g} flops per byte, "
                         f"below both ridge points): the floor this page measures carries over.")
    else:
        which = " and ".join(m.name for m, b in zip(c.machines, c.bytes_bound_at_batch_1) if not b)
        sentences.append(f"Batch 1 is already bound by arithmetic on {which}: the byte floor is not the lesson there.")
    short_cpu, short_device = c.short_batch
    if c.sooner == "cpu":
        sentences.append(f"Batching inverts: at {SHORT_CONTEXT} tokens this CPU turns compute-bound "
                         f"{turn_text(short_cpu)}, the accelerator {turn_text(short_device)}; a batch that costs "
                         f"arithmetic here rides on the bytes there.")
    elif c.sooner == "accelerator":
        sentences.append(f"Batching costs arithmetic sooner there: at {SHORT_CONTEXT} tokens the accelerator turns "
                         f"compute-bound {turn_text(short_device)}, this CPU {turn_text(short_cpu)}.")
    else:
        sentences.append(f"Batching turns compute-bound at about the same size on both: at {SHORT_CONTEXT} tokens "
                         f"this CPU {turn_text(short_cpu)}, the accelerator {turn_text(short_device)}.")
    long_cpu, long_device = c.long_batch
    if long_device is None:
        sentences.append(f"At {format_number(LONG_CONTEXT)} tokens no batch turns the accelerator compute-bound (each "
                         f"sequence reads its own cache for its own flops)"
                         + (f", while this CPU turns at batch {long_cpu}" if long_cpu is not None else "")
                         + ": at long context the cache is the bill.")
    return sentences


def accelerator_view(record: dict[str, Any]) -> Block:
    c = compare(record)
    return Block(css="lab-accelerator", tables=[comparison_table(c)], sources=sources())


def accelerator_lessons_view(record: dict[str, Any]) -> Block:
    return Block(items=carry_over(compare(record)))


def accelerator_takeaway_view(record: dict[str, Any]) -> Block:
    c = compare(record)
    ratio = c.ridge_ratio
    ridge = f"{ratio:.0f}× higher than" if ratio >= 1.5 else f"{1 / ratio:.0f}× lower than" if ratio <= 1 / 1.5 \
        else "close to"
    both_bytes = all(c.bytes_bound_at_batch_1)
    floor = "the byte floor at batch 1 carries over" if both_bytes else "even batch 1 is not bound by bytes on both"
    batching = {"cpu": "the price of batching does not", "accelerator": "batching costs arithmetic sooner there",
                "alike": "so does where batching turns compute-bound"}[c.sooner]
    return takeaway(f"the accelerator's ridge point sits {ridge} this CPU's: {floor}, {batching}.")
