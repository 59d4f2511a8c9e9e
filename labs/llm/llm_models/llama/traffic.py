"""What one decode step of a Llama-family decoder must move and compute: the bytes of its weights and KV cache, and
its flops, from a model config (``LlamaDecoderConfig.as_record()``, or a published configuration in the same keys)
and the bytes per element of the dtype it is applied in.

Torch-free: the decode lab's figures price its trained model's steps with it, and the accelerator arithmetic
(llm_models.accelerator) a published model's on a datasheet's machine. The KV cache's bytes are the formula every
lab shares (llm_models.kv_bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_models.kv_bytes import kv_bytes


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
    still float32 (llm_models.kernels.quantize)."""
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
