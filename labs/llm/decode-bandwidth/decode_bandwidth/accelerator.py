"""On an accelerator: the shared accelerator arithmetic (llm_models.accelerator) beside this CPU's measured rates.

Arithmetic, labelled so on the page: no GPU ran here. This CPU's read bandwidth and matrix rate are the ones a
decode record measured (figures the build has checked); the accelerator's are its datasheet's. Both go through
one formula for a Llama step on one published configuration, so every difference between the two columns is the
machine's.

Not a figure of the record, on purpose (llm_models.accelerator says why). Torch-free (the site build imports it);
the benchmark never runs it, so it is not in the record's fingerprint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_models.accelerator import (
    LONG_CONTEXT,
    MODEL,
    Machine,
    accelerator,
    compute_bound_batch,
    llama_model,
    sequences_that_fit,
    step_seconds,
)
from llm_models.hardware import H100_SXM, Accelerator
from llm_models.kv_bytes import BYTES_PER_ELEMENT, kv_bytes
from llm_models.llama.traffic import llama_step_bytes
from llm_models.published import model as published_model

from .grid import headline_key

SHORT_CONTEXT = 128  # a short one: where the weights, not the cache, are most of a step's bytes
APART = 4  # one machine turns compute-bound "sooner" at a batch at least this many times smaller than the other's


def this_cpu(record: Mapping[str, Any]) -> Machine:
    """This run's CPU at the headline thread count, in the dtype its measured matrix rate is highest for."""
    _, threads = headline_key(record)
    rates = {dtype: record["hardware"]["matmul"][f"{dtype}/{threads}"]["flops_per_s"]
             for dtype in BYTES_PER_ELEMENT if f"{dtype}/{threads}" in record["hardware"]["matmul"]}
    dtype = max(rates, key=lambda name: rates[name])
    bandwidth = record["hardware"]["bandwidth"][str(threads)]["bytes_per_s"]
    return Machine(f"this CPU ({threads} thread{'s' if threads > 1 else ''})", dtype, bandwidth, rates[dtype],
                   None, measured=True)


@dataclass(frozen=True)
class Comparison:
    model: str
    machines: tuple[Machine, Machine]  # this CPU, the accelerator
    floor_s: tuple[float, float]  # batch-1 memory floor of one token at LONG_CONTEXT
    batch1_intensity: tuple[float, float]  # flops per byte of a batch-1 step at SHORT_CONTEXT
    short_batch: tuple[int | None, int | None]  # the turn to compute-bound at SHORT_CONTEXT
    long_batch: tuple[int | None, int | None]  # ... at LONG_CONTEXT
    fits: tuple[int | None, int | None]  # LONG_CONTEXT sequences beside the weights
    sequence_bytes: tuple[float, float]  # one LONG_CONTEXT sequence's cache

    @property
    def ridge_ratio(self) -> float:
        """The accelerator's ridge point over this CPU's."""
        return self.machines[1].ridge_flops_per_byte / self.machines[0].ridge_flops_per_byte

    @property
    def sooner(self) -> str:
        """Which machine turns compute-bound at SHORT_CONTEXT at a batch at least APART times smaller than the
        other's ("cpu" or "accelerator"; a machine that never turns counts as later), or "alike"."""
        cpu, device = (math.inf if b is None else b for b in self.short_batch)
        if cpu * APART <= device:
            return "cpu"
        if device * APART <= cpu:
            return "accelerator"
        return "alike"

    @property
    def bytes_bound_at_batch_1(self) -> tuple[bool, bool]:
        """Whether a batch-1 step's flops per byte sit below each machine's ridge point."""
        return (self.batch1_intensity[0] < self.machines[0].ridge_flops_per_byte,
                self.batch1_intensity[1] < self.machines[1].ridge_flops_per_byte)


def compare(record: Mapping[str, Any], device: Accelerator = H100_SXM) -> Comparison:
    entry = published_model(MODEL)
    model = llama_model(entry)
    machines = (this_cpu(record), accelerator(device))

    def each(function: Any) -> tuple[Any, Any]:
        return function(machines[0]), function(machines[1])

    def intensity(machine: Machine) -> float:
        needed = llama_step_bytes(model, BYTES_PER_ELEMENT[machine.dtype], 1, SHORT_CONTEXT)
        return needed["flops"] / needed["total"]

    return Comparison(
        model=MODEL, machines=machines,
        floor_s=each(lambda m: step_seconds(m, model, 1, LONG_CONTEXT)[0]),
        batch1_intensity=each(intensity),
        short_batch=each(lambda m: compute_bound_batch(m, model, SHORT_CONTEXT)),
        long_batch=each(lambda m: compute_bound_batch(m, model, LONG_CONTEXT)),
        fits=each(lambda m: sequences_that_fit(m, entry, model, LONG_CONTEXT)),
        sequence_bytes=each(lambda m: kv_bytes(model, BYTES_PER_ELEMENT[m.dtype], 1, LONG_CONTEXT)),
    )
