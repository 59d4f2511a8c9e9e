"""One request's keys and values in buffers allocated once, written in place, read as views."""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.toy.config import ModelConfig


class PreallocatedKVCache:
    """Storage for up to ``capacity`` positions; ``length`` of them are valid.

    Shape contract: ``update`` takes (B, Hkv, T, D) keys and values and
    returns views (B, Hkv, length, D) of the valid part. Nothing is copied
    except the new entries, and nothing is allocated after construction.
    """

    def __init__(self, batch: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
        if min(batch, kv_heads, capacity, head_dim) < 1:
            raise ValueError(f"batch, kv_heads, capacity and head_dim must be >= 1, "
                             f"got {batch}, {kv_heads}, {capacity}, {head_dim}")
        self.keys: Tensor | None = torch.zeros(batch, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.values: Tensor | None = torch.zeros_like(self.keys)
        self.capacity = capacity
        self._length = 0

    @classmethod
    def for_model(cls, config: ModelConfig, batch: int, capacity: int) -> PreallocatedKVCache:
        return cls(batch, config.kv_heads, capacity, config.head_dim, config.dtype)

    @property
    def length(self) -> int:
        return self._length

    # --8<-- [start:update]
    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        stored_keys, stored_values = self._buffers()
        expected = (stored_keys.shape[0], stored_keys.shape[1], stored_keys.shape[3])
        if keys.dim() != 4 or keys.shape != values.shape or (keys.shape[0], keys.shape[1], keys.shape[3]) != expected:
            raise ValueError(f"new keys {tuple(keys.shape)} / values {tuple(values.shape)} do not fit "
                             f"storage (B, Hkv, T, D) = {tuple(stored_keys.shape)}")
        if keys.dtype != stored_keys.dtype or values.dtype != stored_keys.dtype:
            raise ValueError(f"{keys.dtype} entries, the cache stores {stored_keys.dtype}")
        start, end = self._length, self._length + keys.shape[2]
        if end > self.capacity:
            raise ValueError(f"{start} stored + {keys.shape[2]} new positions = {end}, "
                             f"beyond the preallocated capacity of {self.capacity}")
        stored_keys[:, :, start:end] = keys  # in place: no new allocation
        stored_values[:, :, start:end] = values
        self._length = end
        return self.stored()
    # --8<-- [end:update]

    def stored(self) -> tuple[Tensor, Tensor]:
        """Views (B, Hkv, length, D) of the valid positions."""
        keys, values = self._buffers()
        return keys[:, :, : self._length], values[:, :, : self._length]

    def release(self) -> None:
        """The request is over: drop the buffers so their memory can be reused."""
        self.keys = self.values = None
        self._length = 0

    @property
    def allocated_bytes(self) -> int:
        """Bytes held while the request lives: the whole capacity, valid or not."""
        return 0 if self.keys is None or self.values is None else sum(
            t.numel() * t.element_size() for t in (self.keys, self.values))

    def _buffers(self) -> tuple[Tensor, Tensor]:
        if self.keys is None or self.values is None:
            raise ValueError("this cache was released; start a new one for a new request")
        return self.keys, self.values
