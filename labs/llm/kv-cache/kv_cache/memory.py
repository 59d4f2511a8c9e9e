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
