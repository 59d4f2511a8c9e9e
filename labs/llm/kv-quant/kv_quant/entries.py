"""Seeded random keys and values of a cache's shape, with the few large key channels real models have.

The benchmark times and sizes every format on these (no model needed) and the tests round-trip them; the
outlier channels are what make KIVI quantize keys per channel, so uniform noise would flatter the formats.
"""

from __future__ import annotations

import torch
from torch import Tensor


def random_entries(batch: int, kv_heads: int, tokens: int, head_dim: int, seed: int,
                   spread: float = 1.0) -> tuple[Tensor, Tensor]:
    """Keys and values (B, Hkv, T, D) from a seeded normal, keys with a few large channels as real keys
    have (the outlier channels that make KIVI quantize keys per channel)."""
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(batch, kv_heads, tokens, head_dim, generator=generator) * spread
    keys[..., :: max(1, head_dim // 4)] *= 8  # one channel in four much larger
    values = torch.randn(batch, kv_heads, tokens, head_dim, generator=generator) * spread
    return keys, values
