"""One block pool for every layer of the serving model, built on the shared ``BlockPool`` (llm_models.paged.pool).

A block id means the same positions in every layer, so the pool is a
``BlockPool`` whose "heads" are ``layers x kv_heads``: its
allocator (free list, reference counts) is reused as is, one allocation
reserves a block in every layer at once, and its ``block_bytes`` is the
cache formula summed over layers. ``layer_keys(l)`` is a view of layer
``l``'s slice of the shared storage, written in place by the model.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from llm_models.cache_formats import CacheFormat, block_bytes
from llm_models.paged.pool import BlockPool, PoolExhausted


class CacheShape(Protocol):
    """What the pool needs of a model's config: the random model's ``llm_models.toy.config.ModelConfig`` and the
    trained model's ``llm_models.llama.config.LlamaDecoderConfig`` both have it."""

    kv_heads: int
    head_dim: int
    dtype: torch.dtype


def pool_block_bytes(config: CacheShape, layers: int, block_size: int) -> int:
    """Keys and values of one block in every layer of a pool in ``config``'s dtype (cache_formats.block_bytes)."""
    return block_bytes(CacheFormat(str(config.dtype).removeprefix("torch.")), layers, block_size, config.kv_heads,
                       config.head_dim)


class LayeredPool:
    """``num_blocks`` blocks of ``block_size`` positions, each holding keys and values for all layers."""

    def __init__(self, config: CacheShape, layers: int, num_blocks: int, block_size: int) -> None:
        if layers < 1:
            raise ValueError(f"layers must be at least 1, got {layers}")
        self.config, self.layers = config, layers
        # (blocks, layers x Hkv, S, D): the storage lab's pool, with every layer's heads side by side
        self.blocks = BlockPool(num_blocks, block_size, layers * config.kv_heads, config.head_dim, config.dtype)
        if self.blocks.block_bytes != pool_block_bytes(config, layers, block_size):
            raise AssertionError("pool storage and the cache formula disagree on the bytes of a block")

    @property
    def block_size(self) -> int:
        return self.blocks.block_size

    @property
    def num_blocks(self) -> int:
        return self.blocks.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return len(self.blocks.free)

    @property
    def num_used_blocks(self) -> int:
        return self.blocks.blocks_in_use

    @property
    def block_bytes(self) -> int:
        return self.blocks.block_bytes

    def layer_keys(self, layer: int) -> Tensor:
        """Layer ``layer``'s keys, a (blocks, Hkv, S, D) view of the shared storage."""
        return self._layer(self.blocks.keys, layer)

    def layer_values(self, layer: int) -> Tensor:
        return self._layer(self.blocks.values, layer)

    def _layer(self, storage: Tensor, layer: int) -> Tensor:
        n, _, size, dim = storage.shape
        return storage.view(n, self.layers, self.config.kv_heads, size, dim)[:, layer]

    def allocate(self, count: int) -> list[int]:
        """``count`` blocks, or PoolExhausted with nothing taken."""
        if count > self.num_free_blocks:
            raise PoolExhausted(f"{count} blocks needed, {self.num_free_blocks} of {self.num_blocks} are free")
        return [self.blocks.allocate() for _ in range(count)]

    def release(self, table: list[int]) -> None:
        for block in table:
            self.blocks.release(block)
