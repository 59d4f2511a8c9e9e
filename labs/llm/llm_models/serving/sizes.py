"""The block pool's sizes: blocks that hold a number of positions, a request's reservation (in blocks, of the
positions ``admission.kv_positions`` counts) and a byte budget in blocks. A block's bytes are
``llm_models.cache_formats.block_bytes``, for the pool's own dtype as for a quantized format.

Torch-free, and the one home of each: the pool, the model, the scheduler, the trained model's load and the
benchmark size blocks with these, and so do the serving lab's figures, views and tests.
"""

from __future__ import annotations

from .admission import kv_positions


def blocks_for(positions: int, block_size: int) -> int:
    """Blocks that hold ``positions`` cached positions: ceil(positions / block_size)."""
    if positions < 0 or block_size < 1:
        raise ValueError(f"need positions >= 0 and block_size >= 1, got {positions} and {block_size}")
    return -(-positions // block_size)


def reservation_blocks(prompt: int, max_tokens: int, block_size: int) -> int:
    """Blocks a request reserves when admitted: its prompt and every token but the last, which is never fed back."""
    return blocks_for(kv_positions(prompt, max_tokens), block_size)


def budget_blocks(num_blocks: int, share: float) -> int:
    """The byte-admission server's budget in blocks: ``share`` of its pool, rounded down."""
    return int(num_blocks * share)
