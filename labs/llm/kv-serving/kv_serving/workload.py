"""A seeded workload: widely varying prompt and output lengths, Poisson arrivals, optional early leavers."""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPTS = Path(__file__).resolve().parent / "prompts.json"  # the trained model's real prompts (the file says whence)


@dataclass(frozen=True)
class WorkItem:
    index: int
    arrival_s: float  # seconds after the run starts (after the first tokens it waits for: after_first_tokens)
    prompt: list[int]  # token ids: the random model's, or the ids a text request's prompt is planned to become
    max_tokens: int
    leave_after_tokens: int | None = None  # the client disconnects after this many tokens (None: it stays)
    path: str = "/v1/completions"
    text_request: dict[str, Any] | None = None  # a text model's body fields (messages, or a string prompt)
    # indices of items whose first token (or end, if they get none) starts this item's clock: arrival_s then counts
    # from the last of them, so "once every stream is decoding" holds on a machine of any speed
    after_first_tokens: tuple[int, ...] = ()


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


def real_prompts() -> tuple[list[dict[str, Any]], str]:
    """The trained model's workload prompts, in the file's order, and the file's SHA-256 (for the record)."""
    data = PROMPTS.read_bytes()
    return json.loads(data)["prompts"], hashlib.sha256(data).hexdigest()


def real_workload(requests: int, rate: float, seed: int, max_tokens: int,
                  planned_ids: list[list[int]] | None = None) -> list[WorkItem]:
    """The first ``requests`` real prompts in the file's order, arriving as a seeded Poisson process at ``rate``:
    chat questions to /v1/chat/completions, text continuations to /v1/completions, each up to ``max_tokens``.
    ``planned_ids`` (one list per request) are the ids each prompt should become: a request refused or failed
    before the server reports its usage is then still recorded with its prompt's length, never 0."""
    prompts, _ = real_prompts()
    if not 1 <= requests <= len(prompts) or not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"need 1 to {len(prompts)} requests and a finite rate > 0, got {requests} and {rate}")
    if planned_ids is not None and len(planned_ids) != requests:
        raise ValueError(f"planned_ids holds {len(planned_ids)} prompts' ids for {requests} requests")
    rng = random.Random(seed)
    items, clock = [], 0.0
    for index, prompt in enumerate(prompts[:requests]):
        clock += rng.expovariate(rate)
        chat = prompt["kind"] == "chat"
        body = {"messages": prompt["messages"]} if chat else {"prompt": prompt["prompt"]}
        ids = list(planned_ids[index]) if planned_ids is not None else []
        items.append(WorkItem(index, clock, ids, max_tokens, path="/v1/chat/completions" if chat else "/v1/completions",
                              text_request=body))
    return items
