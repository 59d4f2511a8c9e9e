"""Score-based eviction, SnapKV's way, at the end of every prefill chunk: keep what recent queries attend to.

After a chunk has attended over the kept slots and itself, the chunk's last ``observation`` queries vote:
their attention weights, summed over the queries and over the query heads that share each key/value head,
averaged over ``kernel`` neighbouring slots, pick the ``slots - observation`` older slots that stay, per
key/value head; the observation window's own keys stay too. Heads keep different positions, so the slots'
metadata is per head, and the keys stay rotated at their absolute positions: the cache's logical length (the
next token's position) is the number of tokens seen, not the slots kept, as kvpress passes position ids from
the original length. The cache holds Hkv heads, never the query heads: a port that expands grouped-query heads
before caching keeps H / Hkv times the memory for the same choice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import attention_weights, grouped_scores, slot_attention, visibility
from .rotary import Rotary
from .slots import Slots
from .stores import Store


class SnapStore(Store):
    def __init__(self, slots: int, observation: int, kernel: int, batch: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str, rotary: Rotary) -> None:
        if not 1 <= observation < slots:
            raise ValueError(f"the observation window must lie in [1, slots) = [1, {slots}), got {observation}")
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"the pooling kernel must be odd and positive, got {kernel}")
        super().__init__(Slots.empty(batch, kv_heads, 0, head_dim, dtype, device), rotary)
        self.slots, self.observation, self.kernel = slots, observation, kernel

    def attend(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, sequences: Tensor) -> Tensor:
        every = self.kept.cat(self.new_slots(k, v, positions, sequences))
        mask = visibility(every, positions, sequences)  # (B, Hkv, T, K): heads keep different positions
        rotated = self.rotary.turn(q, positions)
        attended = slot_attention(rotated, every, mask)
        self.kept = every if every.count <= self.slots else self.select(rotated, every, mask)
        return attended

    # --8<-- [start:select]
    def select(self, q: Tensor, every: Slots, mask: Tensor) -> Slots:
        """The slots that stay: the newest ``observation`` and the older ones their queries voted for."""
        window = min(self.observation, q.shape[2])
        weights = attention_weights(grouped_scores(q[:, :, -window:], every.keys), mask[:, :, -window:])
        votes = weights.sum(dim=(2, 3))  # (B, Hkv, K): the group's query heads and the window's queries
        batch, kv_heads, count = votes.shape
        older = count - window
        pooled = F.avg_pool1d(votes[..., :older].reshape(batch * kv_heads, 1, older), self.kernel, stride=1,
                              padding=self.kernel // 2).reshape(batch, kv_heads, older)
        chosen = pooled.topk(self.slots - window, dim=-1).indices.sort(dim=-1).values  # position order
        newest = torch.arange(older, count, device=votes.device).expand(batch, kv_heads, window)
        return every.take(torch.cat((chosen, newest), dim=-1))
    # --8<-- [end:select]
