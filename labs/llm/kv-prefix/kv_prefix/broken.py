"""Deliberately wrong prefix caches, kept so the tests can show they catch each classic mistake.

Never use them for anything but demonstrating that the checks fail.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, TypeVar

import torch

from llm_models.serving.model import PackedPrompts
from llm_models.serving.prefix import NONE_HASH, BlockHash, CachingPool, HashIndex, hash_block

T = TypeVar("T")


class UnchainedHashIndex(HashIndex):
    """Bug: each block is hashed from its own tokens alone, without its parent's hash. Two prompts that differ
    in their first block but share the second give that block the same hash, so a lookup can hand a request
    keys and values computed after another prefix."""

    def hash_next(self, parent: BlockHash, page: Sequence[int]) -> BlockHash:
        return hash_block(NONE_HASH, page)  # the parent ignored: the bug


class EagerFreePool(CachingPool):
    """Bug: ``release`` puts every block of the table on the free queue, even one another running request still
    holds (its reference count stays above zero). The next allocation can then hand that block out and overwrite
    keys and values a running request is reading."""

    def release(self, table: list[int]) -> None:
        for block in table:
            if self.refcount[block] < 1:
                raise ValueError(f"block {block} is not in use (pool of {self.num_blocks})")
        for block in reversed(table):
            self.refcount[block] -= 1
            self.free[block] = None  # whatever the count: the bug


class RestartedPositions(PackedPrompts):
    """Bug: after a hit, the tokens computed turn as if the prompt began with them (positions from 0, not from the
    first uncached position), so their keys meet the cached ones at the wrong distances (rotary models) or carry
    the wrong position embeddings (learned ones)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.positions = torch.cat([torch.arange(len(slot.positions)) for slot in self.slots])


def restarting(model: T) -> T:
    """``model`` (a serving model, its weights shared, not copied) whose prefill restarts positions after a hit."""
    broken = copy.copy(model)
    broken.packing = RestartedPositions  # type: ignore[attr-defined]
    return broken


def unchained(config: Any, layers: int, num_blocks: int, block_size: int, index: str = "hash") -> CachingPool:
    """A caching pool whose index hashes blocks without their parents (``UnchainedHashIndex``)."""
    pool = CachingPool(config, layers, num_blocks, block_size, index)
    pool.index = UnchainedHashIndex(block_size)
    return pool
