"""Loops over the decoder: teacher-forced step logits (for equivalence) and greedy generation (for latency)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .cache import ConcatCache, PreallocatedCache
from .model import Decoder


def full_step_logits(model: Decoder, ids: Tensor) -> Tensor:
    """One pass over the whole sequence (B, T): the logits of every position, (B, T, vocab)."""
    return model(ids)[0]


def cached_step_logits(model: Decoder, ids: Tensor, preallocated: bool = False) -> Tensor:
    """Feed ids (B, T) one token per call through a cache; the logits after every step, (B, T, vocab)."""
    cache: ConcatCache | PreallocatedCache | None = (
        PreallocatedCache(model.config, ids.shape[0], ids.shape[1], model.device) if preallocated else None)
    steps = []
    for t in range(ids.shape[1]):
        logits, cache = model(ids[:, t : t + 1], cache)
        steps.append(logits[:, -1])
    return torch.stack(steps, dim=1)


def greedy_generate(model: Decoder, prompt: Tensor, new_tokens: int,
                    on_token: Callable[[Tensor], None] | None = None) -> Tensor:
    """Prefill ``prompt`` (B, T), then pick the argmax ``new_tokens`` times; returns the new ids (B, new).

    ``on_token`` sees each new (B, 1) token as soon as it exists (the client-side timestamps). The
    chosen token goes straight back in as a tensor: nothing is read back to the host per step.
    """
    batch, length = prompt.shape
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be at least 1, got {new_tokens}")
    cache = PreallocatedCache(model.config, batch, length + new_tokens, model.device)
    logits, cache = model(prompt, cache, last_only=True)
    token = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
    chosen = [token]
    if on_token is not None:
        on_token(token)
    for _ in range(new_tokens - 1):
        logits, cache = model(token, cache, check_values=False)  # argmax over the vocabulary is in range
        token = logits[:, -1].argmax(-1, keepdim=True)
        chosen.append(token)
        if on_token is not None:
            on_token(token)
    return torch.cat(chosen, dim=1)
