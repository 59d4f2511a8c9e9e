"""What one pass of the scheduler decided, before any model call: ``SchedulerOutput`` (vLLM v1's name).

``Scheduler.schedule`` returns it; the loop runs it (the prefill groups one packed call each, then one decode step;
or, ``mixed``, the chunks and the decode rows in one call) and applies what the model returns. Nothing in it is a
tensor or a block of the pool: requests, counts, positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: request.py is where a request's state lives
    from .request import Request


@dataclass(frozen=True)
class ScheduledPrefill:
    """One admitted prompt's prefill, or a chunk of it: positions ``start`` to ``start + tokens - 1`` are computed.
    The request's first token comes from the pass whose chunk reaches the prompt's last position."""

    request: Request
    # prompt positions already in the blocks (whole blocks): found in the prefix cache at admission, or computed by
    # the request's earlier chunks; 0 for a prompt prefilled whole without a prefix cache
    start: int
    tokens: int  # prompt positions computed: len(prompt) - start when whole, at least 1 (the last is always computed)


@dataclass(frozen=True)
class SchedulerOutput:
    """The requests one pass admitted and prefills, packed into groups of at most ``PREFILL_TOKENS`` prompt tokens
    (one model call each, in order), or with chunked prefill one group of chunks within the pass's token budget;
    the requests its decode step then advances by one token; and the requests retired since the pass before, their
    blocks back in the pool."""

    prefill_groups: tuple[tuple[ScheduledPrefill, ...], ...]
    # Every running request whose prompt is whole once this pass's prefills return, in admission order: those whose
    # prefill ends this pass decode after it has given them their first token (a request with chunks still to come
    # does not decode). The loop skips any that are no longer running by then (a first token that ended it, a failed
    # prefill, a client gone meanwhile).
    decodes: tuple[Request, ...]
    # Retired since the previous pass: finished, cancelled or failed, by the last pass's model calls or by this
    # pass itself (a departed client, an admission whose blocks were not there, a shutdown).
    finished: tuple[Request, ...]
    # With chunked prefill, whether the decode rows ride in the chunks' call (Sarathi-Serve's mixed batch): each
    # weight matrix is then read once for both. With chunked prefill ``decodes`` holds only requests whose prompt
    # was whole before this pass (one whose last chunk runs now gets its first token from it and decodes from the
    # next pass on), so a pass is one model call.
    mixed: bool = False
    # NOTE: always empty: this engine reserves every block a request can ever need when it admits it, so a running
    # request is never evicted to make room for another (vLLM preempts by recomputation; this engine does not yet).
    preempted: tuple[Request, ...] = ()

    @property
    def prefills(self) -> tuple[ScheduledPrefill, ...]:
        """Every prefill of the pass, in admission order."""
        return tuple(prefill for group in self.prefill_groups for prefill in group)
