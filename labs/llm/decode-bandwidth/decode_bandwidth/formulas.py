"""The decode lab's constants and formulas: bytes, flops, floors and the grid a record covers.

Torch-free, and the one home of each: the torch modules (bandwidth, profile, layout, equivalence,
benchmark), the record's derivations (figures.py) and the views import them from here.

A formula takes the record's model config (``config.model``, or ``DecoderConfig.as_record()``) and
the bytes per element of the dtype it is applied in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from labkit.bench import run_order
from labkit.summary import percentile

BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}
MODES = ["ours-concat", "ours-prealloc", "hf-dynamic", "hf-static"]  # the timed modes, in the first run order
BASELINE = "hf-dynamic"
OURS = ("ours-concat", "ours-prealloc")
EQUIVALENCE_MODES = ["hf-full", *MODES]  # transformers' own single pass is compared too
# The layout of each weight matrix: (in, out) for addmm, (out, in) for F.linear (decode_bandwidth.model).
LAYOUT = {"qkv": "in_out", "attention out": "in_out", "mlp fc": "in_out", "mlp proj": "out_in",
          "output head": "in_out"}
# The decode step's targets at batch 1 in the headline grid (fp32, headline threads): the faster of this
# lab's caches within this fraction of hf-dynamic's step, and within this multiple of the memory floor.
TARGETS = {"best_over_hf_dynamic": 0.85, "step_over_floor": 1.6}
WALL_TIME_TARGET_S = 300  # the whole benchmark within 5 minutes on the 2-core development machine
# float32, 12 layers of width 768: logits of a prefill-then-step path against one full pass.
ATOL = 1e-4
RTOL = 1e-4
MIN_BANDWIDTH_PASSES = 10  # the floor is the best of at least ten passes of each read kernel
STREAMS = 16  # the multi-stream read sums this many equal slices of the buffer, element by element
MATVEC_COLUMNS = 4096  # the BLAS read: the buffer as a matrix this wide, times a vector
# The read kernels the floor takes the fastest of. A step whose matrix-vector products stream weights
# faster than one kernel reads memory would beat a floor built on that kernel alone: a floor must be
# the best any kernel on this machine achieves, the BLAS matrix-vector product included.
READ_KERNELS = {
    "sum": "torch.sum over the whole buffer",
    "dot": "torch.dot of its two halves",
    "streams": f"an element-wise sum of its {STREAMS} equal slices ({STREAMS} read streams at once; "
               f"it writes a {STREAMS}th of the bytes, counted too)",
    "matvec": f"torch.mv, the buffer as a {MATVEC_COLUMNS}-column matrix times a vector (the BLAS "
              "matrix-vector product a decode step's weights go through)",
}
KINDS = ["qkv", "attention out", "mlp fc", "mlp proj", "output head", "attention", "cache writes and copies",
         "other"]  # the profile's kinds of operation
MATRICES = tuple(KINDS[:5])  # the kinds that multiply by a weight matrix
CLIENT_FIGURES = ("ttft_ns", "itl_p50_ns", "itl_p90_ns", "itl_p99_ns", "tokens_per_s")

# The trained model beside the grid: the project's Llama-family decoder (kv_cache.llama) on SmolLM2-135M-Instruct,
# against transformers' LlamaForCausalLM on the same tensors, at batch 1 in float32. ``tiny`` is a seeded random
# Llama of kv_cache.llama.testing, for the quick run and the tests.
LLAMA_PRESETS = {"smollm2": "SmolLM2-135M-Instruct, trained, dequantized from its packaged GGUF file to float32",
                 "tiny": "a tiny random Llama (kv_cache.llama.testing.TINY), for smoke runs"}
LLAMA_MODES = ["ours-prealloc", "hf-dynamic"]  # our decoder's preallocated cache, transformers' DynamicCache
LLAMA_BASELINE = "hf-dynamic"
LLAMA_DTYPE = "float32"
LLAMA_BATCH = 1
# float32 through 30 layers: the two step logits differ only in summation order; the KV-cache lab's parity tests
# on the same weights use the same bounds (logits reach about 40).
LLAMA_ATOL = 1e-3
LLAMA_RTOL = 1e-4

Group = tuple[str, int, int, int]  # (dtype, threads, batch, context)
Cell = tuple[str, int, int, int, str]  # ... and mode


def dims(model: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """Width, key/value width, MLP width and layers."""
    width = model["width"]
    return width, model["kv_heads"] * model["head_dim"], model["ffn_multiplier"] * width, model["layers"]


def weight_bytes(model: Mapping[str, Any], size: int) -> int:
    """Every weight element a step reads whole, times its size: the layers, the final norm, the tied head."""
    width, kv_width, hidden, layers = dims(model)
    per_layer = (
        2 * width  # attention layer norm: weight and bias
        + width * (width + 2 * kv_width) + (width + 2 * kv_width)  # fused qkv
        + width * width + width  # attention output
        + 2 * width  # mlp layer norm
        + width * hidden + hidden  # fc
        + hidden * width + width  # proj
    )
    return (layers * per_layer + 2 * width + model["vocab_size"] * width) * size  # + final norm + tied head


# --8<-- [start:step_bytes]
def step_bytes(model: Mapping[str, Any], size: int, batch: int, context: int) -> dict[str, int]:
    """What one decode step at ``context`` attended positions (the new token included) must move, and its flops."""
    if batch < 1 or not 1 <= context <= model["max_positions"]:
        raise ValueError(f"need batch >= 1 and 1 <= context <= {model['max_positions']}, got {batch} and {context}")
    width, kv_width, hidden, layers = dims(model)
    per_position = 2 * layers * batch * kv_width * size  # keys + values, all layers
    matrix_elements = layers * (width * (width + 2 * kv_width) + width * width + 2 * width * hidden) \
        + model["vocab_size"] * width  # every multiply-add a step does against a weight
    attention = 2 * 2 * layers * batch * model["heads"] * context * model["head_dim"]  # q.k and p.v
    figures = {
        "weights": weight_bytes(model, size),
        "embedding_rows": (batch + 1) * width * size,  # B token rows + 1 position row, looked up
        "kv_read": per_position * context,
        "kv_written": per_position,  # the new token's keys and values
        "flops": 2 * batch * matrix_elements + attention,
    }
    figures["total"] = figures["weights"] + figures["embedding_rows"] + figures["kv_read"] + figures["kv_written"]
    return figures
# --8<-- [end:step_bytes]


def kv_bytes_per_position(layers: int, kv_heads: int, head_dim: int, size: int) -> int:
    """Keys and values of one position in every layer, for one sequence."""
    return 2 * layers * kv_heads * head_dim * size


def llama_matrix_elements(model: Mapping[str, Any]) -> int:
    """Every weight a Llama decode step multiplies by: q, k, v, o, gate, up, down per layer, and the head."""
    width, q_width, kv_width = model["width"], model["heads"] * model["head_dim"], model["kv_heads"] * model["head_dim"]
    per_layer = width * q_width + 2 * width * kv_width + q_width * width + 3 * width * model["hidden"]
    return model["layers"] * per_layer + model["vocab_size"] * model["width"]


def llama_weight_bytes(model: Mapping[str, Any], size: int) -> int:
    """Every weight a Llama step reads whole: its matrices, two RMSNorm vectors per layer, the final norm, and
    the output head. A tied head is the token embedding itself: one matrix, counted once."""
    norms = (2 * model["layers"] + 1) * model["width"]
    return (llama_matrix_elements(model) + norms) * size


def llama_head_bytes(model: Mapping[str, Any], size: int) -> int:
    """The output head, vocabulary x width, read whole every step (GPT-2's tied head has the same shape rule)."""
    return model["vocab_size"] * model["width"] * size


# --8<-- [start:llama_step_bytes]
def llama_step_bytes(model: Mapping[str, Any], size: int, batch: int, context: int) -> dict[str, int]:
    """What one Llama decode step at ``context`` attended positions (the new token included) must move, and its
    flops. The cache holds ``kv_heads`` heads per layer, not ``heads``: grouped-query attention's saving."""
    if batch < 1 or not 1 <= context <= model["max_positions"]:
        raise ValueError(f"need batch >= 1 and 1 <= context <= {model['max_positions']}, got {batch} and {context}")
    per_position = batch * kv_bytes_per_position(model["layers"], model["kv_heads"], model["head_dim"], size)
    attention = 2 * 2 * model["layers"] * batch * model["heads"] * context * model["head_dim"]  # q.k and p.v
    figures = {
        "weights": llama_weight_bytes(model, size),
        # Tied: the looked-up token rows belong to the matrix the head reads whole, already counted.
        "embedding_rows": 0 if model["tie_embeddings"] else batch * model["width"] * size,
        "kv_read": per_position * context,
        "kv_written": per_position,
        "flops": 2 * batch * llama_matrix_elements(model) + attention,
    }
    figures["total"] = figures["weights"] + figures["embedding_rows"] + figures["kv_read"] + figures["kv_written"]
    return figures
# --8<-- [end:llama_step_bytes]


def contrast(gpt2: Mapping[str, Any], llama: Mapping[str, Any], size: int) -> dict[str, dict[str, float]]:
    """The two models' bytes per step side by side, in one dtype: weights, the head and its share, KV per position."""
    rows = {"gpt2": (weight_bytes(gpt2, size), llama_head_bytes(gpt2, size),
                     kv_bytes_per_position(gpt2["layers"], gpt2["kv_heads"], gpt2["head_dim"], size)),
            "llama": (llama_weight_bytes(llama, size), llama_head_bytes(llama, size),
                      kv_bytes_per_position(llama["layers"], llama["kv_heads"], llama["head_dim"], size))}
    return {name: {"weight_bytes": weights, "head_bytes": head, "head_share": head / weights,
                   "kv_bytes_per_position": kv, "batch_x_context": weights / kv}
            for name, (weights, head, kv) in rows.items()}


def llama_grid(llama: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(threads, context) of every timed Llama group, threads first as they were timed."""
    return [(threads, context) for threads in llama["threads"] for context in llama["contexts"]]


def kv_crossover(model: Mapping[str, Any]) -> float:
    """The B x T at which a step's KV reads equal its weight reads (the dtype cancels: both scale with it)."""
    size = model["bytes_per_element"]
    return weight_bytes(model, size) / (2 * model["layers"] * model["kv_heads"] * model["head_dim"] * size)


def matrix_shapes(model: Mapping[str, Any]) -> dict[str, tuple[tuple[int, int], int]]:
    """Per weight-matrix kind, its (in, out) shape and how many a step multiplies by."""
    width, kv_width, hidden, layers = dims(model)
    return {"qkv": ((width, width + 2 * kv_width), layers), "attention out": ((width, width), layers),
            "mlp fc": ((width, hidden), layers), "mlp proj": ((hidden, width), layers),
            "output head": ((width, model["vocab_size"]), 1)}


def kind_bytes(model: Mapping[str, Any], size: int, batch: int, context: int) -> dict[str, int]:
    """Per profiled kind, the bytes it must read in one step (weights with their biases; attention reads
    the KV cache); together they are the step's total."""
    width, kv_width, _, layers = dims(model)
    figures = {kind: count * (rows * cols + cols) * size
               for kind, ((rows, cols), count) in matrix_shapes(model).items()}
    per_position = 2 * layers * batch * kv_width * size
    figures.update({"output head": model["vocab_size"] * width * size,  # no bias, read once
                    "attention": per_position * context,
                    "cache writes and copies": per_position,  # the new token's keys and values
                    "other": (layers * 4 + 2) * width * size + (batch + 1) * width * size})
    return {kind: figures[kind] for kind in KINDS}


def kernel_bytes(kernel: str, buffer_bytes: int) -> int:
    """The bytes a read kernel moves over the buffer: all of them read, plus what it writes."""
    return buffer_bytes + buffer_bytes // STREAMS if kernel == "streams" else buffer_bytes


def best_rate(amount: float, durations_ns: Sequence[int]) -> tuple[int, float]:
    """The fastest pass and the rate it gives: bytes (or flops) per second."""
    best = min(durations_ns)
    return best, amount / best * 1e9


def square_matmul_flops(size: int) -> int:
    return 2 * size**3


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


def grid(bench: Mapping[str, Any]) -> list[Group]:
    """(dtype, threads, batch, context) of every timed group: the headline grid, then the variants."""
    groups = [(bench["dtype"], bench["threads"], b, c) for b in bench["batches"] for c in bench["contexts"]]
    if bench["variant_threads"]:
        groups += [(bench["dtype"], bench["variant_threads"], b, c)
                   for b in bench["variant_batches"] for c in bench["contexts"]]
    if bench["variant_dtype"]:
        groups += [(bench["variant_dtype"], bench["threads"], b, c)
                   for b in bench["variant_batches"] for c in bench["contexts"]]
    return groups


def headline_key(record: Mapping[str, Any]) -> tuple[str, int]:
    """The headline grid's (dtype, threads)."""
    bench = record["config"]["benchmark"]
    return bench["dtype"], bench["threads"]


def cell_table(record: Mapping[str, Any]) -> dict[Cell, dict[str, Any]]:
    """Cells by (dtype, threads, batch, context, mode)."""
    return {(c["dtype"], c["threads"], c["batch"], c["context"], c["mode"]): c for c in record["cells"]}


def best_ours(cells: Mapping[Cell, dict[str, Any]], key: Group) -> dict[str, Any]:
    """The faster of this lab's two modes at one group (lower median)."""
    return min((cells[(*key, mode)] for mode in OURS), key=lambda cell: cell["median_ns_per_step"])


def stored_matrix_ns(layout: Mapping[str, Any]) -> float:
    """One step's weight multiplies in the stored layout: per-matrix time x matrices, summed."""
    return sum(row[f"{row['stored']}_ns"] * row["matrices"] for row in layout["rows"])


# Horace He's three regimes, named per cell from the two floors measured in the same run and the step's
# median: the higher floor says whether bytes or flops bound the step; a step more than 1 / OVERHEAD_SHARE
# times that floor spends most of its time on neither (dispatch, Python, kernels far below their peak).
REGIMES = {"memory": "bandwidth-bound", "compute": "compute-bound", "overhead": "overhead-bound"}
OVERHEAD_SHARE = 0.5  # the higher floor explains under half of the step: overhead-bound


def regime(median_ns: float, memory_floor_ns: float, compute_floor_ns: float) -> str:
    """'memory', 'compute' or 'overhead' (keys of REGIMES) for one step against its two floors."""
    higher = max(memory_floor_ns, compute_floor_ns)
    if higher < OVERHEAD_SHARE * median_ns:
        return "overhead"
    return "memory" if memory_floor_ns >= compute_floor_ns else "compute"
