"""Attention over slots, its mask built from their metadata, grouped-query heads never expanded.

``visibility`` turns the rules of ``kv_window.rules`` into a (B, Hkv, Tq, K) mask from each query's position
and sequence id and each slot's; ``slot_attention`` runs PyTorch's fused attention with it, each key/value
head serving its group of query heads (``enable_gqa``); ``grouped_scores`` and ``attend_scores`` write the
same computation out, for the caches that need the scores themselves (the sinks cache's two position rules,
SnapKV's vote). Scores are float32 whatever the cache stores, as the shared attention computes them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .rules import visible
from .slots import Slots


def visibility(slots: Slots, positions: Tensor, sequences: Tensor, window: int | None = None,
               sinks: int = 0, per_head: bool = True) -> Tensor:
    """(B, Hkv, Tq, K) True where the query at ``positions``/``sequences`` (B, Tq) may see each slot; with
    ``per_head=False``, (B, 1, Tq, K) from the first head's metadata, for a cache whose heads hold the same
    positions (every policy but a score-based eviction)."""
    heads = slice(None) if per_head else slice(0, 1)
    query_position, query_sequence = positions[:, None, :, None], sequences[:, None, :, None]  # (B, 1, Tq, 1)
    key_position = slots.positions[:, heads, None, :]  # (B, Hkv or 1, 1, K)
    key_sequence = slots.sequences[:, heads, None, :]
    seen = visible(query_position, key_position, query_sequence, key_sequence, window, sinks)
    return seen & slots.valid[:, heads, None, :]


def check_every_query_sees_a_key(mask: Tensor) -> None:
    """A query with no visible key has no softmax: refuse it by name rather than return NaN."""
    blind = ~mask.any(-1)  # (B, Hkv, Tq)
    if bool(blind.any()):
        b, h, t = (int(i) for i in blind.nonzero()[0])
        raise ValueError(f"query {t} of row {b} sees no key in key/value head {h}: its own slot is missing")


def slot_attention(q: Tensor, slots: Slots, mask: Tensor) -> Tensor:
    """q (B, H, Tq, D) rotated, over ``slots`` (B, Hkv, K, D), ``mask`` (B, Hkv or 1, Tq, K) -> (B, H, Tq, D)."""
    check_every_query_sees_a_key(mask)
    heads, kv_heads = q.shape[1], slots.keys.shape[1]
    if mask.shape[1] > 1:  # a mask per key/value head, repeated for the query heads of its group (bools only)
        mask = mask.repeat_interleave(heads // kv_heads, dim=1)
    keys, values = slots.keys.to(q.dtype), slots.values.to(q.dtype)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=heads != kv_heads)


def grouped_scores(q: Tensor, keys: Tensor) -> Tensor:
    """Scaled scores (B, Hkv, G, Tq, K) in float32 of q (B, H, Tq, D) against keys (B, Hkv, K, D) or, with a
    key table per query, (B, Hkv, Tq, K, D); query head h reads key/value head h // G."""
    batch, heads, length, dim = q.shape
    kv_heads = keys.shape[1]
    grouped = q.float().reshape(batch, kv_heads, heads // kv_heads, length, dim)  # (B, Hkv, G, Tq, D)
    if keys.dim() == 5:
        return torch.einsum("bhgtd,bhtkd->bhgtk", grouped, keys.float()) / math.sqrt(dim)
    return grouped @ keys.float()[:, :, None].transpose(-1, -2) / math.sqrt(dim)


def attention_weights(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax of ``scores`` (B, Hkv, G, Tq, K) over the keys ``mask`` (B, Hkv or 1, Tq, K) leaves visible."""
    check_every_query_sees_a_key(mask)
    return scores.masked_fill(~mask[:, :, None], float("-inf")).softmax(dim=-1)


def attend_scores(scores: Tensor, mask: Tensor, values: Tensor, dtype: torch.dtype) -> Tensor:
    """The attention output (B, H, Tq, D) of ``scores`` over ``values`` (B, Hkv, K, D), in ``dtype``."""
    weights = attention_weights(scores, mask)  # (B, Hkv, G, Tq, K)
    attended = weights @ values.float()[:, :, None]  # (B, Hkv, G, Tq, D)
    batch, kv_heads, group, length, dim = attended.shape
    return attended.reshape(batch, kv_heads * group, length, dim).to(dtype)
