"""The waiting queue bounded by time, not by count: the prompt tokens waiting for prefill, over the rate this server
prefills them, is the wait a new request would see before its first token.

A queue bounded by requests says nothing about time: 256 short chats wait seconds, 256 long system prompts minutes.
vLLM queues without limit by default and offers an opt-in cap on prompt tokens waiting for prefill, to be set by hand
to about the target time to first token x the prefill throughput. Here the engine sets it itself: its prefill rate is
a running figure (``PrefillRate``), seeded by a short probe when the scheduler starts and updated by every prefill
it runs, and a request whose prompt would take the tokens waiting beyond ``ttft_target_s`` x that rate is refused at
once (``Refusal.PREFILL_QUEUE_FULL``, retry after the time the queue takes to drain), not accepted into a wait no
client would sit through. The bound prices prefill only: a request that also waits for blocks (running requests finishing) waits
longer than it says. A request arriving at an empty queue is always accepted, however long its own prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The time to first token the default server holds its queue to. Ten seconds is about as long as a person waits for
# a chat to start answering; on the two-core CPUs this site is built on, a prefill of a few hundred tokens per
# second makes that a few thousand prompt tokens in the queue.
TTFT_TARGET_S = 10.0
# The start-up probe: one prefill of this many tokens seeds the rate before any request. Long enough that the weights'
# pass, not the call's overhead, sets it (64 tokens read about a third of the packed prefills' rate on SmolLM2-135M).
PROBE_TOKENS = 256
# Each prefill's tokens and seconds are added to decayed sums, so the rate follows the machine as it is now (another
# process starting, a bigger batch) while one short call cannot swing it: the newest call weighs 1, the one before
# DECAY, and so on.
DECAY = 0.9


@dataclass
class PrefillRate:
    """Prompt tokens per second of prefill, from decayed sums of the calls observed (the probe first). ``fixed``:
    a rate given, never updated (a test's, so that what is refused does not depend on the host's speed)."""

    tokens: float
    seconds: float
    fixed: bool = False
    observed_calls: int = 0

    @classmethod
    def given(cls, tokens_per_s: float) -> PrefillRate:
        if not 0 < tokens_per_s < math.inf:
            raise ValueError(f"a prefill rate must be a finite number of tokens per second above 0, got {tokens_per_s}")
        return cls(tokens_per_s, 1.0, fixed=True)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def observe(self, tokens: int, seconds: float) -> None:
        if self.fixed or tokens <= 0 or seconds <= 0:
            return
        self.tokens = DECAY * self.tokens + tokens
        self.seconds = DECAY * self.seconds + seconds
        self.observed_calls += 1


@dataclass(frozen=True)
class OverBound:
    """Why a prompt does not fit the bound, and when to retry (the scheduler refuses it as
    ``Refusal.PREFILL_QUEUE_FULL``)."""

    message: str
    retry_after_s: int


def over_bound(waiting_tokens: int, prompt_tokens: int, target_s: float, rate: PrefillRate) -> OverBound | None:
    """None if a prompt of ``prompt_tokens`` may join ``waiting_tokens`` already waiting for prefill; else why not.
    An empty queue always takes it."""
    allowed = target_s * rate.tokens_per_s
    if waiting_tokens == 0 or waiting_tokens + prompt_tokens <= allowed:
        return None
    drain_s = waiting_tokens / rate.tokens_per_s
    return OverBound(f"{waiting_tokens:,} prompt tokens wait for prefill; with this request's {prompt_tokens:,} they "
                   f"would pass {allowed:,.0f}, what this server prefills in its {target_s:g} s time-to-first-token "
                   f"target at the {rate.tokens_per_s:,.0f} tokens/s it measures; the queue drains in about "
                   f"{drain_s:.1f} s", max(1, math.ceil(drain_s)))
