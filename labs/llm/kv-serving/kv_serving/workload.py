"""A seeded workload: widely varying prompt and output lengths, Poisson arrivals, optional early leavers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkItem:
    index: int
    arrival_s: float  # seconds after the run starts
    prompt: list[int]
    max_tokens: int
    leave_after_tokens: int | None = None  # the client disconnects after this many tokens (None: it stays)


@dataclass(frozen=True)
class WorkloadSpec:
    requests: int
    rate: float  # mean arrivals per second (Poisson process)
    seed: int = 0
    vocab_size: int = 512
    prompt_tokens: tuple[int, int] = (8, 256)  # log-uniform: most are short, a few are long
    output_tokens: tuple[int, int] = (8, 192)
    leave_fraction: float = 0.0  # share of clients that disconnect partway through

    def __post_init__(self) -> None:
        if self.requests < 1 or not self.rate > 0 or not math.isfinite(self.rate):
            raise ValueError(f"need requests >= 1 and a finite rate > 0, got {self.requests} and {self.rate}")
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be at least 1 (token ids are drawn below it), got {self.vocab_size}")
        for name in ("prompt_tokens", "output_tokens"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"{name} must be a range 1 <= low <= high, got ({low}, {high})")
        if not 0 <= self.leave_fraction <= 1:
            raise ValueError(f"leave_fraction must lie in [0, 1], got {self.leave_fraction}")

    @property
    def longest_positions(self) -> int:
        return self.prompt_tokens[1] + self.output_tokens[1] - 1


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    return min(high, int(math.exp(rng.uniform(math.log(low), math.log(high + 1)))))


def make_workload(spec: WorkloadSpec) -> list[WorkItem]:
    """The same spec always gives the same requests, arrival times and leaving points."""
    rng = random.Random(spec.seed)
    items, clock = [], 0.0
    for index in range(spec.requests):
        clock += rng.expovariate(spec.rate)  # exponential gaps: a Poisson arrival process
        prompt = [rng.randrange(spec.vocab_size) for _ in range(log_uniform(rng, *spec.prompt_tokens))]
        max_tokens = log_uniform(rng, *spec.output_tokens)
        leaves = rng.random() < spec.leave_fraction and max_tokens > 1
        leave = rng.randrange(1, max_tokens) if leaves else None  # after 1 .. max_tokens - 1 tokens
        items.append(WorkItem(index, clock, prompt, max_tokens, leave))
    return items
