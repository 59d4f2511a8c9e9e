"""int8 weight-only quantization, per output channel, as gpt-fast's ``WeightOnlyInt8QuantHandler`` does it.

Each row of an (out, in) matrix gets one float32 scale, its largest magnitude / 127, and its weights become the
nearest int8 codes of weight / scale (symmetric: no zero point, codes in -127..127). A step then reads one byte
per weight instead of four, plus four per row for the scale; the activations stay float32, and the kernel that
streams the codes widens them to float32 inside its loop (the int8 kernels of llm_models.kernels.matvec). The
decode lab's timed mode ``ours-int8`` runs its fast twin on them. ``dequantize`` gives the float matrix the codes stand for:
the reference an int8 step must match, and the weights its quality is measured on.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

LEVELS = 127  # symmetric int8: -127..127 (gpt-fast's handler, like most weight-only schemes, leaves -128 unused)


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """(codes (out, in) int8, scale (out,) float32) of a 2-D float matrix, one scale per row."""
    if weight.dim() != 2 or not weight.dtype.is_floating_point:
        raise ValueError(f"quantize_rows needs a 2-D float matrix, got {tuple(weight.shape)} {weight.dtype}")
    rows = weight.float()
    largest = rows.abs().amax(dim=1)
    scale = torch.where(largest > 0, largest / LEVELS, torch.ones_like(largest))  # an all-zero row keeps scale 1
    codes = torch.round(rows / scale[:, None]).clamp(-LEVELS, LEVELS).to(torch.int8)
    return codes.contiguous(), scale.contiguous()


def dequantize(codes: Tensor, scale: Tensor) -> Tensor:
    """The float32 matrix the codes stand for: codes x their row's scale."""
    return codes.float() * scale[:, None]


def dequantized_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A transformers Llama state dict with every 2-D weight replaced by its int8 round trip (norms untouched):
    the float model the int8 step computes, for its equivalence check and its quality."""
    return {name: dequantize(*quantize_rows(tensor)) if tensor.dim() == 2 else tensor
            for name, tensor in state_dict.items()}
