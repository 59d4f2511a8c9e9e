"""The claim every timing depends on: both paths give the same logits at every step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from llm_models.toy.equivalence import ATOL, RTOL
from llm_models.toy.model import DecoderBlock

from .decode import cached_step_logits, full_prefix_step_logits


@dataclass(frozen=True)
class StepComparison:
    steps: int
    max_abs_diff: float
    max_abs_reference: float  # largest |full-prefix logit|: with ATOL and RTOL, bounds an allowed difference
    within_tolerance: bool  # torch.allclose(cached, full, ATOL, RTOL) over every step
    argmax_agrees_every_step: bool  # the greedy token is the same at every step and row


def compare_paths(model: DecoderBlock, ids: Tensor) -> StepComparison:
    """Run both teacher-forced loops on ``ids`` (B, T) and compare last-position logits."""
    with torch.inference_mode():
        full = full_prefix_step_logits(model, ids)  # (B, T, vocab)
        cached = cached_step_logits(model, ids)
    return StepComparison(
        steps=ids.shape[1],
        max_abs_diff=float((full - cached).abs().max()),
        max_abs_reference=float(full.abs().max()),
        within_tolerance=torch.allclose(cached, full, atol=ATOL, rtol=RTOL),
        argmax_agrees_every_step=bool((full.argmax(-1) == cached.argmax(-1)).all()),
    )
