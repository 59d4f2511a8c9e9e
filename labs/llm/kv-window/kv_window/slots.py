"""Key/value slots that carry their own metadata: each slot's absolute position, sequence id and valid flag.

A contiguous cache can infer all three from a tensor's length (slot i holds position i of the one sequence,
and every slot up to the length is filled). Once slots are overwritten, evicted or shared by several
sequences, that inference is wrong; here every slot says what it holds, per key/value head (a score-based
eviction keeps different positions in different heads), and masks are built from these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

META_DTYPE = torch.int32  # positions and sequence ids: 4 bytes each per slot and head, beside a 1-byte flag
EMPTY = -1  # the position of a slot that holds nothing yet


@dataclass
class Slots:
    keys: Tensor  # (B, Hkv, S, D)
    values: Tensor  # (B, Hkv, S, D)
    positions: Tensor  # (B, Hkv, S) int32: the absolute position each slot holds within its sequence
    sequences: Tensor  # (B, Hkv, S) int32: which sequence of the row it belongs to
    valid: Tensor  # (B, Hkv, S) bool: False for a slot never written

    @classmethod
    def empty(cls, batch: int, kv_heads: int, count: int, head_dim: int, dtype: torch.dtype,
              device: torch.device | str = "cpu") -> Slots:
        """``count`` slots that hold nothing (count may be 0: a cache that grows starts so)."""
        keys = torch.zeros(batch, kv_heads, count, head_dim, dtype=dtype, device=device)
        meta = torch.full((batch, kv_heads, count), EMPTY, dtype=META_DTYPE, device=device)
        return cls(keys, torch.zeros_like(keys), meta, torch.zeros_like(meta), meta >= 0)

    @classmethod
    def of(cls, keys: Tensor, values: Tensor, positions: Tensor, sequences: Tensor) -> Slots:
        """New entries (B, Hkv, T, D) with the positions and sequence ids (B, T) of their tokens."""
        batch, kv_heads, length, _ = keys.shape
        if positions.shape != (batch, length) or sequences.shape != (batch, length):
            raise ValueError(f"positions {tuple(positions.shape)} and sequences {tuple(sequences.shape)} must both "
                             f"be (batch, tokens) = {(batch, length)}")
        shape = (batch, kv_heads, length)
        meta = positions.to(META_DTYPE)[:, None].expand(shape)
        return cls(keys, values, meta, sequences.to(META_DTYPE)[:, None].expand(shape),
                   torch.ones(shape, dtype=torch.bool, device=keys.device))

    @property
    def count(self) -> int:
        """Physical slots, filled or not: what the cache's memory holds, never its logical length."""
        return self.keys.shape[-2]

    def cat(self, other: Slots) -> Slots:
        """These slots followed by ``other``'s, along the slot axis (a new tensor of each)."""
        return Slots(*(torch.cat((mine, theirs), dim=2) for mine, theirs in zip(self.fields(), other.fields())))

    def take(self, index: Tensor) -> Slots:
        """The slots at ``index`` (B, Hkv, K), per row and head."""
        entry = index[..., None].expand(*index.shape, self.keys.shape[-1])
        return Slots(self.keys.gather(2, entry), self.values.gather(2, entry), self.positions.gather(2, index),
                     self.sequences.gather(2, index), self.valid.gather(2, index))

    def fields(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        return self.keys, self.values, self.positions, self.sequences, self.valid

    def stored_bytes(self) -> int:
        """Bytes of every tensor the slots hold, metadata included, counted from the tensors."""
        return sum(tensor.numel() * tensor.element_size() for tensor in self.fields())
