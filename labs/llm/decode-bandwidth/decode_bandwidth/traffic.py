"""What one decode step of the GPT-2-shaped decoder must move and compute: the bytes of its weights and KV cache,
and its flops, and per kind of operation the profile counts. A Llama step's are llm_models.llama.traffic's.

Torch-free, and the one home of each: the timed modules (bandwidth, profile) take them from here, and the
record's figures, views and tests import them from here too. A formula takes the record's model config (``config.model``, or
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
