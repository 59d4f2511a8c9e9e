"""Deliberately wrong caches, kept so the tests can show they catch each classic mistake.

Never use them for anything but demonstrating that the checks fail.
"""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.inputs import new_positions

from .decoder import WindowCache
from .ring import RingStore
from .rules import visible
from .slots import Slots
from .stores import FullStore


class PhysicalLengthCache(WindowCache):
    """Bug: the next token's position is taken from the slots the cache holds, as a contiguous cache may. Once
    a policy evicts, new tokens are numbered as if the evicted ones had never been, and rotate at the wrong
    angles."""

    def positions(self, batch: int, length: int, device: torch.device) -> Tensor:
        held = int(self.layers[0].kept.valid[0, 0].sum())
        return new_positions(held, length, device).expand(batch, length)


class TopLeftBandRing(RingStore):
    """Bug: the band is aligned to the top-left corner of the (queries x slots) scores, as a mask built from
    tensor indices is (PyTorch's is_causal on a rectangle): query i sees slots i - window + 1 .. i counted
    from the first kept slot, not the keys its position allows."""

    def mask(self, every: Slots, positions: Tensor, sequences: Tensor) -> Tensor:
        queries = torch.arange(positions.shape[1])[:, None]
        keys = torch.arange(every.count)[None, :]
        return visible(queries, keys, window=self.window)[None, None]


class LeakyPackedStore(FullStore):
    """Bug: a packed row masked causally without its sequence ids, so each sequence also sees every earlier
    sequence packed before it (cross-contamination)."""

    def mask(self, every: Slots, positions: Tensor, sequences: Tensor) -> Tensor:
        order = torch.arange(positions.shape[1])
        return (order[None, :] <= order[:, None])[None, None]
