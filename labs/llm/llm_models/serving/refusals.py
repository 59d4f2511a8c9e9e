"""Why the engine refuses a request before it is queued, or fails one it had queued: one ``Refusal`` per reason.

Each member's value is the code an OpenAI-style error body carries (``error.code``). The engine names the reason
and nothing else: how a client is answered (a status, when to retry) is for the server over this engine to decide,
in one table of its own.
"""

from __future__ import annotations

from enum import Enum


class Refusal(Enum):
    # the request can never run on this engine as sent
    INVALID_REQUEST = "invalid_request"  # an empty prompt, or max_tokens below 1
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # the prompt, or prompt + max_tokens, past the model's positions
    INVALID_TOKEN = "invalid_token"  # a prompt id outside the vocabulary
    KV_BUDGET_EXCEEDED = "kv_budget_exceeded"  # its reservation alone is more blocks than the KV budget
    PROMPT_OVER_TTFT_TARGET = "prompt_over_ttft_target"  # its own prefill alone would pass the time-to-first-token target
    # the engine is loaded or stopping: the same request may run later
    QUEUE_FULL = "queue_full"  # the waiting queue holds max_waiting requests
    PREFILL_QUEUE_FULL = "prefill_queue_full"  # the prompt tokens waiting would pass the time-to-first-token bound
    SERVER_SHUTTING_DOWN = "server_shutting_down"  # fail_all: queued and running requests fail, new ones are refused
    SCHEDULER_STOPPED = "scheduler_stopped"  # the loop ended without stop(): nothing would run the request
    REQUEST_FAILED = "request_failed"  # admitted, then failed: its blocks were not there, or it was cancelled
    # the engine's own fault
    INTERNAL_ERROR = "internal_error"  # a model call (or a pass of the loop) raised while computing for it


class RequestRefused(ValueError):
    """Refused before it was queued: why (``refusal``), the request field at fault (``param``, or None) and, for a
    refusal of load, how many seconds until the same request would likely be taken (``retry_after_s``)."""

    def __init__(self, message: str, refusal: Refusal, param: str | None = None, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.refusal, self.param, self.retry_after_s = refusal, param, retry_after_s
