"""How many bytes a KV cache keeps alive between decoding steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch-free at run time: the site build imports kv_cache_bytes through kv_cache.figures
    from torch import Tensor


# --8<-- [start:kv_cache_bytes]
def kv_cache_bytes(
    batch: int, heads: int, length: int, head_dim: int, bytes_per_element: int
) -> int:
    """Element storage of one layer's keys and values: 2 x B x H x T x D x bytes.

    Assumptions: one layer (a deeper decoder keeps one such cache per layer),
    full multi-head attention (every query head has its own key/value head;
    with grouped-query attention, H is the number of key/value heads), and
    plain unquantised elements (no scales or other metadata). It counts the
    tensors' elements only: not weights, activations, temporary copies made
    while appending, allocator slack or Python objects.
    """
    for name, value in (("batch", batch), ("heads", heads), ("head_dim", head_dim),
                        ("bytes_per_element", bytes_per_element)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if length < 0:
        raise ValueError(f"length must be at least 0, got {length}")
    return 2 * batch * heads * length * head_dim * bytes_per_element
# --8<-- [end:kv_cache_bytes]


def cache_storage_bytes(cache: tuple[Tensor, Tensor]) -> int:
    """Bytes held by the cache tensors' elements, counted from the tensors themselves."""
    return sum(tensor.numel() * tensor.element_size() for tensor in cache)


# Bits one cached element takes in each format the pages price, scales included, under the names the quantized-cache
# lab gives the same formats (kv_quant.config; its test_quant_bytes holds these bits to its byte formulas).
# fp8: one scale per tensor, nothing per token. q8_0 and q4_0: llama.cpp's blocks of GROUP values with one fp16
# scale each (8 + 16 / 32 and 4 + 16 / 32 bits). int4-g32: 4-bit codes with a float32 scale and a float32 zero
# point per GROUP values (4 + 64 / 32 bits): the same code width as q4_0, a third more bytes.
KV_FORMATS = {"float32": 32.0, "float16": 16.0, "fp8": 8.0, "q8_0": 8.5, "int4-g32": 6.0, "q4_0": 4.5}
GROUP = 32  # values sharing one scale in q8_0, q4_0 and int4-g32


# --8<-- [start:kv_bytes_per_token]
def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bits_per_element: float) -> float:
    """Bytes one token adds to a decoder's cache: 2 (keys and values) x layers x KV heads x head dim x
    bits / 8. The whole cache is this x batch x tokens; the page's calculator computes the same."""
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("bits_per_element", bits_per_element)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    return 2 * layers * kv_heads * head_dim * bits_per_element / 8
# --8<-- [end:kv_bytes_per_token]


def whole_cache_bytes(bytes_per_token: float, batch: int, tokens: int) -> float:
    """The whole cache: bytes per token x batch x tokens per sequence. A batch counts whole sequences and a
    context whole tokens, so a fraction is refused (the page's calculator refuses the same)."""
    for name, value in (("batch", batch), ("tokens", tokens)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    return bytes_per_token * batch * tokens


def tokens_that_fit(memory_bytes: float, weight_bytes: float, bytes_per_token: float) -> int:
    """Cached tokens (summed over the batch) that fit in the memory left beside the weights; 0 if none."""
    return max(0, int((memory_bytes - weight_bytes) // bytes_per_token))
