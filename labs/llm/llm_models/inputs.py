"""What a decoder does with its input before any layer: check the token ids, number the new positions.

The KV-cache lab's toy block and the Llama call both (the decode lab's GPT-2-shaped decoder takes the offset
rule through the toy block's ``positions``), so a bad input reads the same and there is one offset rule.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_token_ids(ids: Tensor, vocab_size: int) -> tuple[int, int]:
    """(batch, length) of a 2-D tensor of token ids, each in [0, vocab_size): one ValueError naming what is wrong."""
    if not isinstance(ids, Tensor) or ids.dim() != 2:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"ids must be a 2-D (batch, tokens) tensor, got {shape}")
    if ids.dtype not in (torch.int32, torch.int64):  # what an embedding lookup accepts
        raise ValueError(f"ids must be torch.int64 (or int32) token ids, got dtype {ids.dtype}")
    batch, length = ids.shape
    if batch < 1 or length < 1:
        raise ValueError(f"ids must hold at least one token per row, got shape {(batch, length)}")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got values from {low} to {high}")
    return batch, length


def new_positions(offset: int, length: int, device: torch.device | str | None = None) -> Tensor:
    """Absolute positions of ``length`` new tokens after ``offset`` cached ones: offset .. offset + length - 1.

    The offset rule: new tokens continue after the cached prefix. Numbering them from zero instead is the
    classic cache bug (the KV-cache lab's ``PositionResetBlock`` keeps it so its tests can show they catch it).
    """
    return torch.arange(offset, offset + length, device=device)
