"""How far a key drifts when a cache keeps it rotated and turns it back one position at every shift.

A key rotated at position p and then re-rotated k times by -1 should equal the key rotated at p - k. In exact
arithmetic it does; in a float format every re-rotation rounds the key to that format, and the errors add up
over the k turns instead of cancelling. Rounding the cos and sin of the turn to bfloat16 adds more: the rounded
pair is no longer on the unit circle, so every turn also scales the key a little, always the same way. The
probe measures ||stored - exact|| / ||exact|| over a set of keys
(Frobenius norms), against the exact rotation computed in float64, after each of several shift counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.model import inverse_frequencies, rotate

from .rotary import Rotary


def exact_rotation(keys: Tensor, position: int, inverse: Tensor) -> Tensor:
    """keys (..., D) rotated at ``position`` in float64, angles included."""
    angles = position * inverse.double()
    angles = torch.cat((angles, angles))  # (D,): pair j with j + D/2, as the Llama does
    return rotate(keys.double(), angles.cos(), angles.sin())


def rerotation_drift(keys: Tensor, inverse: Tensor, start: int, shifts: Sequence[int], storage: torch.dtype,
                     arithmetic: torch.dtype) -> list[float]:
    """Relative error of unrotated ``keys`` (N, D) rotated at ``start`` and stored in ``storage``, after each
    count of ``shifts`` (ascending) re-rotations by -1 computed in ``arithmetic`` (cos, sin and the products),
    against the exact rotation at start - count."""
    if list(shifts) != sorted(set(shifts)) or min(shifts) < 1:
        raise ValueError(f"shift counts must be ascending and positive, got {list(shifts)}")
    rotary = Rotary(inverse)
    stored = rotary.turn(keys.to(arithmetic)[None, None], torch.full((1, keys.shape[0]), start))[0, 0].to(storage)
    errors, done = [], 0
    for count in shifts:
        for _ in range(count - done):
            stored = rotary.shift(stored.to(arithmetic), -1).to(storage)
        done = count
        exact = exact_rotation(keys, start - count, inverse)
        errors.append(float((stored.double() - exact).norm() / exact.norm()))
    return errors


def random_keys(count: int, head_dim: int, seed: int) -> Tensor:
    """``count`` keys of ``head_dim`` standard normal entries, float32."""
    return torch.randn(count, head_dim, generator=torch.Generator().manual_seed(seed))



def probe_frequencies(head_dim: int, theta: float) -> Tensor:
    """(D/2,) float32: the RoPE frequencies a Llama of this head width and base turns by."""
    return inverse_frequencies(LlamaDecoderConfig(head_dim=head_dim, rope_theta=theta))
