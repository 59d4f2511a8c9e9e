"""What one decode step must move and compute: the bytes of its weights and KV cache, and its flops, for the
GPT-2-shaped decoder and for a Llama, and per kind of operation the profile counts.

Torch-free, and the one home of each: the timed modules (bandwidth, profile) and the accelerator arithmetic take
them from here, and the record's figures, views and tests read them through decode_bandwidth.figures.formulas,
which re-exports them. A formula takes the record's model config (``config.model``, or
``DecoderConfig.as_record()``) and the bytes per element of the dtype it is applied in; the KV cache's bytes are
the formula every lab shares (llm_models.kv_bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_models.kv_bytes import kv_bytes

KINDS = ["qkv", "attention out", "mlp fc", "mlp proj", "output head", "attention", "cache writes and copies",
         "other"]  # the profile's kinds of operation
MATRICES = tuple(KINDS[:5])  # the kinds that multiply by a weight matrix


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
    matrix_elements = layers * (width * (width + 2 * kv_width) + width * width + 2 * width * hidden) \
        + model["vocab_size"] * width  # every multiply-add a step does against a weight
    attention = 2 * 2 * layers * batch * model["heads"] * context * model["head_dim"]  # q.k and p.v
    figures = {
        "weights": weight_bytes(model, size),
        "embedding_rows": (batch + 1) * width * size,  # B token rows + 1 position row, looked up
        "kv_read": kv_bytes(model, size, batch, context),
        "kv_written": kv_bytes(model, size, batch, 1),  # the new token's keys and values
        "flops": 2 * batch * matrix_elements + attention,
    }
    figures["total"] = figures["weights"] + figures["embedding_rows"] + figures["kv_read"] + figures["kv_written"]
    return figures
# --8<-- [end:step_bytes]


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


def llama_int8_weight_bytes(model: Mapping[str, Any]) -> int:
    """The same weights as int8 codes: one byte per matrix element, a float32 scale per matrix row, the norms
    still float32 (decode_bandwidth.quantize)."""
    width, q_width, kv_width = model["width"], model["heads"] * model["head_dim"], model["kv_heads"] * model["head_dim"]
    # rows of q, k, v (q_width + 2 kv_width), o and down (width each), gate and up (hidden each); and the head's
    rows = model["layers"] * (q_width + 2 * kv_width + 2 * width + 2 * model["hidden"]) + model["vocab_size"]
    norms = (2 * model["layers"] + 1) * model["width"]
    return llama_matrix_elements(model) + 4 * rows + 4 * norms


def llama_head_bytes(model: Mapping[str, Any], size: int) -> int:
    """The output head, vocabulary x width, read whole every step (GPT-2's tied head has the same shape rule)."""
    return model["vocab_size"] * model["width"] * size


# --8<-- [start:llama_step_bytes]
def llama_step_bytes(model: Mapping[str, Any], size: int, batch: int, context: int,
                     weights: str = "float32") -> dict[str, int]:
    """What one Llama decode step at ``context`` attended positions (the new token included) must move, and its
    flops. The cache holds ``kv_heads`` heads per layer, not ``heads``: grouped-query attention's saving. With
    ``weights="int8"`` the matrices are int8 codes and their row scales; the cache stays in ``size`` bytes."""
    if batch < 1 or not 1 <= context <= model["max_positions"]:
        raise ValueError(f"need batch >= 1 and 1 <= context <= {model['max_positions']}, got {batch} and {context}")
    if weights not in ("float32", "int8"):
        raise ValueError(f"weights must be float32 or int8, got {weights!r}")
    attention = 2 * 2 * model["layers"] * batch * model["heads"] * context * model["head_dim"]  # q.k and p.v
    figures = {
        "weights": llama_weight_bytes(model, size) if weights == "float32" else llama_int8_weight_bytes(model),
        # Tied: the looked-up token rows belong to the matrix the head reads whole, already counted.
        "embedding_rows": 0 if model["tie_embeddings"] else batch * model["width"] * size,
        "kv_read": kv_bytes(model, size, batch, context),
        "kv_written": kv_bytes(model, size, batch, 1),
        "flops": 2 * batch * llama_matrix_elements(model) + attention,
    }
    figures["total"] = figures["weights"] + figures["embedding_rows"] + figures["kv_read"] + figures["kv_written"]
    return figures
# --8<-- [end:llama_step_bytes]


def kv_crossover(model: Mapping[str, Any]) -> float:
    """The B x T at which a step's KV reads equal its weight reads (the dtype cancels: both scale with it)."""
    size = model["bytes_per_element"]
    return weight_bytes(model, size) / kv_bytes(model, size, 1, 1)


def matrix_shapes(model: Mapping[str, Any]) -> dict[str, tuple[tuple[int, int], int]]:
    """Per weight-matrix kind, its (in, out) shape and how many a step multiplies by."""
    width, kv_width, hidden, layers = dims(model)
    return {"qkv": ((width, width + 2 * kv_width), layers), "attention out": ((width, width), layers),
            "mlp fc": ((width, hidden), layers), "mlp proj": ((hidden, width), layers),
            "output head": ((width, model["vocab_size"]), 1)}


def kind_bytes(model: Mapping[str, Any], size: int, batch: int, context: int) -> dict[str, int]:
    """Per profiled kind, the bytes it must read in one step (weights with their biases; attention reads
    the KV cache); together they are the step's total."""
    width, _, _, layers = dims(model)
    figures = {kind: count * (rows * cols + cols) * size
               for kind, ((rows, cols), count) in matrix_shapes(model).items()}
    figures.update({"output head": model["vocab_size"] * width * size,  # no bias, read once
                    "attention": kv_bytes(model, size, batch, context),
                    "cache writes and copies": kv_bytes(model, size, batch, 1),  # the new token's keys and values
                    "other": (layers * 4 + 2) * width * size + (batch + 1) * width * size})
    return {kind: figures[kind] for kind in KINDS}
