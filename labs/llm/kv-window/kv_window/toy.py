"""The KV-cache lab's toy decoder block over a policy's cache: the same store interface, learned positions.

``llm_models.toy.model.DecoderBlock`` adds a learned embedding of each token's absolute position and has no
rotary, so its stores turn nothing; its fused projection, output, feed-forward and head are the block's own,
called around the store's attention as the block's ``forward`` calls them around its own.
"""

from __future__ import annotations

from torch import Tensor

from llm_models.inputs import check_token_ids
from llm_models.toy.model import DecoderBlock

from .config import Policy
from .decoder import WindowCache, sequence_inputs
from .policies import make_store
from .rotary import Rotary


def new_toy_cache(block: DecoderBlock, policy: Policy, batch: int = 1) -> WindowCache:
    config = block.config
    return WindowCache([make_store(policy, batch, config.kv_heads, config.head_dim, config.dtype, "cpu",
                                   Rotary(None))])


def toy_forward(block: DecoderBlock, ids: Tensor, cache: WindowCache, positions: Tensor | None = None,
                sequences: Tensor | None = None) -> Tensor:
    """Logits (B, T, vocab) of ``ids`` through the block, its attention over ``cache``'s one store."""
    batch, length = check_token_ids(ids, block.config.vocab_size)
    positions, sequences = sequence_inputs(ids, cache, positions, sequences)
    if int(positions.max()) >= block.config.max_positions:
        raise ValueError(f"position {int(positions.max())} is beyond the block's learned table of "
                         f"{block.config.max_positions} positions")
    x = block.token(ids) + block.position(positions)  # (B, T, C)
    q, k, v = block._split_heads(block.qkv(block.norm_attention(x)))  # (B, H, T, D), (B, Hkv, T, D)
    attended = cache.layers[0].attend(q, k, v, positions, sequences)  # (B, H, T, D)
    x = x + block.out(attended.transpose(1, 2).reshape(batch, length, block.config.width))
    x = x + block.ffn(block.norm_ffn(x))
    cache.length += length
    return block.head(block.norm_final(x))

