"""The decode record's formulas: the floors' stability limits, the trained model's ladder as the page words it, how the two models
compare, the tables a record is read through, and each cell's regime.

Torch-free: the record's derivations (derivation.py, invariants.py) and the views import them from here. What the
timed code takes (the grid, the floors' kernels, a step's bytes and flops, the trained model's modes) is defined
by the mechanism, one home each (decode_bandwidth.grid, .floors, .traffic, .llama_modes; the KV formula and the
element sizes in llm_models.kv_bytes, a Llama step's bytes and flops in llm_models.llama.traffic): the figures,
the views and the tests import each from there, and from here only what is defined here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from labkit.bench import run_order
from labkit.summary import middle_half, percentile
from llm_models.kv_bytes import kv_bytes
from llm_models.llama.traffic import llama_head_bytes, llama_step_bytes

from ..grid import Cell, Group, group_key
from ..traffic import dims, step_bytes

WALL_TIME_TARGET_S = 300  # the whole benchmark within 5 minutes on the 2-core development machine
CLIENT_FIGURES = ("ttft_ns", "itl_p50_ns", "itl_p90_ns", "itl_p99_ns", "tokens_per_s")

# The ladder a reader climbs, each rung keeping the one before and changing one thing, and what it changes.
LLAMA_LADDER = {
    "hf-dynamic": "transformers' LlamaForCausalLM, its DynamicCache concatenating each new position",
    "ours-prealloc": "this project's decoder: a cache allocated once and written in place, seven F.linear products "
                     "per layer",
    "ours-fused": "q, k, v fused into one matrix and gate, up into another (four products per layer), each kind "
                  "through the kernel measured fastest for it in this run",
    "ours-fused-compiled": "the same, each layer one torch.compile region: norms, rotary, cache writes, softmax, "
                           "SwiGLU and residual adds fused around the matrix kernels",
    "ours-native": "the whole step in one C call: every layer's norms, products, rotary turn, attention and SwiGLU "
                   "in one loop nest over weights packed for it, nothing dispatched per operation",
    "ours-int8": "the same call over int8 weight-only codes, one byte per weight and a float32 scale per row, each "
                 "code widened to float32 as it streams: a quarter of the weight bytes, so a floor of its own",
}


CONTRASTED = ("weight_bytes", "head_bytes", "head_share", "kv_heads_x_layers", "kv_bytes_per_position",
              "batch_x_context")  # the fields the two models are compared by, llama / gpt2


def contrast(gpt2: Mapping[str, Any], llama: Mapping[str, Any], size: int, context: int) -> dict[str, dict[str, float]]:
    """The two models' bytes per step side by side, in one dtype: weights, the head and its share, KV per position,
    the shape of their caches, and a batch-1 step at ``context`` split into layer weights, the head and the rest
    (the KV cache read and written, and embedding rows); then each compared field as llama / gpt2."""
    steps = {"gpt2": step_bytes(gpt2, size, 1, context), "llama": llama_step_bytes(llama, size, 1, context)}
    rows: dict[str, dict[str, float]] = {}
    for name, model in (("gpt2", gpt2), ("llama", llama)):
        step, head, kv = steps[name], llama_head_bytes(model, size), kv_bytes(model, size, 1, 1)
        weights = step["weights"]
        rows[name] = {"weight_bytes": weights, "head_bytes": head, "head_share": head / weights,
                      "kv_bytes_per_position": kv, "batch_x_context": weights / kv,
                      "kv_heads_x_layers": model["kv_heads"] * model["layers"],
                      "queries_per_kv_head": model["heads"] // model["kv_heads"],
                      "kv_head_share": model["kv_heads"] / model["heads"], "layer_bytes": weights - head,
                      "step_kv_bytes": step["kv_read"] + step["kv_written"] + step["embedding_rows"],
                      "step_total_bytes": step["total"]}
    rows["ratios"] = {field: rows["llama"][field] / rows["gpt2"][field] for field in CONTRASTED}
    return rows


def llama_grid(llama: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(threads, context) of every timed Llama group, threads first as they were timed."""
    return [(threads, context) for threads in llama["threads"] for context in llama["contexts"]]


