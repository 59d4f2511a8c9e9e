"""Seeded tiny inputs and the two equivalence assertions shared by the lab's tests."""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.kv_bytes import cache_storage_bytes, kv_cache_bytes
from llm_models.toy.config import ModelConfig
from llm_models.toy.equivalence import ATOL, RTOL
from llm_models.toy.model import DecoderBlock

# Default 4 heads x 8 features, fewer positions and tokens so every test runs in milliseconds.
TINY = ModelConfig(vocab_size=50, max_positions=32, seed=1)


def random_ids(batch: int, length: int, seed: int, config: ModelConfig = TINY) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (batch, length), generator=generator)


def assert_steps_match(model: DecoderBlock, ids: Tensor) -> None:
    """Feed ids one position at a time; each step's logits must equal the full-prefix logits.

    After every step the cache must also hold exactly t + 1 positions, and its
    element storage must equal the byte formula.
    """
    cfg = model.config
    batch = ids.shape[0]
    cache = None
    with torch.inference_mode():
        for t in range(ids.shape[1]):
            full = model(ids[:, : t + 1])[0][:, -1]
            step, cache = model(ids[:, t : t + 1], cache)
            torch.testing.assert_close(
                step[:, -1], full, atol=ATOL, rtol=RTOL, msg=lambda m, t=t: f"step {t}: {m}"
            )
            expected_shape = (batch, cfg.kv_heads, t + 1, cfg.head_dim)
            assert cache[0].shape == cache[1].shape == expected_shape, (t, cache[0].shape)
            expected_bytes = kv_cache_bytes(batch, cfg.kv_heads, t + 1, cfg.head_dim, cfg.bytes_per_element)
            assert cache_storage_bytes(cache) == expected_bytes, (t, cache_storage_bytes(cache))


def assert_chunk_matches(model: DecoderBlock, ids: Tensor, prefix: int) -> None:
    """Cache ids[:, :prefix], append the rest in one call; every position must match one full pass."""
    with torch.inference_mode():
        full = model(ids)[0]
        prefix_logits, cache = model(ids[:, :prefix])
        chunk_logits, _ = model(ids[:, prefix:], cache)
    torch.testing.assert_close(prefix_logits, full[:, :prefix], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(chunk_logits, full[:, prefix:], atol=ATOL, rtol=RTOL)
