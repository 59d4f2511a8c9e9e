"""Start lab servers as separate processes on 127.0.0.1, wait until they listen, stop them with Ctrl-C.

A separate process keeps the load generator's event loop and the server's
decode thread from sharing one interpreter lock, as they would not in a
real deployment either. Several servers start together (importing torch
is most of a start), and an idle one costs no CPU: the benchmark runs its
experiments against them one after another.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import IO

import uvicorn

from .bounds import HOST, bounded_config
from .server import GRACE_S, Server, create_app, engine_config, parse_args

LISTENING = re.compile(r"Uvicorn running on (http://127\.0\.0\.1:\d+)")  # uvicorn's line once the app has started


def free_port() -> int:
    """A port free on 127.0.0.1 when asked (a server picks its own with --port 0; this is for "nobody listens")."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


@contextmanager
def server_processes(argument_lists: list[list[str]], startup_timeout_s: float = 900.0,
                     stop_timeout_s: float = 60.0) -> Iterator[list[str]]:
    """Run ``python -m kv_serving.server --port 0 --metrics *arguments`` for each list (the load generator samples
    /metrics); yield their base URLs.

    Each server picks a free port itself and names it in its log, so no other process can take it in between;
    a server is ready once it says it is listening (uvicorn says so after the app's startup). The bounds are for
    a hang: a start on a loaded machine takes what it takes."""
    with ExitStack() as stack:
        started: list[tuple[subprocess.Popen[bytes], IO[str]]] = []

        def stop_all() -> None:
            for process, _ in started:
                if process.poll() is None:
                    process.send_signal(signal.SIGINT)  # what Ctrl-C does: a clean uvicorn shutdown
            for process, _ in started:
                try:
                    process.wait(stop_timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

        stack.callback(stop_all)
        for arguments in argument_lists:
            log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            process = subprocess.Popen([sys.executable, "-m", "kv_serving.server", "--port", "0", "--metrics",
                                        *arguments],
                                       stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
            started.append((process, log))
        deadline = time.monotonic() + startup_timeout_s
        yield [serving_url(process, log, max(0.0, deadline - time.monotonic())) for process, log in started]


def serving_url(process: subprocess.Popen[bytes], log: IO[str], timeout_s: float) -> str:
    """The base URL a lab server process (either server; its stdout and stderr go to ``log``) listens on, as its
    own log line says once it serves; RuntimeError with the log's tail if it exits first or has not said so
    within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (found := LISTENING.search(log_text(log))) is None:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode} before it listened: {tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not say it was listening within {timeout_s:g} s: {tail(log)}")
        time.sleep(0.05)
    return found[1]


@contextmanager
def server_threads(argument_lists: list[list[str]], startup_timeout_s: float = 300.0,
                   stop_timeout_s: float = 60.0) -> Iterator[list[str]]:
    """The same servers, each on its own thread and event loop in this process: quick to start, but they share
    the interpreter lock with the caller, so timings taken this way mean little (the quick mode's use)."""
    with ExitStack() as stack:
        # every server's thread starts before any is waited for: their weights load side by side, where one after
        # another took 9 s for the trained model's seven
        started = []
        for arguments in argument_lists:
            config = engine_config(parse_args(["--port", "0", *arguments]))
            server = Server(bounded_config(create_app(config, metrics=True), 0, log_level="warning",
                                           timeout_graceful_shutdown=GRACE_S))
            thread = threading.Thread(target=server.run, name="kv-serving-server", daemon=True)
            thread.start()

            def stop(server: uvicorn.Server = server, thread: threading.Thread = thread) -> None:
                server.should_exit = True
                thread.join(stop_timeout_s)

            stack.callback(stop)
            started.append((server, thread))
        deadline = time.monotonic() + startup_timeout_s
        urls = []
        for server, thread in started:
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"an in-process server did not start within {startup_timeout_s} s")
                time.sleep(0.02)
            urls.append(f"http://{HOST}:{server.servers[0].sockets[0].getsockname()[1]}")
        yield urls


def log_text(log: IO[str]) -> str:
    """What a child process has written to ``log`` so far, read without moving the file offset it shares."""
    descriptor = log.fileno()
    return os.pread(descriptor, os.fstat(descriptor).st_size, 0).decode(errors="replace")


def tail(log: IO[str], lines: int = 5) -> str:
    return " | ".join(log_text(log).strip().splitlines()[-lines:])
