"""Every policy on the trained model over one long text, position by position, against the full cache.

The passes run in lockstep, one block of positions at a time: the full cache's logits for the block first
(the reference), then each policy's for the same positions, each through its own cache in chunks of its own
size, so that no pass ever holds a whole text's logits. A policy that stops early (the position-rule
comparisons) drops out after its last block. After every block each cache's kept bytes are counted from its
tensors; after the text, each policy's decode step is timed, teacher-forced with the text's next tokens.

Window with recomputation, the correct and expensive baseline, gets each sampled position's logits from a
fresh pass over the window of tokens ending there, numbered from 0: the window's first token is then the
first the model sees, as at the start of a text.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from llm_models.llama.model import LlamaDecoder

from .config import Policy
from .decoder import WindowCache, forward, new_cache
from .quality import log_probs, position_metrics


@dataclass
class Run:
    """One policy's pass over the text and what it measured."""

    policy: Policy
    chunk: int  # tokens per forward call
    limit: int  # positions evaluated: the text's, or fewer for a comparison that stops early
    cache: WindowCache | None = None
    metrics: dict[str, list[Any]] = field(default_factory=lambda: {"nll": [], "kl": [], "agree": []})
    kept_bytes: list[list[int]] = field(default_factory=list)  # [tokens seen, bytes kept] after each block
    step_ns: list[int] = field(default_factory=list)

    def as_record(self, reference: bool) -> dict[str, Any]:
        entry: dict[str, Any] = {"policy": self.policy.as_record(), "chunk": self.chunk, "positions": self.limit,
                                 "nll": [round(v, 5) for v in self.metrics["nll"]]}
        if not reference:  # the full cache's own KL is 0 and it agrees with itself everywhere
            entry["kl"] = [float(f"{v:.5g}") for v in self.metrics["kl"]]
            entry["agree"] = self.metrics["agree"]
        return entry | {"kept_bytes": self.kept_bytes, "step_ns": self.step_ns}


def chunked(model: LlamaDecoder, ids: Tensor, cache: WindowCache, chunk: int) -> Tensor:
    """Logits (1, T, V) of ``ids`` (1, T) through ``cache``, ``chunk`` tokens per call."""
    return torch.cat([forward(model, ids[:, start:start + chunk], cache)
                      for start in range(0, ids.shape[1], chunk)], dim=1)


def evaluate(model: LlamaDecoder, ids: Tensor, reference: Run, runs: Sequence[Run], block: int,
             keep_at: Sequence[int] = ()) -> dict[int, Tensor]:
    """Fill every run's per-position metrics over the first ``reference.limit`` positions of ``ids`` (1, N),
    N > limit (position t predicts token t + 1); return the reference's log-probabilities at ``keep_at``."""
    positions = reference.limit
    if ids.shape[1] <= positions:
        raise ValueError(f"{positions} evaluated positions need {positions + 1} tokens, the text gives {ids.shape[1]}")
    for run in (reference, *runs):
        if block % run.chunk or run.limit % block or run.limit > positions:
            raise ValueError(f"{run.policy.label}: chunks of {run.chunk} must divide blocks of {block}, which must "
                             f"divide its {run.limit} positions (at most {positions})")
        run.cache = new_cache(model, run.policy)
    kept: dict[int, Tensor] = {}
    with torch.inference_mode():
        for start in range(0, positions, block):
            window, targets = ids[:, start:start + block], ids[0, start + 1:start + block + 1]
            truth = log_probs(chunked(model, window, reference.cache, reference.chunk))  # (block, V)
            extend(reference, truth, truth, targets)
            kept |= {t: truth[t - start] for t in keep_at if start <= t < start + block}
            for run in runs:
                if start < run.limit:
                    extend(run, log_probs(chunked(model, window, run.cache, run.chunk)), truth, targets)
    return kept


def extend(run: Run, log_p: Tensor, truth: Tensor, targets: Tensor) -> None:
    for name, values in position_metrics(log_p, truth, targets).items():
        run.metrics[name] += values
    run.kept_bytes.append([run.cache.length, run.cache.stored_bytes()])


def step_timing(model: LlamaDecoder, ids: Tensor, run: Run, repeats: int) -> None:
    """Decode steps after the run's pass, one text token each, each timed; the first warms up and is dropped."""
    cache = run.cache
    with torch.inference_mode():
        for index in range(repeats + 1):
            token = ids[:, cache.length:cache.length + 1]
            begin = time.perf_counter_ns()
            forward(model, token, cache)
            elapsed = time.perf_counter_ns() - begin
            if index:
                run.step_ns.append(elapsed)


def recompute(model: LlamaDecoder, ids: Tensor, positions: Sequence[int], window: int, truth: dict[int, Tensor],
              batch: int) -> dict[str, list[Any]]:
    """Window with recomputation at ``positions`` (each at least window - 1): a fresh pass over the ``window``
    tokens ending at each, ``batch`` windows per call, scored like the other policies against ``truth``."""
    if min(positions) < window - 1:
        raise ValueError(f"recomputation needs positions of at least {window - 1}, got {min(positions)}")
    metrics: dict[str, list[Any]] = {"nll": [], "kl": [], "agree": []}
    with torch.inference_mode():
        for first in range(0, len(positions), batch):
            group = positions[first:first + batch]
            windows = torch.stack([ids[0, t - window + 1:t + 1] for t in group])  # (b, window)
            log_p = log_probs(model(windows, last_only=True))  # (b, V): each window's last position
            reference = torch.stack([truth[t] for t in group])
            targets = torch.stack([ids[0, t + 1] for t in group])
            for name, values in position_metrics(log_p, reference, targets).items():
                metrics[name] += values
    return metrics


def recompute_step_ns(model: LlamaDecoder, ids: Tensor, window: int, repeats: int) -> list[int]:
    """One decode step of window with recomputation: a fresh pass over the newest ``window`` tokens."""
    durations = []
    with torch.inference_mode():
        for index in range(repeats + 1):
            end = ids.shape[1] - repeats - 1 + index
            begin = time.perf_counter_ns()
            model(ids[:, end - window:end], last_only=True)
            elapsed = time.perf_counter_ns() - begin
            if index:
                durations.append(elapsed)
    return durations
