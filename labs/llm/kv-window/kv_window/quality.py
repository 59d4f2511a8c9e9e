"""What a policy does to next-token predictions, position by position, against the full cache's.

For each position: the negative log-likelihood of the text's next token (perplexity is the exponential of
its mean), the KL divergence KL(full || policy) between the two next-token distributions, and whether the
two agree on the most likely token. Everything in float32, one chunk of positions at a time, so no pass ever
holds a whole text's logits.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def log_probs(logits: Tensor) -> Tensor:
    """(T, V) log-softmax in float32 of one row's logits (1, T, V) or (T, V)."""
    return F.log_softmax(logits.reshape(-1, logits.shape[-1]).float(), dim=-1)


def position_metrics(log_p: Tensor, reference: Tensor, targets: Tensor) -> dict[str, list[float] | list[int]]:
    """Per position of ``log_p`` and ``reference`` (T, V): NLL of ``targets`` (T,), KL(reference || log_p)
    in nats (clamped at 0, which only rounding undercuts), and 1 where the argmax agrees, else 0."""
    if log_p.shape != reference.shape or targets.shape != log_p.shape[:1]:
        raise ValueError(f"log-probabilities {tuple(log_p.shape)}, reference {tuple(reference.shape)} and "
                         f"targets {tuple(targets.shape)} must cover the same positions")
    nll = -log_p.gather(1, targets[:, None]).squeeze(1)
    kl = (reference.exp() * (reference - log_p)).sum(-1).clamp(min=0)
    agree = (log_p.argmax(-1) == reference.argmax(-1)).int()
    return {"nll": nll.tolist(), "kl": kl.tolist(), "agree": agree.tolist()}
