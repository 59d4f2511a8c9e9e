"""StreamingLLM's cache: the first ``sinks`` positions kept for good, plus the newest ``slots - sinks``.

A trained model puts a large share of its attention on the first tokens whatever they say (its "attention
sinks"); a window that evicts them changes every later softmax. Keeping a few restores it, provided the
positions stay inside what the model was trained on: StreamingLLM numbers the cache's slots 0 .. n - 1
instead of by their place in the text, so a query is always at most n - 1 positions from any key.

Two ways to give cached keys those in-cache positions, the same in exact arithmetic:

- ``read``: keys are cached before rotary and rotated at every read (StreamingLLM). Rotation depends only on
  the distance between query and key, and a recent key's in-cache distance equals its distance in the text,
  so the query is turned by its own position for the recent keys and by its slot, min(t, n - 1), for the
  sinks, whose distance shrinks to their in-cache one; each key is rotated once, at read.
- ``rerotate``: keys are cached rotated at the slot they enter (transformers' removed ``SinkCache``), and
  every step that shifts the window turns each kept recent key back by one position. A key is turned up to
  ``rules.most_shifts`` times before it leaves; in bfloat16 every turn rounds, and the error accumulates.

A chunk of several tokens gets exactly what decoding it one token at a time would (the tests check it): each
query sees the sinks and its own newest keys, and with ``rerotate`` each key as it was stored at that query's
step, re-rotated as many times as it would have been by then. Rotations run in the cache's dtype; scores in
float32.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import attend_scores, grouped_scores, visibility
from .rotary import Rotary
from .rules import sink_slot
from .slots import Slots
from .stores import Store, check_consecutive


class SinkStore(Store):
    def __init__(self, sinks: int, slots: int, rule: str, batch: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str, rotary: Rotary) -> None:
        if not 0 <= sinks < slots:
            raise ValueError(f"sinks must lie in [0, slots) = [0, {slots}), got {sinks}")
        if rule not in ("read", "rerotate"):
            raise ValueError(f"the sinks rule is 'read' or 'rerotate', got {rule!r}")
        super().__init__(Slots.empty(batch, kv_heads, slots, head_dim, dtype, device), rotary)
        self.sinks, self.slots, self.rule = sinks, slots, rule

    def attend(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, sequences: Tensor) -> Tensor:
        check_consecutive(positions, "a sinks + window cache")
        if not bool((positions == positions[:1]).all()):
            raise ValueError("a sinks + window cache shifts every row at once: its rows need the same positions")
        dtype, last_slot = self.kept.keys.dtype, self.slots - 1
        keys = k.to(dtype)
        if self.rule == "rerotate":  # rotated once, at the slot it enters: min(t, n - 1)
            keys = self.rotary.turn(keys, positions.clamp(max=last_slot))
        every = self.kept.cat(Slots.of(keys, v.to(dtype), positions, sequences))
        mask = visibility(every, positions, sequences, window=self.slots - self.sinks, sinks=self.sinks,
                          per_head=False)
        if self.rule == "read":
            scores, stored = self.read_scores(q, every, positions), every.keys
        else:
            scores, stored = self.rerotated_scores(q, every, positions)
        attended = attend_scores(scores, mask, every.values, q.dtype)
        self.keep(Slots(stored, *every.fields()[1:]), int(positions[0, -1]))
        return attended

    # --8<-- [start:read]
    def read_scores(self, q: Tensor, every: Slots, positions: Tensor) -> Tensor:
        """Scores (B, Hkv, G, T, K) with in-cache positions, each key rotated once, at read."""
        keys = self.rotary.turn(every.keys, every.positions)  # unrotated in the cache; turned by position here
        recent = grouped_scores(self.rotary.turn(q, positions), keys)  # distance t - j, as in the cache's order
        at_slot = self.rotary.turn(q, positions.clamp(max=self.slots - 1))  # the query's slot in the cache
        sink = grouped_scores(at_slot, keys)  # distance min(t, n - 1) - s to sink s, which sits in slot s
        is_sink = (every.positions < self.sinks)[:, :, None, None, :]  # (B, Hkv, 1, 1, K)
        return torch.where(is_sink, sink, recent)
    # --8<-- [end:read]

    # --8<-- [start:rerotate]
    def rerotated_scores(self, q: Tensor, every: Slots, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Scores (B, Hkv, G, T, K) against every key as stored at each query's step, and the keys as stored
        after the last one. A step at position t >= n shifts the window: each recent key already cached is
        turned back by one position, in the cache's dtype."""
        start, steps = int(positions[0, 0]), positions.shape[1]
        current, table = every.keys, []
        for step in range(start, start + steps):
            if step >= self.slots:
                moving = every.valid & (every.positions >= self.sinks) & (every.positions < step)  # (B, Hkv, K)
                current = torch.where(moving[..., None], self.rotary.shift(current, -1), current)
            table.append(current)
        stored = torch.stack(table, dim=2)  # (B, Hkv, T, K, D): what query t0 + c reads
        at_slot = self.rotary.turn(q, positions.clamp(max=self.slots - 1))
        return grouped_scores(at_slot, stored), current
    # --8<-- [end:rerotate]

    def keep(self, every: Slots, last: int) -> None:
        """The sinks and the newest slots - sinks positions, into their slots in place; the rest leave."""
        position = every.positions[0, 0].long()  # (K,): the same in every row and head
        kept = every.valid[0, 0] & ((position < self.sinks) | (last - position < self.slots - self.sinks))
        chosen = kept.nonzero().squeeze(1)
        index = sink_slot(position[chosen], self.sinks, self.slots)  # (m,) distinct slots
        for store, source in zip(self.kept.fields(), every.fields()):
            store.index_copy_(2, index, source.index_select(2, chosen))
