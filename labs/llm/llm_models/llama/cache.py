"""Preallocated key/value storage for one layer: written in place, never reallocated, never concatenated.

It has the shape of the first lab's ``KVStore`` (``length`` and ``update``), so
the decoder treats it exactly as the toy block treats a store. Keys arrive
already rotated: RoPE turns a key by its absolute position once, when it is
computed, and a cached key never moves again. That is why new tokens must be
rotated starting at the cache's ``length`` (the offset rule,
``llm_models.inputs.new_positions``), not at zero.
"""

from __future__ import annotations

import torch
from torch import Tensor


class LayerCache:
    def __init__(self, batch: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 storage: Tensor | None = None) -> None:
        """Zeroed keys and values for ``capacity`` positions; in ``storage`` (2, B, Hkv, P, D) where given (new_cache
        hands each layer its part of one allocation), else in two of its own."""
        for name, value in (("batch", batch), ("kv_heads", kv_heads), ("capacity", capacity), ("head_dim", head_dim)):
            if value < 1:
                raise ValueError(f"LayerCache {name} must be at least 1, got {value}")
        shape = (batch, kv_heads, capacity, head_dim)
        if storage is None:
            storage = torch.zeros(2, *shape, dtype=dtype, device=device)
        elif tuple(storage.shape) != (2, *shape) or storage.dtype != dtype or not storage.is_contiguous():
            raise ValueError(f"LayerCache storage must be contiguous {dtype} of shape {(2, *shape)}, got "
                             f"{storage.dtype} {tuple(storage.shape)}")
        self.keys, self.values = storage[0], storage[1]  # (B, Hkv, P, D) each
        self.length = 0  # positions stored so far: the offset of the next token

    @property
    def capacity(self) -> int:
        return self.keys.shape[-2]

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Store new (B, Hkv, T, D) entries after the stored ones; return views of all length + T positions."""
        expected = (*self.keys.shape[:2], self.keys.shape[-1])
        for name, tensor in (("keys", keys), ("values", values)):
            found = (tensor.shape[0], tensor.shape[1], tensor.shape[-1]) if tensor.dim() == 4 else tuple(tensor.shape)
            if found != expected:
                raise ValueError(f"new {name} of shape {tuple(tensor.shape)} do not fit the cache's "
                                 f"(batch, kv_heads, T, head_dim) = {tuple(self.keys.shape)} with T free")
        if keys.shape != values.shape:
            raise ValueError(f"new keys {tuple(keys.shape)} and values {tuple(values.shape)} differ in shape")
        end = self.length + keys.shape[-2]
        if end > self.capacity:
            raise ValueError(f"{self.length} cached + {keys.shape[-2]} new positions = {end}, "
                             f"beyond the cache's capacity of {self.capacity}")
        self.keys[:, :, self.length : end] = keys
        self.values[:, :, self.length : end] = values
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]  # (B, Hkv, length, D) views, no copy


def new_cache(layers: int, batch: int, kv_heads: int, capacity: int, head_dim: int,
              dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> list[LayerCache]:
    """One store per layer, each with room for ``capacity`` positions, all of them in one allocation.

    NOTE: one allocation, not two per layer: a layer's keys for SmolLM2 at 1,024 positions are 0.8 MB, less than a
    2 MiB page, so apart they would stay on 4 KiB pages wherever the allocator put them, and a step reads every
    layer's cache (llm_models.gathered says why that moves a step's time from one process to the next)."""
    whole = torch.zeros(layers, 2, batch, kv_heads, capacity, head_dim, dtype=dtype, device=device)
    return [LayerCache(batch, kv_heads, capacity, head_dim, dtype, device, storage=whole[layer])
            for layer in range(layers)]
