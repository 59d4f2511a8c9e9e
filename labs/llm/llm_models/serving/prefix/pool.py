"""The serving pool with automatic prefix caching: blocks counted by reference, freed blocks cached until needed.

``CachingPool`` is the serving lab's ``LayeredPool`` (the same storage, one block id for every layer) with vLLM's
block manager on top:

- every block has a reference count, the number of running requests whose table holds it; a cached block shared
  by several requests is stored once and counted once by the pool, whatever admission is by;
- a block whose count drops to zero joins the free queue but keeps what it caches: a later prompt that starts with
  the same tokens takes it back (count 0 -> 1) instead of computing it again;
- a block is given up (evicted) only when the pool must hand out a block and the index (``indexes``) chooses it.

``match`` is a pure lookup; ``take`` builds an admitted request's table (its hits first, so making room for the
rest can never evict them) and counts the lookup in ``stats``, as vLLM's prefix cache metrics do: queries and hits
in tokens, evictions in blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from llm_models.paged.pool import PoolExhausted

from ..pool import CacheShape, LayeredPool
from .indexes import INDEXES, PrefixIndex


@dataclass
class PrefixStats:
    requests: int = 0  # admitted requests that were looked up
    query_tokens: int = 0  # their prompt tokens
    hit_tokens: int = 0  # of those, found cached (whole blocks)
    evictions: int = 0  # blocks that stopped being cached because the pool needed a block
    cached_blocks_peak: int = 0  # blocks cached at once, in use or free, at most

    @property
    def hit_rate(self) -> float | None:
        return self.hit_tokens / self.query_tokens if self.query_tokens else None


class CachingPool(LayeredPool):
    def __init__(self, config: CacheShape, layers: int, num_blocks: int, block_size: int, index: str = "hash") -> None:
        super().__init__(config, layers, num_blocks, block_size)
        if index not in INDEXES:
            raise ValueError(f"prefix index must be one of {', '.join(INDEXES)}, got {index!r}")
        self.index: PrefixIndex = INDEXES[index](block_size)
        self.refcount = [0] * num_blocks
        # Every block no request holds, oldest freed at the front (vLLM's free block queue): cached or not.
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.blocks.free = []  # NOTE: this pool hands blocks out itself; the storage pool's stack would disagree
        self.stats = PrefixStats()

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free)

    @property
    def cached_blocks(self) -> int:
        return self.index.cached_blocks

    @property
    def cached_free_blocks(self) -> int:
        """Free blocks that still cache something: a later request may take them back, or the pool evict them."""
        return sum(self.index.holds(block) for block in self.free)

    def match(self, tokens: Sequence[int]) -> list[int]:
        """The cached blocks this prompt would start from. At most (len - 1) // block_size of them: the last token
        is always computed, so a fully cached prompt still yields the logits its first new token comes from."""
        return self.index.match(tokens, (len(tokens) - 1) // self.block_size)

    def shared(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` some running request already holds: taking them adds nothing to the pool's use."""
        return sum(self.refcount[block] > 0 for block in blocks)

    def take(self, tokens: Sequence[int], hits: Sequence[int], count: int) -> list[int]:
        """An admitted request's table: ``hits`` (from ``match``) then ``count`` new blocks; PoolExhausted with
        nothing taken if the new blocks are not there."""
        left = len(self.free) - (len(hits) - self.shared(hits))  # free blocks once the free hits are held
        if count > left:  # checked before anything is held, so a refused take leaves the free queue's order as is
            raise PoolExhausted(f"{count} new blocks needed beside {len(hits)} cached, {left} of {self.num_blocks} "
                                f"are free")
        for block in hits:  # hits first: allocating the rest must not evict them
            self._hold(block)
        table = [*hits, *self.allocate(count)]
        self.index.touch(hits)
        self.stats.requests += 1
        self.stats.query_tokens += len(tokens)
        self.stats.hit_tokens += len(hits) * self.block_size
        return table

    def offer(self, tokens: Sequence[int], table: Sequence[int]) -> int:
        """``table`` now holds the keys and values of ``tokens``: cache its full blocks; how many became cached."""
        added = self.index.insert(tokens, table)
        self.stats.cached_blocks_peak = max(self.stats.cached_blocks_peak, self.index.cached_blocks)
        return added

    def allocate(self, count: int) -> list[int]:
        """``count`` blocks for new data, evicting cached free blocks the index chooses; PoolExhausted with nothing
        taken if fewer are free."""
        if count > len(self.free):
            raise PoolExhausted(f"{count} blocks needed, {len(self.free)} of {self.num_blocks} are free")
        taken = []
        for _ in range(count):
            block = self.index.victim(self.free)
            del self.free[block]
            self.stats.evictions += self.index.forget(block)  # 0 for a block that cached nothing
            self.refcount[block] = 1
            taken.append(block)
        return taken

    def release(self, table: list[int]) -> None:
        """A request is done with ``table``. Its blocks join the free queue tail first (vLLM): of one prefix, the
        last block is the first a least-recently-freed eviction reaches, its parents after it."""
        for block in table:
            if self.refcount[block] < 1:
                raise ValueError(f"block {block} is not in use (pool of {self.num_blocks})")
        for block in reversed(table):
            self.refcount[block] -= 1
            if self.refcount[block] == 0:
                self.free[block] = None

    def _hold(self, block: int) -> None:
        if self.refcount[block] == 0:
            del self.free[block]  # a cached free block taken back: no longer evictable
        self.refcount[block] += 1
