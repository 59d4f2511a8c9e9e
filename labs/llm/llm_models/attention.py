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


def one_query_attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor | None = None) -> Tensor:
    """One query per row: q (B, H, 1, D), k and v (B, Hkv, K, D), ``visible`` (B, K) True where row b may see
    key k (None: every key) -> (B, H, 1, D).

    Two matmuls around a softmax, in float32 as PyTorch's fused CPU kernel computes, with query head h reading
    key/value head h // (H / Hkv) as its enable_gqa does. That kernel is built for blocks of queries; with one
    query per row in bfloat16 or float16 it runs several times slower than this (the tests check the two agree).
    """
    batch, heads, _, dim = q.shape
    kv_heads = k.shape[1]
    grouped = q.reshape(batch, kv_heads, heads // kv_heads, dim).float()  # (B, Hkv, G, D)
    scores = grouped @ k.float().transpose(-1, -2) / math.sqrt(dim)  # (B, Hkv, G, K)
    if visible is not None:
        scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    attended = scores.softmax(dim=-1) @ v.float()  # (B, Hkv, G, D)
    return attended.to(q.dtype).reshape(batch, heads, 1, dim)


# --8<-- [start:causal_attention]
def causal_attention(q: Tensor, k: Tensor, v: Tensor, offset: int) -> Tensor:
    """Fused attention: q (B, H, Tq, D), k and v (B, Hkv, offset + Tq, D) -> (B, H, Tq, D)."""
    _check_shapes(q, k, v, offset)
    query_len = q.shape[-2]
    grouped = k.shape[1] != q.shape[1]  # grouped-query: each key/value head serves H / Hkv query heads
    if query_len == 1:
        # A single newest query sees every key: no mask at all is the cheapest correct one. In 16-bit floats
        # on a CPU the fused kernel is slow for one query (one_query_attention says why).
        if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
            return one_query_attention(q, k, v)
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
