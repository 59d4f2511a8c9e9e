"""A Llama step's floors on a machine, as arithmetic: a published configuration priced with one formula for a Llama
step (llm_models.llama.traffic) on a machine's read bandwidth and matrix rate.

Arithmetic, labelled so on the pages: no GPU ran here. An accelerator's bandwidth, flops and memory are its
datasheet's (llm_models.hardware); a measured CPU is a ``Machine`` built from a record's rates (the decode lab's
``this_cpu``). The model is a row of the published configurations (llm_models.published, the KV-cache page's
table).

``full_budget`` fills the accelerator's memory beside the weights with ``LONG_CONTEXT`` sequences and asks what
the memory floor alone says that batch gains: the decode page sets it beside this CPU's rates, the serving page
beside the trained server's budget.

Not a figure of any record, on purpose: a record holds what its run measured and derived from that, and no run
measures an accelerator. The pages compute this at build time, from checked records and published constants.
Torch-free (the site build imports it); no benchmark runs it, so it is in no record's fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_models.hardware import H100_SXM, Accelerator
from llm_models.kv_bytes import BYTES_PER_ELEMENT, kv_bytes, tokens_that_fit
from llm_models.llama.traffic import llama_step_bytes
from llm_models.published import model as published_model
from llm_models.published import weight_bytes as published_weight_bytes

MODEL = "Llama-3-8B"  # the published model both columns price: the KV-cache page's example
LONG_CONTEXT = 8192  # a long chat: the context of the capacity question and of the long-context batch
MAX_BATCH = 4096  # the largest batch searched for the turn to compute-bound (past it: "never")


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


def llama_model(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A row of the table of published configurations (llm_models.published), in the keys a Llama step's formula reads
    (llm_models.llama.traffic)."""
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


def sources(device: Accelerator = H100_SXM) -> list[tuple[str, str]]:
    """The links of the published figures the arithmetic uses: the datasheet and the model's configuration."""
    return [(f"{device.name} product page (its datasheet figures)", device.source),
            (f"{MODEL} config.json", published_model(MODEL)["config"])]
