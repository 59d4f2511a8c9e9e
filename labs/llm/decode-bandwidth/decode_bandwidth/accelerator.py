"""On an accelerator: this lab's byte and flop formulas with a datasheet's figures, beside this CPU's measured rates.

Arithmetic, labelled so on the page: no GPU ran here. The accelerator's bandwidth and flops are its datasheet's
(llm_models.hardware); this CPU's are the read bandwidth and matrix rate a decode record measured (figures the build
has checked). Both go through one formula for a Llama step (decode_bandwidth.traffic.llama_step_bytes) on one
published configuration (llm_models.published, the KV-cache page's table), so every difference between the two
columns is the machine's.

Not a figure of the record, on purpose: a record holds what its run measured and derived from that, and no run
measures an accelerator. The page computes this at build time, from the checked record and published constants.
Torch-free (the site build imports it); the benchmark never runs it, so it is not in the record's fingerprint.
The serving lab prices its budget with ``full_budget``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_models.hardware import H100_SXM, Accelerator
from llm_models.kv_bytes import BYTES_PER_ELEMENT, kv_bytes, tokens_that_fit
from llm_models.published import model as published_model
from llm_models.published import weight_bytes as published_weight_bytes

from .grid import headline_key
from .traffic import llama_step_bytes

MODEL = "Llama-3-8B"  # the published model both columns price: the KV-cache page's example
LONG_CONTEXT = 8192  # a long chat: the context of the capacity question and of the long-context batch
SHORT_CONTEXT = 128  # a short one: where the weights, not the cache, are most of a step's bytes
MAX_BATCH = 4096  # the largest batch searched for the turn to compute-bound (past it: "never")
APART = 4  # one machine turns compute-bound "sooner" at a batch at least this many times smaller than the other's


@dataclass(frozen=True)
class Machine:
    """What the arithmetic needs of a machine: its read bandwidth, its matrix rate in the dtype it multiplies
    well, and (where known) the memory the weights and the cache share."""
    name: str
    dtype: str
    bandwidth_bytes_per_s: float
    flops_per_s: float
    memory_bytes: float | None
    measured: bool  # True: this run's rates; False: a datasheet's

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.flops_per_s / self.bandwidth_bytes_per_s


def accelerator(device: Accelerator = H100_SXM) -> Machine:
    return Machine(device.name, "bfloat16", device.bandwidth_bytes_per_s, device.bf16_flops_per_s,
                   device.memory_bytes, measured=False)


def this_cpu(record: Mapping[str, Any]) -> Machine:
    """This run's CPU at the headline thread count, in the dtype its measured matrix rate is highest for."""
    _, threads = headline_key(record)
    rates = {dtype: record["hardware"]["matmul"][f"{dtype}/{threads}"]["flops_per_s"]
             for dtype in BYTES_PER_ELEMENT if f"{dtype}/{threads}" in record["hardware"]["matmul"]}
    dtype = max(rates, key=lambda name: rates[name])
    bandwidth = record["hardware"]["bandwidth"][str(threads)]["bytes_per_s"]
    return Machine(f"this CPU ({threads} thread{'s' if threads > 1 else ''})", dtype, bandwidth, rates[dtype],
                   None, measured=True)


def llama_model(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A row of the table of published configurations (llm_models.published), in the keys this lab's formulas read."""
    return {"vocab_size": entry["vocab"], "width": entry["hidden"], "layers": entry["layers"], "heads": entry["heads"],
            "kv_heads": entry["kv_heads"], "head_dim": entry["head_dim"], "hidden": entry["intermediate"],
            "max_positions": entry["positions"], "tie_embeddings": entry["tied_embeddings"]}


def step_seconds(machine: Machine, model: Mapping[str, Any], batch: int, context: int) -> tuple[float, float]:
    """(memory floor, arithmetic floor) of one decode step, in seconds."""
    needed = llama_step_bytes(model, BYTES_PER_ELEMENT[machine.dtype], batch, context)
    return needed["total"] / machine.bandwidth_bytes_per_s, needed["flops"] / machine.flops_per_s


def compute_bound_batch(machine: Machine, model: Mapping[str, Any], context: int) -> int | None:
    """The smallest batch whose step's flops take longer than its bytes, or None up to MAX_BATCH: at long
    contexts each sequence's own cache is read for its own flops, and the ratio may never reach the ridge."""
    for batch in range(1, MAX_BATCH + 1):
        memory, compute = step_seconds(machine, model, batch, context)
        if compute >= memory:
            return batch
    return None


def weight_bytes(machine: Machine, entry: Mapping[str, Any]) -> float:
    """Every published parameter in the machine's dtype (the table prices 16-bit weights)."""
    return published_weight_bytes(entry) * BYTES_PER_ELEMENT[machine.dtype] / 2


def sequences_that_fit(machine: Machine, entry: Mapping[str, Any], model: Mapping[str, Any], context: int) -> int | None:
    """Sequences of ``context`` tokens whose cache fits beside the weights, both in the machine's dtype; None where
    the machine's memory is not known."""
    if machine.memory_bytes is None:
        return None
    # tokens_that_fit counts units of the size it is given: here whole sequences
    return tokens_that_fit(machine.memory_bytes, weight_bytes(machine, entry),
                           kv_bytes(model, BYTES_PER_ELEMENT[machine.dtype], 1, context))


@dataclass(frozen=True)
class FullBudget:
    """The accelerator's cache budget filled with LONG_CONTEXT sequences of the published model, and what the
    memory floor alone says that batch gains over one sequence at a time."""
    machine: Machine
    weights_bytes: float
    budget_bytes: float  # the memory left beside the weights
    token_bytes: float  # one cached token, keys and values, every layer
    sequences: int
    step_s_alone: float  # batch 1's memory floor at LONG_CONTEXT
    step_s_full: float  # the full batch's
    compute_bound: bool  # whether the full batch's flops outlast its bytes

    @property
    def gain(self) -> float:
        """Tokens per second of the full batch over one sequence's, both at their memory floor."""
        return self.sequences * self.step_s_alone / self.step_s_full


def full_budget(device: Accelerator = H100_SXM) -> FullBudget:
    entry = published_model(MODEL)
    model, machine = llama_model(entry), accelerator(device)
    weights = weight_bytes(machine, entry)
    sequences = sequences_that_fit(machine, entry, model, LONG_CONTEXT)
    if not sequences:
        raise ValueError(f"{MODEL}'s weights leave no room for one {LONG_CONTEXT}-token sequence on {machine.name}")
    memory, compute = step_seconds(machine, model, sequences, LONG_CONTEXT)
    return FullBudget(machine, weights, machine.memory_bytes - weights,
                      kv_bytes(model, BYTES_PER_ELEMENT[machine.dtype], 1, 1), sequences,
                      step_seconds(machine, model, 1, LONG_CONTEXT)[0], memory, compute >= memory)


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


def sources(device: Accelerator = H100_SXM) -> list[tuple[str, str]]:
    """The links of the published figures the arithmetic uses: the datasheet and the model's configuration."""
    return [(f"{device.name} product page (its datasheet figures)", device.source),
            (f"{MODEL} config.json", published_model(MODEL)["config"])]
