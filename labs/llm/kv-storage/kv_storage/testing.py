"""Seeded tiny models, the storage variants under test, and their equivalence assertions."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor

from kv_storage.paged import PagedSequence
from kv_storage.preallocated import PreallocatedKVCache
from llm_models.paged.pool import BlockPool
from llm_models.toy.config import ModelConfig
from llm_models.toy.equivalence import ATOL, RTOL
from llm_models.toy.model import DecoderBlock, KVStore

TINY = ModelConfig(vocab_size=50, max_positions=48, seed=1)  # 4 query heads of width 8
# --8<-- [start:constants]
# Every number of key/value heads that divides TINY's query heads: full multi-head down to one shared head.
KV_HEADS = tuple(k for k in range(TINY.heads, 0, -1) if TINY.heads % k == 0)
# Prefills of one 40-token sequence. The first feeds a prefix, then a multi-token chunk that must attend to
# it (the rectangular case a misaligned mask gets wrong), then single tokens; the second crosses block edges.
CHUNKINGS = ([7, 5] + [1] * 28, [3, 14, 16, 7])
FLOAT64_AGREEMENT = 1e-12  # in float64 every layout must agree with concatenation this closely
# --8<-- [end:constants]

StoreFactory = Callable[[ModelConfig], "KVStore | None"]  # None: the first lab's concatenation


def preallocated(config: ModelConfig) -> PreallocatedKVCache:
    return PreallocatedKVCache.for_model(config, batch=1, capacity=config.max_positions)


def paged(block_size: int) -> StoreFactory:
    def make(config: ModelConfig) -> PagedSequence:
        blocks = -(-config.max_positions // block_size)
        return PagedSequence(BlockPool.for_model(config, num_blocks=blocks, block_size=block_size))
    return make


STORES: dict[str, StoreFactory] = {
    "concat": lambda config: None,
    "prealloc": preallocated,
    "paged-1": paged(1),
    "paged-3": paged(3),
    "paged-16": paged(16),
}


def random_ids(length: int, seed: int, config: ModelConfig = TINY) -> Tensor:
    return torch.randint(0, config.vocab_size, (1, length), generator=torch.Generator().manual_seed(seed))


def with_kv_heads(kv_heads: int) -> ModelConfig:
    return dataclasses.replace(TINY, kv_heads=kv_heads)


def chunked_logits(model: DecoderBlock, ids: Tensor, chunks: list[int], store: KVStore | None) -> Tensor:
    """Feed ids in the given chunk sizes through one store; logits of every position, (1, T, vocab)."""
    cache: object = store
    pieces, start = [], 0
    with torch.inference_mode():
        for size in chunks:
            logits, cache = model(ids[:, start : start + size], cache)
            pieces.append(logits)
            start += size
    return torch.cat(pieces, dim=1)


def assert_matches_full_pass(model: DecoderBlock, ids: Tensor, chunks: list[int], store: KVStore | None) -> None:
    with torch.inference_mode():
        full = model(ids)[0]
    torch.testing.assert_close(chunked_logits(model, ids, chunks, store), full, atol=ATOL, rtol=RTOL)
