"""Rotary positions for the caches: turn queries and keys by the positions their slots say they hold.

The Llama's RoPE (``llm_models.llama.model``: angles in float32, cos and sin cast to the tensor's dtype, the
pairs turned) applied to positions of any shape: (B, T) for new tokens, shared by every head, or (B, Hkv, S)
for slots whose positions differ per head. The toy block has learned absolute positions instead, so its
``Rotary`` turns nothing.
"""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.llama.model import rotary_angles, rotate


class Rotary:
    def __init__(self, inverse: Tensor | None) -> None:
        """``inverse``: the (D/2,) float32 inverse frequencies; None for a model without rotary positions."""
        self.inverse = inverse

    def turn(self, x: Tensor, positions: Tensor) -> Tensor:
        """x (B, H, T, D) turned by ``positions`` (B, T) or (B, H, T), in x's dtype."""
        if self.inverse is None:
            return x
        if positions.dim() == 2:
            positions = positions[:, None]  # (B, 1, T): the same positions for every head
        cos, sin = rotary_angles(positions, self.inverse, x.dtype)  # (B, H or 1, T, D)
        return rotate(x, cos, sin)

    def shift(self, x: Tensor, by: int) -> Tensor:
        """x (..., D) turned by ``by`` positions (negative: back), in x's dtype: one re-rotation of stored keys."""
        if self.inverse is None:
            return x
        cos, sin = rotary_angles(torch.tensor([by]), self.inverse, x.dtype)  # (1, D)
        return rotate(x, cos, sin)
