"""SIGTERM unwinds like Ctrl-C: a stdlib-only module, so a launcher can install it before heavy imports."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_INTERRUPTED = {"SIGINT": 130, "SIGTERM": 143}  # the shell's 128 + signal number


class Terminated(BaseException):
    """SIGTERM, raised where the process happens to be, so it unwinds (and cleans up) as Ctrl-C does."""


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def signal_name(stop: BaseException) -> str:
    return "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_when_parent_dies(parent: int | None = None, signum: int = signal.SIGTERM) -> None:
    """Linux: the kernel sends ``signum`` to this process when its parent ends, even by SIGKILL, so an
    orphaned benchmark stops (without writing) instead of replacing a record after its caller is gone.
    ``parent``: the pid the parent had; if it is already gone, the signal is sent now. Elsewhere, nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl in this libc: the contract is Linux's
        return
    if parent is not None and os.getppid() != parent:  # it died before the prctl
        os.kill(os.getpid(), signum)


BEFORE_WRITE = "no record was written, a previous one is untouched"


def exit_quietly(signum: int, frame: FrameType | None, state: str = BEFORE_WRITE) -> None:
    """Ctrl-C or SIGTERM while a benchmark imports or measures: nothing is on disk yet, so stop at once,
    in one line. (Raising instead can be swallowed by library code that catches everything, as torch's
    import does with KeyboardInterrupt.)"""
    name = signal.Signals(signum).name
    print(f"benchmark: interrupted ({name}); {state}", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED[name])


def exit_quietly_on_interrupt(state: str = BEFORE_WRITE) -> None:
    """What a benchmark launcher installs first: Ctrl-C and SIGTERM end it in one line, any moment;
    after the record is written, the line says so (``state``)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, frame: exit_quietly(number, frame, state))


@contextmanager
def signals_held() -> Iterator[None]:
    """Within the block the kernel holds SIGINT and SIGTERM back (main thread only); one sent meanwhile
    arrives as the block ends, so what the block does is never cut in two."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def sigterm_unwinds() -> Iterator[Callable[[], None]]:
    """Within the block, Ctrl-C and SIGTERM raise, so cleanup code runs (main thread only). The block
    gets a function that brings the previous handlers back early (the block's end does it otherwise)."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        while previous:
            signum, handler = previous.popitem()
            signal.signal(signum, handler)

    signal.signal(signal.SIGTERM, raise_terminated)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield restore
    finally:
        restore()
