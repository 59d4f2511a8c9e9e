"""What one pass of the scheduler decided, before any model call: ``SchedulerOutput`` (vLLM v1's name).

``Scheduler.schedule`` returns it; the loop runs it (the prefill groups one packed call each, then one decode step)
and applies what the model returns. Nothing in it is a tensor or a block of the pool: requests, counts, positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: request.py is where a request's state lives
    from .request import Request


@dataclass(frozen=True)
class ScheduledPrefill:
    """One admitted prompt's prefill: positions ``start`` to ``start + tokens - 1`` are computed."""

    request: Request
    start: int  # prompt positions found in the prefix cache at admission (whole blocks), not computed again; 0 without
    tokens: int  # prompt positions computed: len(prompt) - start, at least 1 (the last is always computed)


@dataclass(frozen=True)
class SchedulerOutput:
    """The requests one pass admitted and prefills, packed into groups of at most ``PREFILL_TOKENS`` prompt tokens
    (one model call each, in order); the requests its decode step then advances by one token; and the requests
    retired since the pass before, their blocks back in the pool."""

    prefill_groups: tuple[tuple[ScheduledPrefill, ...], ...]
    # Every request running once admission is done, in admission order: those admitted this pass decode after their
    # prefill has given them their first token. The loop skips any that are no longer running by then (a first token
    # that ended it, a failed prefill, a client gone meanwhile).
    decodes: tuple[Request, ...]
    # Retired since the previous pass: finished, cancelled or failed, by the last pass's model calls or by this
    # pass itself (a departed client, an admission whose blocks were not there, a shutdown).
    finished: tuple[Request, ...]
    # NOTE: always empty: this engine reserves every block a request can ever need when it admits it, so a running
    # request is never evicted to make room for another (vLLM preempts by recomputation; this engine does not yet).
    preempted: tuple[Request, ...] = ()

    @property
    def prefills(self) -> tuple[ScheduledPrefill, ...]:
        """Every prefill of the pass, in admission order."""
        return tuple(prefill for group in self.prefill_groups for prefill in group)
