"""One completion request as the scheduler sees it, and the events it streams to its client."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import Enum

from .admission import kv_positions
from .prefix.hashing import BlockKeys
from .refusals import Refusal
from .text import TextStream


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"  # produced max_tokens tokens
    CANCELLED = "cancelled"  # its client left and the server stopped it
    FAILED = "failed"  # admitted by count, but the pool could not supply its blocks (or shutdown, or a fault)


@dataclass(frozen=True)
class Token:
    token_id: int
    text: str | None = None  # what this token adds to the request's text (None: a model without a tokenizer)
    listed: bool = True  # False for an end-of-turn token: it ends the reply, adds no text, and is not listed


@dataclass(frozen=True)
class Finished:
    reason: str  # "length": max_tokens reached; "stop": a stop token or stop string ended it (a tokenizer's model)


@dataclass(frozen=True)
class Failed:
    message: str
    refusal: Refusal = Refusal.REQUEST_FAILED  # why: memory or a cancellation, shutdown, or a fault (INTERNAL_ERROR)


Event = Token | Finished | Failed


@dataclass(eq=False)
class Request:
    request_id: str
    prompt: list[int]
    max_tokens: int
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    status: Status = Status.WAITING
    table: list[int] = field(default_factory=list)  # logical block i -> pool block, reserved at admission
    cached_tokens: int = 0  # leading prompt positions found in the prefix cache at admission: not computed again
    # leading prompt positions whose keys and values are in the blocks: the cached ones at admission, then each
    # prefill's (a chunked prefill takes several passes); the first token comes when it reaches the prompt's length
    computed: int = 0
    output: list[int] = field(default_factory=list)
    arrival_s: float = field(default_factory=time.monotonic)
    # monotonic time the scheduler admitted it: its wait in the queue ends, its prefill can start (a client's time
    # to first token is this wait plus its own prefill, which share no cause)
    admitted_s: float | None = None
    created: int = field(default_factory=lambda: int(time.time()))  # OpenAI's ``created``: one value per request
    client_gone: bool = False  # the client disconnected (whether or not the server honours it)
    gone_s: float | None = None  # monotonic time the server noticed the client had left (not the client's own)
    cancel_iteration: int | None = None  # scheduler iteration during which the client left
    decode_steps: int = 0
    decode_steps_after_gone: int = 0
    gone_reason: str = "the client disconnected"
    text: TextStream | None = None  # the output as text, with its stops (None: token ids only)
    # vLLM's cache_salt: the prefix cache finds this request's blocks only for requests with the same salt (a tenant's
    # own), and its prompt only in blocks cached under it (prefix.hashing.root_hash); None: the shared cache
    cache_salt: str | None = None
    # the positions stored so far as the prefix cache looks them up, their block hashes kept (prefix.BlockKeys)
    keys: BlockKeys = field(init=False)

    def __post_init__(self) -> None:
        self.keys = BlockKeys(self.prompt, self.cache_salt)

    @property
    def prefilled(self) -> bool:
        """Every prompt position computed (or found cached): the request has its first token and decodes."""
        return self.computed == len(self.prompt)

    def stored_keys(self) -> BlockKeys:
        """``keys`` brought up to every position written so far: the prompt, then each generated token fed back."""
        self.keys.extend(self.output[len(self.keys) - len(self.prompt):])
        return self.keys

    @property
    def reply_ids(self) -> list[int]:
        """The output a reply lists: without the end-of-turn token that stopped it (it is no part of the text)."""
        if self.text is not None and self.output and self.output[-1] in self.text.stop_ids:
            return self.output[:-1]
        return self.output

    @property
    def kv_positions(self) -> int:
        return kv_positions(len(self.prompt), self.max_tokens)

    @property
    def length(self) -> int:
        """Positions stored so far: the prompt and every generated token fed back."""
        return len(self.prompt) + max(len(self.output) - 1, 0)

    @property
    def done(self) -> bool:
        return self.status in (Status.FINISHED, Status.CANCELLED, Status.FAILED)
