"""The two key/value stores of the multi-layer decoder: concatenating (the first lab's) and preallocated.

Both hold, per layer, keys and values of shape (B, Hkv, T, D). The decoder
reads the offset of the next token from them: positions continue after the
cached prefix, which is the first lab's rule.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .config import DecoderConfig

# Per layer (keys, values), each (B, Hkv, T, D); every call returns a new, longer list.
ConcatCache = list[tuple[Tensor, Tensor]]


class PreallocatedCache:
    """One key buffer and one value buffer per layer, (B, Hkv, capacity, D), written in place.

    ``length`` positions are valid. A forward pass writes each layer's new
    entries at ``length .. length + T - 1`` and advances ``length`` once,
    after the last layer, so every layer sees the same offset.
    """

    def __init__(self, config: DecoderConfig, batch: int, capacity: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype | None = None) -> None:
        if batch < 1 or capacity < 1:
            raise ValueError(f"batch and capacity must be at least 1, got {batch} and {capacity}")
        if capacity > config.max_positions:
            raise ValueError(f"capacity {capacity} exceeds the position capacity of {config.max_positions}")
        shape = (batch, config.kv_heads, capacity, config.head_dim)
        dtype = config.dtype if dtype is None else dtype
        # NOTE: one allocation for every layer's keys and values (llm_models.llama.cache.new_cache says why): GPT-2's
        # per layer at 1,024 positions are 3 MB each, and apart the short contexts' would stay on 4 KiB pages
        whole = torch.zeros(2, config.layers, *shape, dtype=dtype, device=device)
        self.keys, self.values = list(whole[0].unbind()), list(whole[1].unbind())  # per layer (B, Hkv, P, D)
        self.batch, self.capacity = batch, capacity
        self.length = 0

    def write(self, layer: int, keys: Tensor, values: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        """Store (B, Hkv, T, D) entries at ``offset``; return views of positions 0 .. offset + T - 1."""
        end = offset + keys.shape[-2]
        if end > self.capacity:
            raise ValueError(f"{offset} stored + {keys.shape[-2]} new positions = {end}, "
                             f"beyond the preallocated capacity of {self.capacity}")
        stored_keys, stored_values = self.keys[layer], self.values[layer]
        stored_keys[:, :, offset:end] = keys  # in place: nothing allocated per step
        stored_values[:, :, offset:end] = values
        return stored_keys[:, :, :end], stored_values[:, :, :end]

    def advance(self, count: int) -> None:
        self.length += count

    def rewind(self, length: int) -> None:
        """Forget every position from ``length`` on (the benchmark repeats one step at a fixed context)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot rewind to {length}: the cache holds {self.length} positions")
        self.length = length


def random_concat_cache(config: DecoderConfig, batch: int, length: int, generator: torch.Generator,
                        device: torch.device | str = "cpu", dtype: torch.dtype | None = None) -> ConcatCache:
    """A concatenating cache holding ``length`` random positions per layer (timing only)."""
    shape = (batch, config.kv_heads, length, config.head_dim)
    dtype = config.dtype if dtype is None else dtype

    def draw() -> Tensor:
        return torch.randn(shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)

    return [(draw(), draw()) for _ in range(config.layers)]
