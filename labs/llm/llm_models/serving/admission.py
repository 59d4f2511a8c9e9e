"""Two admission policies behind one option: a limit on running requests, or a budget of KV bytes.

Both reserve a request's blocks when it is admitted: every position it can
ever hold, ``len(prompt) + max_tokens - 1`` (the last generated token is
returned, never fed back, so it has no keys or values). The count policy
decides by how many requests run; the byte policy by whether the reserved
blocks still fit the budget. Under the count policy, memory is still
finite: a request admitted by count whose blocks the pool cannot supply
fails for memory. That failure is what over-commitment looks like here.

The byte policy can price its blocks in a cache format (llm_models.cache_formats.CacheFormat): then a block costs
that format's real bytes (codes and their scales, llm_models.cache_formats.block_bytes) instead of the pool's
float entries, and the same budget admits more blocks. The pool this server allocates from still stores
float entries; a format only changes what the budget counts, as a server storing that format would.
Without a format the policy counts the pool's own blocks, as it always has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llm_models.cache_formats import CacheFormat, block_bytes

if TYPE_CHECKING:  # a type only: torch-free, so the block sizes (sizes.reservation_blocks) reserve with kv_positions
    from .pool import LayeredPool


def kv_positions(prompt_tokens: int, max_tokens: int) -> int:
    """Positions whose keys and values a request ever stores: what admission reserves (the one home of this sum)."""
    return prompt_tokens + max_tokens - 1


@dataclass(frozen=True)
class MaxRunning:
    """At most ``max_running`` requests decode at once, whatever their lengths."""

    max_running: int

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise ValueError(f"max_running must be at least 1, got {self.max_running}")

    name = "max_running"

    def budget_blocks(self, pool: LayeredPool) -> int:
        return pool.num_blocks  # no budget of its own: the pool is the only limit

    def admits(self, running: int, reserved_blocks: int, needed_blocks: int, pool: LayeredPool) -> bool:
        return running < self.max_running

    def describe(self) -> dict[str, int | str]:
        return {"policy": self.name, "max_running": self.max_running}


@dataclass(frozen=True)
class KVBudget:
    """Admit while the blocks reserved by running requests, plus this one's, fit ``kv_budget_bytes``."""

    kv_budget_bytes: int
    cache_format: CacheFormat | None = None  # None: the pool's float blocks (the serving lab's measurements)

    def __post_init__(self) -> None:
        if self.kv_budget_bytes < 1:
            raise ValueError(f"kv_budget_bytes must be at least 1, got {self.kv_budget_bytes}")

    name = "kv_budget_bytes"

    def block_bytes(self, pool: LayeredPool) -> int:
        """What one block costs the budget: the pool's bytes, or the cache format's for the same positions."""
        config = pool.config
        return self.priced_block_bytes(pool.block_bytes, pool.layers, pool.block_size, config.kv_heads,
                                       config.head_dim)

    def priced_block_bytes(self, pool_block_bytes: int, layers: int, block_size: int, kv_heads: int,
                           head_dim: int) -> int:
        """``block_bytes`` before a pool exists: the pool's block, or the format's for the same positions."""
        if self.cache_format is None:
            return pool_block_bytes
        return block_bytes(self.cache_format, layers, block_size, kv_heads, head_dim)

    def budget_blocks(self, pool: LayeredPool) -> int:
        size = self.block_bytes(pool)
        blocks = self.kv_budget_bytes // size
        if not 1 <= blocks <= pool.num_blocks:
            raise ValueError(f"kv_budget_bytes={self.kv_budget_bytes} is {blocks} blocks of {size} "
                             f"bytes; it must be 1 to the pool's {pool.num_blocks} blocks")
        return blocks

    def admits(self, running: int, reserved_blocks: int, needed_blocks: int, pool: LayeredPool) -> bool:
        return reserved_blocks + needed_blocks <= self.budget_blocks(pool)

    def describe(self) -> dict[str, int | str]:
        described: dict[str, int | str] = {"policy": self.name, "kv_budget_bytes": self.kv_budget_bytes}
        if self.cache_format is not None:
            described["cache_format"] = self.cache_format.label
        return described


AdmissionPolicy = MaxRunning | KVBudget
