"""One layer's cache and the policy that fills it: the interface every policy implements, and the full cache.

A store receives the new tokens' queries, keys and values unrotated (``LlamaLayer.project``), with each
token's absolute position and sequence id; it rotates them as its policy requires, attends over the slots it
keeps plus the new ones with a mask built from their metadata, decides what stays, and returns the attention
output for ``LlamaLayer.finish``. The same call serves a decode step (one token) and a chunked prefill (many).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import slot_attention, visibility
from .rotary import Rotary
from .slots import Slots


class Store:
    """What every policy's per-layer cache offers the decoder."""

    def __init__(self, kept: Slots, rotary: Rotary) -> None:
        self.kept = kept  # the slots held between calls: the cache's memory
        self.rotary = rotary

    def attend(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, sequences: Tensor) -> Tensor:
        """q (B, H, T, D), k and v (B, Hkv, T, D) unrotated, positions and sequences (B, T) -> (B, H, T, D)."""
        raise NotImplementedError

    def stored_bytes(self) -> int:
        """Bytes the cache keeps between calls: entries and metadata, counted from its tensors."""
        return self.kept.stored_bytes()

    def new_slots(self, k: Tensor, v: Tensor, positions: Tensor, sequences: Tensor) -> Slots:
        """The new tokens as slots, keys rotated at their absolute positions (the store's dtype)."""
        dtype = self.kept.keys.dtype
        return Slots.of(self.rotary.turn(k, positions).to(dtype), v.to(dtype), positions, sequences)


class FullStore(Store):
    """The reference: every position stays, the cache grows by one slot per token and layer. Its mask still
    comes from metadata, so one row can hold several sequences (packing) with positions restarting."""

    def __init__(self, batch: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device | str,
                 rotary: Rotary) -> None:
        super().__init__(Slots.empty(batch, kv_heads, 0, head_dim, dtype, device), rotary)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, sequences: Tensor) -> Tensor:
        every = self.kept.cat(self.new_slots(k, v, positions, sequences))
        attended = slot_attention(self.rotary.turn(q, positions), every, self.mask(every, positions, sequences))
        self.kept = every
        return attended

    def mask(self, every: Slots, positions: Tensor, sequences: Tensor) -> Tensor:
        return visibility(every, positions, sequences, per_head=False)


def check_consecutive(positions: Tensor, what: str) -> None:
    """A cache that numbers its slots by position needs each row's new tokens at consecutive positions."""
    if positions.shape[1] > 1 and not bool((positions.diff(dim=1) == 1).all()):
        raise ValueError(f"{what} takes one sequence per row at consecutive positions; got positions "
                         f"{positions[0, :8].tolist()}...")
