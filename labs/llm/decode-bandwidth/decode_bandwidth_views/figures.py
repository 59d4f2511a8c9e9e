"""The record's derivable figures, in plain Python (the site build imports no torch).

These mirror ``decode_bandwidth.bandwidth.step_bytes``, ``kv_crossover`` and the
benchmark's client summary; the lab's tests hold the two copies equal.
"""

from __future__ import annotations

import math
from typing import Any

BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}
OURS = ("ours-concat", "ours-prealloc")
# How the decoder stores each matrix (decode_bandwidth.model.DecoderLayer.LAYOUT; a test holds them equal).
LAYOUT = {"qkv": "in_out", "attention out": "in_out", "mlp fc": "in_out", "mlp proj": "out_in", "output head": "in_out"}
# The benchmark's constants, copied so the site build needs no torch (test_decode_floor holds them equal):
# decode_bandwidth.benchmark.TARGETS and WALL_TIME_TARGET_S, decode_bandwidth.equivalence.ATOL and RTOL,
# decode_bandwidth.bandwidth.MIN_BANDWIDTH_PASSES.
TARGETS = {"best_over_hf_dynamic": 0.85, "step_over_floor": 1.6}
WALL_TIME_TARGET_S = 300
ATOL = 1e-4
RTOL = 1e-4
MIN_BANDWIDTH_PASSES = 10
KINDS = ["qkv", "attention out", "mlp fc", "mlp proj", "output head", "attention", "cache writes and copies",
         "other"]
MATRICES = tuple(KINDS[:5])  # the kinds that multiply by a weight matrix


def dims(model: dict[str, Any]) -> tuple[int, int, int, int]:
    width = model["width"]
    return width, model["kv_heads"] * model["head_dim"], model["ffn_multiplier"] * width, model["layers"]


def weight_bytes(model: dict[str, Any], size: int) -> int:
    width, kv_width, hidden, layers = dims(model)
    per_layer = (2 * width + width * (width + 2 * kv_width) + (width + 2 * kv_width) + width * width + width
                 + 2 * width + width * hidden + hidden + hidden * width + width)
    return (layers * per_layer + 2 * width + model["vocab_size"] * width) * size


def step_bytes(model: dict[str, Any], dtype: str, batch: int, context: int) -> dict[str, int]:
    """What a decode step at ``context`` attended positions must move, and its flops."""
    size = BYTES_PER_ELEMENT[dtype]
    width, kv_width, hidden, layers = dims(model)
    per_position = 2 * layers * batch * kv_width * size
    matrices = layers * (width * (width + 2 * kv_width) + width * width + 2 * width * hidden) \
        + model["vocab_size"] * width
    figures = {
        "weights": weight_bytes(model, size),
        "embedding_rows": (batch + 1) * width * size,
        "kv_read": per_position * context,
        "kv_written": per_position,
        "flops": 2 * batch * matrices + 4 * layers * batch * model["heads"] * context * model["head_dim"],
    }
    figures["total"] = figures["weights"] + figures["embedding_rows"] + figures["kv_read"] + figures["kv_written"]
    return figures


def kv_crossover(model: dict[str, Any]) -> float:
    """B x T at which KV reads equal weight reads (independent of dtype: both scale with it)."""
    size = BYTES_PER_ELEMENT[model["dtype"]]
    return weight_bytes(model, size) / (2 * model["layers"] * model["kv_heads"] * model["head_dim"] * size)


def kind_bytes(model: dict[str, Any], dtype: str, batch: int, context: int) -> dict[str, int]:
    """Per profiled kind, the bytes it must read in one step (as decode_bandwidth.profile.kind_bytes)."""
    size = BYTES_PER_ELEMENT[dtype]
    width, kv_width, hidden, layers = dims(model)
    shapes = {"qkv": (width, width + 2 * kv_width), "attention out": (width, width), "mlp fc": (width, hidden),
              "mlp proj": (hidden, width)}
    figures = {kind: layers * (rows * cols + cols) * size for kind, (rows, cols) in shapes.items()}
    per_position = 2 * layers * batch * kv_width * size
    figures.update({"output head": model["vocab_size"] * width * size, "attention": per_position * context,
                    "cache writes and copies": per_position,
                    "other": (layers * 4 + 2) * width * size + (batch + 1) * width * size})
    return {kind: figures[kind] for kind in KINDS}


def percentile(values: list[float], share: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: list[float]) -> float:
    return percentile(values, 0.5)


def client_summary(runs: list[list[int]], new_tokens: int) -> dict[str, float]:
    """TTFT (median over runs), inter-token latency percentiles (pooled over runs), tokens/s (median run)."""
    gaps = [later - earlier for stamps in runs for earlier, later in zip(stamps, stamps[1:])]
    return {"ttft_ns": median([stamps[0] for stamps in runs]),
            "itl_p50_ns": percentile(gaps, 0.5) if gaps else 0.0,
            "itl_p90_ns": percentile(gaps, 0.9) if gaps else 0.0,
            "itl_p99_ns": percentile(gaps, 0.99) if gaps else 0.0,
            "tokens_per_s": new_tokens / median([stamps[-1] for stamps in runs]) * 1e9}


def rotation(modes: list[str], repetition: int) -> list[str]:
    """labkit.bench.run_order, which the benchmark used: repetition r starts with mode r mod len(modes)."""
    shift = repetition % len(modes)
    return [*modes[shift:], *modes[:shift]]


def grid(bench: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    """(dtype, threads, batch, context) of every group the config asks for, in the benchmark's order."""
    groups = [(bench["dtype"], bench["threads"], b, c) for b in bench["batches"] for c in bench["contexts"]]
    if bench["variant_threads"]:
        groups += [(bench["dtype"], bench["variant_threads"], b, c)
                   for b in bench["variant_batches"] for c in bench["contexts"]]
    if bench["variant_dtype"]:
        groups += [(bench["variant_dtype"], bench["threads"], b, c)
                   for b in bench["variant_batches"] for c in bench["contexts"]]
    return groups


def cell_table(record: dict[str, Any]) -> dict[tuple[str, int, int, int, str], dict[str, Any]]:
    """Cells by (dtype, threads, batch, context, mode)."""
    return {(c["dtype"], c["threads"], c["batch"], c["context"], c["mode"]): c for c in record["cells"]}


def best_ours(cells: dict[tuple[str, int, int, int, str], dict[str, Any]],
              key: tuple[str, int, int, int]) -> dict[str, Any]:
    """The faster of this lab's two modes at one group (lower median)."""
    return min((cells[(*key, mode)] for mode in OURS), key=lambda cell: cell["median_ns_per_step"])
