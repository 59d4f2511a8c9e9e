"""A block pool: fixed-size blocks of key and value storage shared by every request, with reference counts.

The pool stores keys and values as (blocks, Hkv, block_size, D) each. A block is allocated with one reference,
shared (one more reference) when another request starts with the same positions, copied when a holder must write
into a block others still read (copy-on-write), and returns to the free list only when its last reference is
released; the free list is a stack, so the last block released is the first reused. ``PoolExhausted`` is raised
before anything is taken, so a refused request changes nothing.

The storage lab's ``PagedSequence`` (a request's block table over the pool) and the serving lab's pool of every
layer build on it.
"""

from __future__ import annotations

import torch

from llm_models.toy.config import ModelConfig


class PoolExhausted(ValueError):
    """Not enough free blocks; the request that asked is left exactly as it was."""


class BlockPool:
    """Key and value storage for every request: (blocks, Hkv, block_size, D) each."""

    def __init__(self, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32) -> None:
        if min(num_blocks, block_size, kv_heads, head_dim) < 1:
            raise ValueError(f"num_blocks, block_size, kv_heads and head_dim must be >= 1, "
                             f"got {num_blocks}, {block_size}, {kv_heads}, {head_dim}")
        self.block_size = block_size
        self.keys = torch.zeros(num_blocks, kv_heads, block_size, head_dim, dtype=dtype)
        self.values = torch.zeros_like(self.keys)
        self.refcount = [0] * num_blocks
        self.free = list(range(num_blocks - 1, -1, -1))  # a stack: last released, first reused

    @classmethod
    def for_model(cls, config: ModelConfig, num_blocks: int, block_size: int) -> BlockPool:
        return cls(num_blocks, block_size, config.kv_heads, config.head_dim, config.dtype)

    @property
    def num_blocks(self) -> int:
        return len(self.refcount)

    @property
    def blocks_in_use(self) -> int:
        return self.num_blocks - len(self.free)

    @property
    def block_bytes(self) -> int:
        """Keys plus values of one block."""
        return 2 * self.keys[0].numel() * self.keys.element_size()

    def allocate(self) -> int:
        if not self.free:
            raise PoolExhausted(f"all {self.num_blocks} blocks of {self.block_size} positions are in use")
        block = self.free.pop()
        self.refcount[block] = 1
        return block

    def share(self, block: int) -> None:
        self._check_live(block)
        self.refcount[block] += 1

    def release(self, block: int) -> None:
        self._check_live(block)
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self.free.append(block)

    def copy(self, block: int) -> int:
        """A private copy of a block's contents, in a newly allocated block."""
        self._check_live(block)
        target = self.allocate()
        self.keys[target] = self.keys[block]
        self.values[target] = self.values[block]
        return target

    def _check_live(self, block: int) -> None:
        if not 0 <= block < self.num_blocks or self.refcount[block] == 0:
            raise ValueError(f"block {block} is not in use (pool of {self.num_blocks})")
