"""Causal attention for a cached prefix followed by a chunk of new positions.

Visibility comes from absolute positions: the query at absolute position
``offset + i`` may attend to keys ``0 .. offset + i``. With a cache, the
score matrix is rectangular (new queries x all keys), and a top-left
triangular mask on it would hide most of the prefix; that is the bug this
module exists to avoid.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


# --8<-- [start:causal_mask]
def causal_mask(query_len: int, offset: int, device: torch.device | None = None) -> Tensor:
    """Boolean (query_len, offset + query_len) mask, True where a query may see a key."""
    if query_len < 1 or offset < 0:
        raise ValueError(f"need query_len >= 1 and offset >= 0, got {query_len} and {offset}")
    query_positions = torch.arange(offset, offset + query_len, device=device)
    key_positions = torch.arange(offset + query_len, device=device)
    return key_positions[None, :] <= query_positions[:, None]
# --8<-- [end:causal_mask]


def _check_shapes(q: Tensor, k: Tensor, v: Tensor, offset: int) -> None:
    if k.shape != v.shape:
        raise ValueError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} differ in shape")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads cannot share {k.shape[1]} key/value heads evenly")
    expected_keys = offset + q.shape[-2]
    if k.shape[-2] != expected_keys:
        raise ValueError(
            f"{q.shape[-2]} queries at offset {offset} need {expected_keys} keys, got {k.shape[-2]}"
        )


# --8<-- [start:causal_attention]
def causal_attention(q: Tensor, k: Tensor, v: Tensor, offset: int) -> Tensor:
    """Fused attention: q (B, H, Tq, D), k and v (B, Hkv, offset + Tq, D) -> (B, H, Tq, D)."""
    _check_shapes(q, k, v, offset)
    query_len = q.shape[-2]
    grouped = k.shape[1] != q.shape[1]  # grouped-query: each key/value head serves H / Hkv query heads
    if query_len == 1:
        # A single newest query sees every key: no mask at all is the cheapest correct one.
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=grouped)
    if offset == 0:
        # Square scores: PyTorch's own top-left causal mask is correct here.
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=grouped)
    mask = causal_mask(query_len, offset, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=grouped)
# --8<-- [end:causal_attention]


def reference_attention(q: Tensor, k: Tensor, v: Tensor, offset: int) -> Tensor:
    """The same computation written out: scaled scores, masked softmax, weighted sum."""
    _check_shapes(q, k, v, offset)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, Tk, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    visible = causal_mask(q.shape[-2], offset, q.device)
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
