"""Teacher-forced decoding loops over the toy block (llm_models.toy): the same predetermined ids through both paths.

Each loop returns the last-position logits after every step, (B, T, vocab),
so the two paths can be compared position by position. The benchmark times
exactly these functions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.toy.decode import decode_step
from llm_models.toy.model import Cache, DecoderBlock, KVStore


def full_prefix_step_logits(model: DecoderBlock, ids: Tensor) -> Tensor:
    """Step t recomputes the whole prefix ids[:, :t+1] from scratch."""
    steps = [model(ids[:, : t + 1])[0][:, -1] for t in range(ids.shape[1])]
    return torch.stack(steps, dim=1)


def cached_step_logits(model: DecoderBlock, ids: Tensor) -> Tensor:
    """Step t feeds only token t and reuses the keys and values of tokens 0..t-1."""
    cache: Cache | KVStore | None = None
    steps = []
    for t in range(ids.shape[1]):
        logits, cache = decode_step(model, ids[:, t : t + 1], cache)
        steps.append(logits)
    return torch.stack(steps, dim=1)

