"""The block pool's sizes: blocks that hold a number of positions, one block's bytes, a request's reservation (in
blocks, of the positions ``admission.kv_positions`` counts) and a byte budget in blocks.

Torch-free, and the one home of each: the pool, the model, the scheduler, the trained model's load and the
benchmark size blocks with these, and so do the serving lab's figures, views and tests. A block's bytes are the formula every lab shares
(llm_models.kv_bytes).
"""

from __future__ import annotations

from llm_models.kv_bytes import kv_cache_bytes

from .admission import kv_positions


def blocks_for(positions: int, block_size: int) -> int:
    """Blocks that hold ``positions`` cached positions: ceil(positions / block_size)."""
    if positions < 0 or block_size < 1:
        raise ValueError(f"need positions >= 0 and block_size >= 1, got {positions} and {block_size}")
    return -(-positions // block_size)


def block_bytes(layers: int, block_size: int, kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    """Keys and values of one block in every layer, from the formula every lab shares (batch 1)."""
    return layers * kv_cache_bytes(1, kv_heads, block_size, head_dim, bytes_per_element)


def reservation_blocks(prompt: int, max_tokens: int, block_size: int) -> int:
    """Blocks a request reserves when admitted: its prompt and every token but the last, which is never fed back."""
    return blocks_for(kv_positions(prompt, max_tokens), block_size)


def budget_blocks(num_blocks: int, share: float) -> int:
    """The byte-admission server's budget in blocks: ``share`` of its pool, rounded down."""
    return int(num_blocks * share)
