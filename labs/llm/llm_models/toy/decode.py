"""The two calls a decoding loop makes on the toy block: process a chunk of tokens, or one new token.

Both extend the cache they are given (a (keys, values) pair, or a ``KVStore`` that writes in place) and return it.
"""

from __future__ import annotations

from torch import Tensor

from llm_models.toy.model import Cache, DecoderBlock, KVStore


def prefill(
    model: DecoderBlock, ids: Tensor, cache: Cache | KVStore | None = None
) -> tuple[Tensor, Cache | KVStore]:
    """Process a chunk of one or more tokens (B, T), extending the cache; logits (B, T, vocab)."""
    return model(ids, cache)


def decode_step(
    model: DecoderBlock, token: Tensor, cache: Cache | KVStore | None
) -> tuple[Tensor, Cache | KVStore]:
    """Process one new token (B, 1) and return its logits (B, vocab) and the grown cache."""
    logits, cache = model(token, cache)
    return logits[:, -1], cache
