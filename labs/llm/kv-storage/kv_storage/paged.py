"""Paged KV storage: fixed-size blocks from a shared pool (llm_models.paged.pool), a block table per request,
shared prefixes.

A request's logical position p lives in block ``table[p // block_size]`` at
slot ``p % block_size``. Blocks are reference-counted: a forked request
shares its parent's blocks, and the first append into a shared, partly
filled last block copies that one block (copy-on-write). A block returns to
the free list only when its last reference is released.
"""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.paged.pool import BlockPool, PoolExhausted


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
