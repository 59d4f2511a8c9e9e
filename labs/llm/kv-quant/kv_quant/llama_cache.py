"""A cache format standing in for the Llama decoder's plain cache (llm_models.llama.cache.LayerCache), one layer each.

llm_models.llama.model.LlamaDecoder asks each layer's store for ``length``, ``capacity``, ``update(k, v)`` and reads
the shape, dtype and device of ``keys`` to check that the store fits the model. ``FormatLayerCache`` offers
exactly that over a kv_quant cache, so every format runs through the same decoder code: ``update`` appends
the new (already rotated) keys and values in the format and returns every position dequantized at once, as
transformers' QuantizedCache does. In float32 on a float32 model the stored tensors are the entries
themselves and the logits equal the plain cache's bit for bit (test_quant_llama.py proves it, and the same
for bfloat16 on a bfloat16 model).
"""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.cache_formats import CacheFormat

from .cache import QuantizedKVCache, make_cache


class FormatLayerCache:
    """One layer's keys and values in ``fmt``, behind llm_models.llama.cache.LayerCache's interface."""

    def __init__(self, fmt: CacheFormat, batch: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype = torch.float32) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 position, got {capacity}")
        self.store: QuantizedKVCache = make_cache(fmt, batch, kv_heads, head_dim, dtype)
        self.capacity = capacity
        # The decoder reads only this tensor's shape (batch, heads, head dim), dtype and device: an empty one,
        # so no float copy of the cache exists beside the format's own tensors.
        self.keys = torch.empty(batch, kv_heads, 0, head_dim, dtype=dtype)

    @property
    def length(self) -> int:
        return self.store.length

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        end = self.length + keys.shape[-2]
        if end > self.capacity:
            raise ValueError(f"{self.length} cached + {keys.shape[-2]} new positions = {end}, "
                             f"beyond the cache's capacity of {self.capacity}")
        return self.store.update(keys, values)

    def stored_bytes(self) -> int:
        return self.store.stored_bytes()


def format_cache(fmt: CacheFormat, layers: int, batch: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype = torch.float32) -> list[FormatLayerCache]:
    """One store per layer, in the decoder's list form (llm_models.llama.cache.new_cache's shape)."""
    return [FormatLayerCache(fmt, batch, kv_heads, capacity, head_dim, dtype) for _ in range(layers)]
