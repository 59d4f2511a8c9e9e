"""What a change to a model costs in quality, position by position: the scores of a long text's next tokens
against a reference pass over the same text.

At every position t (predicting token t + 1) ``score_chunk`` keeps the negative log-likelihood of the next
token, KL(reference || model) between the two next-token distributions, and whether the most likely token
differs from the reference's. The quantized-cache lab scores its cache formats this way against float32, and the
decode lab its int8 weights; each runs the text ``CHUNK`` tokens per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

CHUNK = 256  # tokens per prefill call when a long text is scored


@dataclass
class Scores:
    """One model's per-position figures over the evaluated text, rounded as the records store them."""

    nll: list[float] = field(default_factory=list)  # -log p(next token), nats, 4 decimals
    kl: list[float] = field(default_factory=list)  # KL(reference || model), nats, 3 significant digits
    top1_misses: list[int] = field(default_factory=list)  # positions whose most likely token is not the reference's

    def as_record(self) -> dict[str, Any]:
        return {"nll": self.nll, "kl": self.kl, "top1_misses": self.top1_misses}


def score_chunk(scores: Scores, log_p: Tensor, log_ref: Tensor, top_ref: Tensor, targets: Tensor, start: int) -> None:
    """Append one chunk's positions (T, vocab log-probabilities) to ``scores``."""
    nll = -log_p.gather(-1, targets[:, None])[:, 0]  # (T,)
    kl = (log_ref.exp() * (log_ref - log_p)).sum(-1).clamp_min(0)  # (T,): >= 0, up to float rounding
    misses = (log_p.argmax(-1) != top_ref).nonzero()[:, 0]
    scores.nll += [round(float(value), 4) for value in nll]
    scores.kl += [float(f"{float(value):.3g}") for value in kl]
    scores.top1_misses += [start + int(index) for index in misses]
