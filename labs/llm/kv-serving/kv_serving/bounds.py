"""Bounds on a slow client: the request's headers and its body must arrive in time, the body within a size, and a
streamed reply must be taken.

A connection that sends nothing, or its headers a byte at a time, gets a 408 and is closed (``BoundedHeaders``, the
protocol class uvicorn runs): the first request's headers must be in within the timeout of the connection's accept,
a later request's within the timeout of its first byte (uvicorn's keep-alive timeout closes a connection idle
between requests). A body larger than the server reads is refused with a 413 before or while it arrives, and one
that does not arrive within the timeout with a 408 (``read_body``). A stream whose client takes no byte for
``STALL_TIMEOUT_S`` is cancelled, sent a last error event and the end of its body behind what it has not read, and
closed (``SEND_BUFFER_BYTES`` says why the buffers are small, ``StallWatch`` how taking is seen, ``stalls`` how a
wait is watched; kv_serving.server.EventStream does it). The lab's server (kv_serving.server, for either model) runs uvicorn with
``bounded_config``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import socket
import struct
import termios
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import h11
import uvicorn
from fastapi import Request as HTTPRequest
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from .protocol import BODY_SLACK_BYTES, BYTES_PER_TOKEN_ID, error_body

HOST = "127.0.0.1"  # never another interface: the lab servers have no authentication
REQUEST_TIMEOUT_S = 30.0  # for a request's headers (from the accept, or a later request's first byte), then its body
# A stream is bounded by what its client takes, not by what the server has queued. NOTE: left to itself, the kernel
# grows a loopback connection's send buffer to megabytes, which holds a whole long reply (2,000 tokens are about
# 500 KB of events), so a client that never reads would hold its connection open to the end of a reply it never
# takes. Each connection's buffers are therefore kept to SEND_BUFFER_BYTES (the socket's, which Linux doubles, and
# the transport's high-water mark), so an unread stream backs up into the server within a few hundred events.
# Whether the client takes anything is then judged by progress (StallWatch): the bytes written but not yet taken
# shrink whenever it reads. NOTE: not by whether one write completed: a blocked write resumes only once the
# transport has drained to its low-water mark (a quarter of the high), about 24 KB, so a client reading under about
# 2.4 KB/s would look stalled while it reads.
SEND_BUFFER_BYTES = 32 * 1024
# A client that takes no byte for this long is cut. NOTE: a reader is seen only when its receive window reopens, and
# a receiver advertises no window smaller than a segment (TCP's silly-window avoidance), so a client reading one
# 240-byte event every 2.5 s through a 4 KiB buffer shows progress only once it has emptied that buffer: measured on
# loopback, 24 s and then more than 60 s apart. A sender learns of a reopened window at the latest from its next
# window probe, which Linux spaces at most 120 s apart (TCP_RTO_MAX); that is the bound used. The request itself
# never waits for its reader (its tokens queue in memory, its blocks go back when it finishes), so what a client
# that reads nothing costs is at most this long of decoding for nobody.
STALL_TIMEOUT_S = 120.0
TRANSPORT = "kv_serving.transport"  # the connection's transport in each request's scope["state"] (BoundedHeaders)
FLOW = "kv_serving.flow"  # and uvicorn's write flow control for it: a cut stream's last event skips the wait


def unsent_bytes(transport: asyncio.BaseTransport) -> int | None:
    """Bytes written to this connection that its client has not taken: the transport's buffer plus the socket's
    send queue not yet acknowledged (Linux's TIOCOUTQ); None when neither can be read (an in-process call)."""
    buffered = transport.get_write_buffer_size() if isinstance(transport, asyncio.WriteTransport) else None
    connection = transport.get_extra_info("socket")
    if connection is None:
        return buffered
    try:
        queued = struct.unpack("i", fcntl.ioctl(connection.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except (OSError, ValueError):  # closed, or a kernel without the ioctl: the transport's buffer alone
        return buffered
    return (buffered or 0) + queued


@dataclass
class StallWatch:
    """Whether a client has taken nothing for ``timeout_s``: ``poll`` it with the bytes not yet taken (``unsent``)
    every ``poll_s``; any fall in them is the client reading. Without a measure (None), nothing is ever seen as
    progress and a write that waits ``timeout_s`` is a stall, as it must be."""

    timeout_s: float
    clock: Callable[[], float] = time.monotonic
    _lowest: int | None = field(default=None, init=False)
    _since: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._since = self.clock()

    @property
    def poll_s(self) -> float:
        return min(1.0, self.timeout_s / 10)

    def poll(self, unsent: int | None) -> bool:
        """True once nothing has been taken for ``timeout_s``."""
        now = self.clock()
        if unsent is not None and (self._lowest is None or unsent < self._lowest):
            if self._lowest is not None:
                self._since = now  # the client took bytes since the last poll
            self._lowest = unsent
        return now - self._since >= self.timeout_s


async def stalls(timeout_s: float, unsent: Callable[[], int | None], done: Callable[[float], Awaitable[bool]]) -> bool:
    """Watch a client take what it was sent (``unsent``: the bytes it has not taken) until ``done`` says the wait is
    over; True if the client took nothing for ``timeout_s`` first (``StallWatch``), False once done. ``done`` is given
    the seconds it may wait before the next look (``StallWatch.poll_s``), and returns whether the wait is over."""
    watch = StallWatch(timeout_s)
    while not watch.poll(unsent()):  # the first look sets what the client has not taken yet
        if await done(watch.poll_s):
            return False
    return True


class BoundedHeaders(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, with a deadline on a request's headers: a client that sends nothing, or its
    headers a byte at a time, gets a 408 and the connection closes, instead of holding it for as long as it likes
    (uvicorn itself times nothing before a connection's first request)."""

    header_timeout_s = REQUEST_TIMEOUT_S
    send_buffer_bytes = SEND_BUFFER_BYTES
    _header_deadline: asyncio.TimerHandle | None = None
    _silent = True  # nothing has arrived on this connection yet

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)
        connection = transport.get_extra_info("socket")
        if connection is not None:  # small buffers, so an unread stream backs up into the server (STALL_TIMEOUT_S)
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
        transport.set_write_buffer_limits(high=self.send_buffer_bytes)
        # each request's scope["state"] is a copy of this: a stream watches and ends its own connection (EventStream)
        self.app_state = {**self.app_state, TRANSPORT: transport, FLOW: self.flow}

    def data_received(self, data: bytes) -> None:
        self._silent = self._silent and not data
        waiting_for_headers = self.conn.their_state is h11.IDLE
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in (uvicorn's cycle has the request)
            self._cancel_header_deadline()
        elif waiting_for_headers and data and self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_deadline()
        super().connection_lost(exc)

    def _cancel_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        what = (f"no request arrived within {self.header_timeout_s:g} s of the connection opening" if self._silent
                else f"the request headers did not arrive within {self.header_timeout_s:g} s")
        body = json.dumps(error_body(what, "request_timeout")).encode()
        # h11 sends no response before a request has arrived: written by hand, then the connection closes
        self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                             b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        self.transport.close()


def bounded_headers(timeout_s: float, send_buffer_bytes: int = SEND_BUFFER_BYTES) -> type[BoundedHeaders]:
    """The protocol class for uvicorn.Config(http=...), with headers bounded to ``timeout_s`` and each connection's
    send buffers to ``send_buffer_bytes``."""
    return type("BoundedHeaders", (BoundedHeaders,), {"header_timeout_s": timeout_s,
                                                       "send_buffer_bytes": send_buffer_bytes})


def bounded_config(app: ASGIApp, port: int, request_timeout_s: float = REQUEST_TIMEOUT_S,
                   send_buffer_bytes: int = SEND_BUFFER_BYTES, **options: object) -> uvicorn.Config:
    """uvicorn's settings for a lab server: 127.0.0.1 only, no access log, every connection's headers bounded to
    ``request_timeout_s`` and its send buffers to ``send_buffer_bytes`` (``BoundedHeaders``); ``options`` are
    uvicorn.Config's own (log_level, lifespan, ...)."""
    return uvicorn.Config(app, host=HOST, port=port, access_log=False,
                          http=bounded_headers(request_timeout_s, send_buffer_bytes), **options)  # type: ignore[arg-type]


class BodyTooLarge(ValueError):
    """A request body beyond ``max_body_bytes``: answered 413 without reading the rest."""


class BodyTooSlow(ValueError):
    """A request body that did not arrive within the server's request timeout: answered 408."""


async def read_body(http: HTTPRequest, limit: int, max_positions: int, timeout_s: float = REQUEST_TIMEOUT_S) -> bytes:
    """The body, refused by its Content-Length before reading, or as soon as more than ``limit`` bytes arrive,
    or when it has not all arrived ``timeout_s`` after the headers."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body(http, limit, max_positions)
    except TimeoutError:
        raise BodyTooSlow(f"the request body did not arrive within {timeout_s:g} s") from None


async def _read_body(http: HTTPRequest, limit: int, max_positions: int) -> bytes:
    why = (f"this server reads at most {limit} bytes ({BYTES_PER_TOKEN_ID} per position for the model's "
           f"{max_positions} positions + {BODY_SLACK_BYTES})")
    declared = http.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the request body is {int(declared)} bytes; {why}")
    parts, size = [], 0
    async for part in http.stream():
        size += len(part)
        if size > limit:
            raise BodyTooLarge(f"the request body is more than {limit} bytes; {why}")
        parts.append(part)
    return b"".join(parts)
