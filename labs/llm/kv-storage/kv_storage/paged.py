"""Paged KV storage: fixed-size blocks from a shared pool, a block table per request, shared prefixes.

A request's logical position p lives in block ``table[p // block_size]`` at
slot ``p % block_size``. Blocks are reference-counted: a forked request
shares its parent's blocks, and the first append into a shared, partly
filled last block copies that one block (copy-on-write). A block returns to
the free list only when its last reference is released.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kv_cache.config import ModelConfig


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


class PagedSequence:
    """One request (batch 1) stored in a pool through its block table; a ``KVStore`` for DecoderBlock."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.table: list[int] = []  # logical block i -> pool block
        self._length = 0
        self.released = False

    @property
    def length(self) -> int:
        return self._length

    def blocks_needed(self, new_positions: int) -> int:
        """Fresh blocks an append would take, including a copy-on-write of a shared last block."""
        size = self.pool.block_size
        total = -(-(self._length + new_positions) // size)  # ceil
        copy = 1 if self._length % size and self.pool.refcount[self.table[-1]] > 1 else 0
        return total - len(self.table) + copy

    # --8<-- [start:update]
    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Write (1, Hkv, T, D) entries into blocks; return all keys and values gathered through the table."""
        self._check_open()
        pool = self.pool
        if keys.dim() != 4 or keys.shape != values.shape or keys.shape[0] != 1 \
                or keys.shape[1] != pool.keys.shape[1] or keys.shape[3] != pool.keys.shape[3]:
            raise ValueError(f"new keys {tuple(keys.shape)} / values {tuple(values.shape)} do not fit a paged "
                             f"request: (1, {pool.keys.shape[1]}, T, {pool.keys.shape[3]})")
        if keys.dtype != pool.keys.dtype or values.dtype != pool.keys.dtype:
            raise ValueError(f"{keys.dtype} entries, the pool stores {pool.keys.dtype}")
        count = keys.shape[2]
        if count == 0:
            return self.stored()  # nothing to write: in particular, no copy-on-write
        needed = self.blocks_needed(count)
        if needed > len(pool.free):  # check first, so a refused append changes nothing
            raise PoolExhausted(f"appending {count} positions needs {needed} free blocks, "
                                f"the pool has {len(pool.free)} of {pool.num_blocks}")
        self._copy_shared_tail()
        while len(self.table) * pool.block_size < self._length + count:
            self.table.append(pool.allocate())
        positions = torch.arange(self._length, self._length + count)
        blocks = torch.tensor(self.table)[positions // pool.block_size]
        slots = positions % pool.block_size
        pool.keys[blocks, :, slots] = keys[0].transpose(0, 1)  # (T, Hkv, D) scattered into blocks
        pool.values[blocks, :, slots] = values[0].transpose(0, 1)
        self._length += count
        return self.stored()
    # --8<-- [end:update]

    def stored(self) -> tuple[Tensor, Tensor]:
        """Keys and values (1, Hkv, length, D), read through the block table; a transient, not kept."""
        self._check_open()
        index = torch.tensor(self.table, dtype=torch.long)
        hkv, _, dim = self.pool.keys.shape[1:]

        def read(storage: Tensor) -> Tensor:
            blocks = storage.transpose(0, 1)[:, index]  # (Hkv, n, S, D): the one copy a read makes
            return blocks.reshape(hkv, -1, dim)[:, : self._length].unsqueeze(0)  # views from here on

        return read(self.pool.keys), read(self.pool.values)

    # --8<-- [start:fork]
    def fork(self) -> PagedSequence:
        """A new request that starts with this one's positions, sharing (not copying) its blocks."""
        self._check_open()
        child = PagedSequence(self.pool)
        for block in self.table:
            self.pool.share(block)
        child.table, child._length = list(self.table), self._length
        return child
    # --8<-- [end:fork]

    def release(self) -> None:
        """Finished or cancelled: return every block reference; shared blocks stay for their other owners."""
        if self.released:
            return
        for block in self.table:
            self.pool.release(block)
        self.table, self._length, self.released = [], 0, True

    @property
    def wasted_slots(self) -> int:
        """Allocated but unused positions in the last block (internal fragmentation)."""
        return len(self.table) * self.pool.block_size - self._length

    def _copy_shared_tail(self) -> None:
        if self._length % self.pool.block_size and self.pool.refcount[self.table[-1]] > 1:
            shared = self.table[-1]
            self.table[-1] = self.pool.copy(shared)
            self.pool.release(shared)

    def _check_open(self) -> None:
        if self.released:
            raise ValueError("this request was released; its blocks may belong to others now")
