"""The waiting queue bounded by time, not by count: the prefills a new request would wait behind, priced by what a
prefill call costs on this server, are the wait it would see before its first token.

A queue bounded by requests says nothing about time: 256 short chats wait seconds, 256 long system prompts minutes.
vLLM queues without limit by default and offers an opt-in cap on prompt tokens waiting for prefill, to be set by hand
to about the target time to first token x the prefill throughput. Here the engine sets it itself, from a cost model
it measures (``PrefillCost``): a call costs a fixed part, since even a one-token prefill reads every weight once, plus
a part per token. A rate in tokens per second alone cannot price both: forty one-token prefills once dragged such a
rate from 363 to 30 tokens/s, and the server then refused prompts it had room for.

A request is refused at once (``Refusal.PREFILL_QUEUE_FULL``) when the prefills ahead of it and its own would pass
``ttft_target_s``, with a Retry-After of the time until enough of the work ahead is done for it to fit (the prefill
under way counts what it has already run). A prompt whose own prefill alone would pass the target is refused as
too long for this server (``Refusal.PROMPT_OVER_TTFT_TARGET``), whatever the queue. Where the queue's head waits for
blocks (running requests hold them until their last token), that wait is priced too (``blocked_s``, the scheduler's
estimate from the running requests' remaining tokens): every request behind the head waits with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# The time to first token the default server holds its queue to. Ten seconds is about as long as a person waits for
# a chat to start answering; on the two-core CPUs this site is built on, a prefill of a few hundred tokens per
# second makes that a few thousand prompt tokens in the queue.
TTFT_TARGET_S = 10.0
# The start-up probe: a one-token prefill prices a call's fixed part, then one of PROBE_TOKENS tokens its tokens. Long
# enough that the weights' pass, not the call's overhead, sets the per-token part.
PROBE_TOKENS = 256
# Each prefill's tokens and the seconds they took beyond the call's fixed part are added to decayed sums, so the cost
# per token follows the machine as it is now (another process starting, a bigger batch) while one short call cannot
# swing it: the newest call weighs 1, the one before DECAY, and so on.
DECAY = 0.9


@dataclass
class PrefillCost:
    """Seconds a prefill call takes: ``per_call_s`` + tokens x the per-token part, that part from decayed sums of the
    calls observed (the probe first). ``fixed``: a cost given, never updated (a test's, so that what is refused does
    not depend on the host's speed)."""

    per_call_s: float
    tokens: float  # decayed sum of the tokens prefilled
    seconds: float  # decayed sum of their seconds beyond each call's fixed part
    fixed: bool = False
    observed_calls: int = 0

    @classmethod
    def given(cls, tokens_per_s: float, per_call_s: float = 0.0) -> PrefillCost:
        if not 0 < tokens_per_s < math.inf:
            raise ValueError(f"a prefill rate must be a finite number of tokens per second above 0, got {tokens_per_s}")
        if not 0 <= per_call_s < math.inf:
            raise ValueError(f"a prefill call's fixed cost must be a finite number of seconds, 0 or more, got "
                             f"{per_call_s}")
        return cls(per_call_s, tokens_per_s, 1.0, fixed=True)

    @classmethod
    def probed(cls, one_token_s: float, tokens: int, seconds: float) -> PrefillCost:
        """From the start-up probe: a one-token call's seconds (the fixed part) and a call of ``tokens``. Where the
        long call was not the slower (a disturbed probe), the whole of it is priced per token, with no fixed part."""
        if seconds <= one_token_s:
            return cls(0.0, tokens, seconds)
        return cls(one_token_s, tokens, seconds - one_token_s)

    @property
    def per_token_s(self) -> float:
        return self.seconds / self.tokens

    @property
    def tokens_per_s(self) -> float:
        """The rate a long prompt's tokens are prefilled at, the call's fixed part aside."""
        return self.tokens / self.seconds

    def call_s(self, tokens: int) -> float:
        return self.per_call_s + tokens * self.per_token_s

    def observe(self, tokens: int, seconds: float) -> None:
        if self.fixed or tokens <= 0 or seconds <= 0:
            return
        self.tokens = DECAY * self.tokens + tokens
        self.seconds = DECAY * self.seconds + max(seconds - self.per_call_s, 0.0)
        self.observed_calls += 1


@dataclass(frozen=True)
class OverBound:
    """Why a prompt does not fit the bound, and when to retry (None: never, as sent)."""

    message: str
    retry_after_s: int | None


def over_bound(ahead: Sequence[int], running_s: float, prompt_tokens: int, target_s: float,
               cost: PrefillCost, blocked_s: float = 0.0) -> OverBound | None:
    """None if a prompt of ``prompt_tokens`` to compute may wait behind the prefills ``ahead`` (each one's tokens
    still to compute; the first may be under way, for ``running_s`` so far), after ``blocked_s`` seconds in which the
    queue waits for blocks to be freed; else why not."""
    own_s = cost.call_s(prompt_tokens)
    if own_s > target_s:
        return OverBound(f"this prompt's {prompt_tokens:,} tokens to prefill take about {own_s:.1f} s on this server "
                         f"({cost.per_call_s * 1e3:.0f} ms a call + {cost.per_token_s * 1e3:.2f} ms a token), beyond "
                         f"its {target_s:g} s time-to-first-token target even with nothing queued; send a shorter "
                         "prompt", None)
    work_s = max(sum(cost.call_s(tokens) for tokens in ahead) - running_s, 0.0)
    queued_s = blocked_s + work_s
    if queued_s + own_s <= target_s:
        return None
    wait_s = queued_s + own_s - target_s  # until that much of the work ahead is done, this prompt would pass the target
    blocked = (f"the queue waits about {blocked_s:.1f} s for running requests to free KV blocks, then "
               if blocked_s > 0 else "")
    return OverBound(f"{blocked}{len(ahead):,} prefills ({sum(ahead):,} prompt tokens) wait ahead, about "
                     f"{work_s:.1f} s of work at this server's measured cost ({cost.per_call_s * 1e3:.0f} ms a call + "
                     f"{cost.per_token_s * 1e3:.2f} ms a token); with this request's {prompt_tokens:,} tokens the first "
                     f"token would come after {queued_s + own_s:.1f} s, beyond the {target_s:g} s target",
                     max(1, math.ceil(wait_s)))
