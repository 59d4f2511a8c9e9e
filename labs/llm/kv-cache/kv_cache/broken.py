"""Deliberately wrong decoders: the classic KV-cache bugs, kept so tests can show they are caught.

Never use these for anything but demonstrating that the equivalence checks fail.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.attention import causal_attention
from llm_models.llama.model import LlamaDecoder
from llm_models.toy.model import DecoderBlock


class PositionResetBlock(DecoderBlock):
    """Bug: every call numbers its tokens from zero, ignoring the cached prefix."""

    def positions(self, offset: int, length: int, device: torch.device) -> Tensor:
        return torch.arange(length, device=device)


class TopLeftMaskBlock(DecoderBlock):
    """Bug: a lower-triangular mask anchored at the top-left of a rectangular score matrix."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, offset: int) -> Tensor:
        top_left = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=top_left)


class UnmaskedChunkBlock(DecoderBlock):
    """Bug: no mask once a cache exists. Right for one-token steps, wrong for chunks."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, offset: int) -> Tensor:
        if offset > 0:
            return F.scaled_dot_product_attention(q, k, v)
        return causal_attention(q, k, v, offset)


class RotaryResetDecoder(LlamaDecoder):
    """Bug: the Llama rotates every call's tokens from position zero, as if the cached prefix were not there.

    The cached keys were rotated at their true positions, so the new queries meet them at the wrong
    relative distances. With no cache (one full pass) it is exactly right, which is why only a
    cached or chunked check can catch it.
    """

    positions = PositionResetBlock.positions  # the toy block's broken rule, reused