def activation_bytes(model: Mapping[str, Any], size: int, batch: int, context: int) -> dict[str, int]:
    """The largest activations of one step, which the floor leaves out: the logits, one layer's attention scores
    (where a kernel materialises them) and one layer's MLP hidden vector."""
    _, _, hidden, _ = dims(model)
    return {"logits": batch * model["vocab_size"] * size,
            "attention_scores": batch * model["heads"] * context * size,
            "mlp_hidden": batch * hidden * size}


def client_summary(runs: Sequence[Sequence[int]], new_tokens: int) -> dict[str, float]:
    """TTFT (median over runs), inter-token latency percentiles (pooled over runs), tokens/s (median run)."""
    gaps = [later - earlier for stamps in runs for earlier, later in zip(stamps, stamps[1:])]
    return {"ttft_ns": percentile([stamps[0] for stamps in runs], 0.5),
            "itl_p50_ns": percentile(gaps, 0.5) if gaps else 0.0,
            "itl_p90_ns": percentile(gaps, 0.9) if gaps else 0.0,
            "itl_p99_ns": percentile(gaps, 0.99) if gaps else 0.0,
            "tokens_per_s": new_tokens / percentile([stamps[-1] for stamps in runs], 0.5) * 1e9}


def rotations(modes: Sequence[str], repeats: int) -> list[list[str]]:
    """The run order of every repetition under labkit.bench's rotating policy."""
    return [run_order(modes, repetition) for repetition in range(repeats)]


def group_table(record: Mapping[str, Any]) -> dict[Group, dict[str, Any]]:
    """Groups by (dtype, threads, batch, context)."""
    return {group_key(g): g for g in record["groups"]}


def cell_table(record: Mapping[str, Any]) -> dict[Cell, dict[str, Any]]:
    """Cells by (dtype, threads, batch, context, mode)."""
    return {(*group_key(c), c["mode"]): c for c in record["cells"]}


def best_cell(record: Mapping[str, Any], key: Group) -> dict[str, Any]:
    """The cell of the fastest of this lab's modes at one group, as the record names it (groups[].best_ours)."""
    return cell_table(record)[(*key, group_table(record)[key]["best_ours"])]


def step_matrix_ns(layout: Mapping[str, Any], kernel: str | None = None) -> float:
    """One step's weight multiplies through one kernel (default: each kind's stored layout): time x matrices, summed."""
    return sum(row[f"{kernel or row['stored']}_ns"] * row["matrices"] for row in layout["rows"])


def other_layout(stored: str) -> str:
    return "out_in" if stored == "in_out" else "in_out"


# Horace He's three regimes, named per cell from the two floors measured in the same run and the step's
# median: the higher floor says whether bytes or flops bound the step; a step more than 1 / OVERHEAD_SHARE
# times that floor spends most of its time on neither (dispatch, Python, kernels far below their peak). A cell
# whose own repetitions fall on both sides of that line (its lower and upper quartiles name different regimes) is
# "unresolved": the run cannot tell which regime it is in, and a page must not name one.
REGIMES = {"memory": "bandwidth-bound", "compute": "compute-bound", "overhead": "overhead-bound",
           "unresolved": "unresolved (it straddles the overhead line)"}
OVERHEAD_SHARE = 0.5  # the higher floor explains under half of the step: overhead-bound


def one_regime(step_ns: float, memory_floor_ns: float, compute_floor_ns: float) -> str:
    """'memory', 'compute' or 'overhead' for one step time against its two floors."""
    higher = max(memory_floor_ns, compute_floor_ns)
    if higher < OVERHEAD_SHARE * step_ns:
        return "overhead"
    return "memory" if memory_floor_ns >= compute_floor_ns else "compute"


def regime(durations_ns: Sequence[float], memory_floor_ns: float, compute_floor_ns: float,
           bound_ns: float | None = None) -> str:
    """The regime (a key of REGIMES) of a cell from its repetitions against its two floors: the one its lower and
    upper quartiles agree on, else 'unresolved'. With ``bound_ns`` (the same bytes at the run's best read), the
    label must also hold against that floor: the floor read beside a group moves through a run, and a label that
    flips between the two rests on that movement, not on the step."""
    low, high = middle_half(durations_ns)
    memories = (memory_floor_ns,) if bound_ns is None else (memory_floor_ns, bound_ns)
    found = {one_regime(step, memory, compute_floor_ns) for step in (low, high) for memory in memories}
    return found.pop() if len(found) == 1 else "unresolved"
