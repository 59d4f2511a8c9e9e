"""How many bytes a KV cache keeps alive between decoding steps: the one formula every lab prices a cache with.

Here, below the labs, because every lab counts with it: the KV-cache page derives and explains it
(kv_cache.memory keeps that lab's table of formats beside it), the storage and window labs check their caches
against it, the serving pool sizes its blocks with it, the quantized caches measure their bits against it, and
the decode lab's floors and the accelerator arithmetic price a step's reads with ``kv_bytes``. Beside the formula,
``cache_storage_bytes`` counts the same bytes from a cache's tensors, which the tests and benchmarks hold the
formula to.

Torch-free: the site build derives figures with these functions, and a mechanism that uses them needs no tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch-free at run time: the site build imports this module
    from torch import Tensor

BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}  # an element's size in each dtype a lab runs in


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


def tokens_that_fit(memory_bytes: float, weight_bytes: float, bytes_per_token: float) -> int:
    """Cached tokens (summed over the batch) that fit in the memory left beside the weights; 0 if none."""
    return max(0, int((memory_bytes - weight_bytes) // bytes_per_token))


def kv_bytes(model: Mapping[str, Any], size: int, batch: int, positions: int) -> int:
    """Keys and values of ``positions`` positions of ``batch`` sequences in every layer of ``model`` (a record's
    model config: ``layers``, ``kv_heads``, ``head_dim``): the one-layer formula (``kv_cache_bytes``, with its
    key/value heads) times the layers."""
    return model["layers"] * kv_cache_bytes(batch, model["kv_heads"], positions, model["head_dim"], size)


def cache_storage_bytes(cache: tuple[Tensor, Tensor]) -> int:
    """Bytes held by the cache tensors' elements, counted from the tensors themselves."""
    return sum(tensor.numel() * tensor.element_size() for tensor in cache)
