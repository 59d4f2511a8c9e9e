"""A sliding window as a ring buffer: ``window`` slots per layer and head, position p written to slot p mod window.

Mistral's rolling buffer: memory stays fixed however long the sequence runs, keys are rotated at their
absolute positions once (so a query and a key are always as far apart as they were in the text), and a
chunk of any length, longer than the window included, is attended over the slots kept from before plus the
chunk itself, with a band mask built from every slot's position: the query at position t sees the keys at
t - window + 1 .. t. Only the chunk's newest ``window`` tokens are written back.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import slot_attention, visibility
from .rotary import Rotary
from .rules import ring_slot
from .slots import Slots
from .stores import Store, check_consecutive


class RingStore(Store):
    def __init__(self, window: int, batch: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str, rotary: Rotary) -> None:
        if window < 1:
            raise ValueError(f"a ring buffer needs at least 1 slot, got window={window}")
        super().__init__(Slots.empty(batch, kv_heads, window, head_dim, dtype, device), rotary)
        self.window = window

    def attend(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, sequences: Tensor) -> Tensor:
        check_consecutive(positions, "a ring buffer")
        new = self.new_slots(k, v, positions, sequences)
        every = self.kept.cat(new)  # (B, Hkv, window + T, D): a transient, freed after the call
        attended = slot_attention(self.rotary.turn(q, positions), every, self.mask(every, positions, sequences))
        self.write(new)
        return attended

    # --8<-- [start:band]
    def mask(self, every: Slots, positions: Tensor, sequences: Tensor) -> Tensor:
        """The band from metadata: each query sees the slots whose positions lie in its window."""
        return visibility(every, positions, sequences, window=self.window, per_head=False)
    # --8<-- [end:band]

    def write(self, new: Slots) -> None:
        """The newest ``window`` new entries into their slots, in place: the ring's memory never moves."""
        newest = min(new.count, self.window)
        index = ring_slot(new.positions[:, :, -newest:].long(), self.window)  # (B, Hkv, newest), distinct
        for kept, fresh in zip(self.kept.fields(), new.fields()):
            fresh = fresh[:, :, -newest:]
            kept.scatter_(2, index if fresh.dim() == 3 else index[..., None].expand_as(fresh), fresh)
