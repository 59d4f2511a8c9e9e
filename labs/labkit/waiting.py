"""Waiting in tests on states and events, never on how fast something happens.

The suite runs on two cores shared with other work (``make site`` runs two labs' suites at once, and CI runs on
such a machine), so a test that expects a step "within N seconds" is a coin toss. A test here waits for what it
needs: a server's ``/health``, a stream's first event, ``/metrics`` showing a request running, a process's exit.
Every wait is still bounded, by ``HANG_S``: minutes, a bound that only a hang reaches, never a claim about speed.
When it expires, the failure says what the test was waiting for.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import IO, Any, TypeVar

HANG_S = 300.0  # the bound of any one wait: far beyond a loaded machine's slowest honest step
POLL_S = 0.005  # how often a polled state is looked at again

T = TypeVar("T")


def interrupt_by_default() -> None:
    """Ctrl-C (SIGINT) as Python's KeyboardInterrupt in this process even when it was started with SIGINT ignored
    (a non-interactive shell's ``cmd &``, some CI steps): a process this one starts then inherits SIGINT's default
    action, not the ignored one, so a test's SIGINT to a server, a benchmark or ``make`` reaches it. Make keeps an
    inherited ignored SIGINT ignored, and so does Python until it installs a handler of its own."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Hung(AssertionError):
    """A wait that reached its bound: what the test waited for never happened (a test failure, not an error)."""

    def __init__(self, what: str, timeout_s: float) -> None:
        super().__init__(f"waited {timeout_s:g} s for {what}; it never happened (a hang, not a slow machine)")


def until(condition: Callable[[], object], what: str, timeout_s: float = HANG_S, poll_s: float = POLL_S) -> None:
    """Return once ``condition()`` is true; raise Hung naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise Hung(what, timeout_s)
        time.sleep(poll_s)


async def eventually(condition: Callable[[], object], what: str, timeout_s: float = HANG_S,
                     poll_s: float = POLL_S) -> None:
    """The same in a running loop: ``condition`` may be a plain function or a coroutine function (a request)."""
    async with bounded(what, timeout_s):
        while True:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return
            await asyncio.sleep(poll_s)


@asynccontextmanager
async def bounded(what: str, timeout_s: float = HANG_S) -> AsyncIterator[None]:
    """``asyncio.timeout`` whose expiry is a Hung naming ``what``; a TimeoutError the block raises itself passes."""
    scope = asyncio.timeout(timeout_s)
    try:
        async with scope:
            yield
    except TimeoutError:
        if scope.expired():
            raise Hung(what, timeout_s) from None
        raise


async def within(awaitable: Awaitable[T], what: str, timeout_s: float = HANG_S) -> T:
    """Await ``awaitable``; raise Hung naming ``what`` if it has not finished after ``timeout_s``."""
    async with bounded(what, timeout_s):
        return await awaitable


def run(command: list[str], what: str, timeout_s: float = HANG_S, **options: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` whose deadline is a Hung naming ``what`` (the process is killed, as run does)."""
    try:
        return subprocess.run(command, timeout=timeout_s, **options)
    except subprocess.TimeoutExpired:
        raise Hung(f"{what} ({command[0]} ... to exit)", timeout_s) from None


def communicate(process: subprocess.Popen[Any], what: str, timeout_s: float = HANG_S) -> tuple[Any, Any]:
    """``process.communicate()``; after ``timeout_s`` the process is killed and Hung names ``what``."""
    try:
        return process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise Hung(what, timeout_s) from None


def lines_until(process: subprocess.Popen[str], stream: IO[str], text: str, what: str,
                timeout_s: float = HANG_S) -> list[str]:
    """The lines ``process`` writes to ``stream`` (one of its pipes), up to the first that holds ``text``. If the
    stream ends first, the test fails with the lines so far; if neither happens within ``timeout_s``, the process
    is killed and Hung names ``what``."""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        process.kill()

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    lines: list[str] = []
    try:
        while not lines or text not in lines[-1]:
            line = stream.readline()
            if not line:
                if expired.is_set():
                    raise Hung(what, timeout_s)
                raise AssertionError(f"the process's output ended before {what}: {lines[-5:]}")
            lines.append(line)
    finally:
        timer.cancel()
    return lines


def read_until_closed(connection: socket.socket, what: str, timeout_s: float = HANG_S) -> bytes:
    """Everything the peer sends until it closes the connection; Hung naming ``what`` if it falls silent for
    ``timeout_s`` without closing."""
    connection.settimeout(timeout_s)
    received = b""
    try:
        while part := connection.recv(65536):
            received += part
    except TimeoutError:
        raise Hung(what, timeout_s) from None
    return received
