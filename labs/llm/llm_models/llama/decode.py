"""Prefill, one decode step, and the two teacher-forced loops the parity tests compare.

Each loop returns the logits after every step, (B, T, vocab), so the cached
path can be compared with the naive full-sequence path position by position.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .cache import LayerCache
from .model import LlamaDecoder


def prefill(model: LlamaDecoder, ids: Tensor, cache: list[LayerCache]) -> Tensor:
    """Process a chunk (B, T) of one or more tokens, extending ``cache``; its logits (B, T, vocab)."""
    return model(ids, cache)


def decode_step(model: LlamaDecoder, token: Tensor, cache: list[LayerCache]) -> Tensor:
    """Process one new token (B, 1) against the cache; its logits (B, vocab)."""
    return model(token, cache)[:, -1]


def full_prefix_step_logits(model: LlamaDecoder, ids: Tensor) -> Tensor:
    """The naive computation: step t runs the whole prefix ids[:, :t+1] again, no cache."""
    return torch.stack([model(ids[:, : t + 1], last_only=True)[:, -1] for t in range(ids.shape[1])], dim=1)


def cached_step_logits(model: LlamaDecoder, ids: Tensor) -> Tensor:
    """Step t feeds only token t and reuses the stored keys and values of tokens 0..t-1."""
    cache = model.new_cache(ids.shape[0], ids.shape[1])
    return torch.stack([decode_step(model, ids[:, t : t + 1], cache) for t in range(ids.shape[1])], dim=1)
