"""Start lab servers as separate processes on 127.0.0.1, wait until they answer, stop them with Ctrl-C.

A separate process keeps the load generator's event loop and the server's
decode thread from sharing one interpreter lock, as they would not in a
real deployment either. Several servers start together (importing torch
is most of a start), and an idle one costs no CPU: the benchmark runs its
experiments against them one after another.
"""

from __future__ import annotations

import os
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

import httpx
import uvicorn

from .server import GRACE_S, HOST, Server, create_app, engine_config, parse_args


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """Distinct free ports: every probe stays bound until all are chosen, so none is handed out twice."""
    with ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind((HOST, 0))
        return [probe.getsockname()[1] for probe in probes]


@contextmanager
def server_processes(argument_lists: list[list[str]], startup_timeout_s: float = 90.0,
                     stop_timeout_s: float = 15.0) -> Iterator[list[str]]:
    """Run ``python -m kv_serving.server --port <free> *arguments`` for each list; yield their base URLs."""
    with ExitStack() as stack:
        started: list[tuple[subprocess.Popen[bytes], IO[str], str]] = []

        def stop_all() -> None:
            for process, _, _ in started:
                if process.poll() is None:
                    process.send_signal(signal.SIGINT)  # what Ctrl-C does: a clean uvicorn shutdown
            for process, _, _ in started:
                try:
                    process.wait(stop_timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

        stack.callback(stop_all)
        for arguments, port in zip(argument_lists, free_ports(len(argument_lists))):
            log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            process = subprocess.Popen([sys.executable, "-m", "kv_serving.server", "--port", str(port), *arguments],
                                       stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
            started.append((process, log, f"http://{HOST}:{port}"))
        deadline = time.monotonic() + startup_timeout_s
        for process, log, url in started:
            while not healthy(url):
                if process.poll() is not None:
                    raise RuntimeError(f"the server exited with code {process.returncode}: {tail(log)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not answer within {startup_timeout_s} s: {tail(log)}")
                time.sleep(0.1)
        time.sleep(0.5)
        for process, log, url in started:  # a server that lost its port to another process has exited by now
            if process.poll() is not None:
                raise RuntimeError(f"the server for {url} exited with code {process.returncode}: {tail(log)}")
        yield [url for _, _, url in started]


@contextmanager
def server_threads(argument_lists: list[list[str]], startup_timeout_s: float = 30.0,
                   stop_timeout_s: float = 15.0) -> Iterator[list[str]]:
    """The same servers, each on its own thread and event loop in this process: quick to start, but they share
    the interpreter lock with the caller, so timings taken this way mean little (the quick mode's use)."""
    with ExitStack() as stack:
        urls = []
        for arguments in argument_lists:
            config = engine_config(parse_args(["--port", "0", *arguments]))
            server = Server(uvicorn.Config(create_app(config), host=HOST, port=0, log_level="warning",
                                           access_log=False, timeout_graceful_shutdown=GRACE_S))
            thread = threading.Thread(target=server.run, name="kv-serving-server", daemon=True)
            thread.start()

            def stop(server: uvicorn.Server = server, thread: threading.Thread = thread) -> None:
                server.should_exit = True
                thread.join(stop_timeout_s)

            stack.callback(stop)
            deadline = time.monotonic() + startup_timeout_s
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"an in-process server did not start within {startup_timeout_s} s")
                time.sleep(0.02)
            urls.append(f"http://{HOST}:{server.servers[0].sockets[0].getsockname()[1]}")
        yield urls


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def tail(log: IO[str], lines: int = 5) -> str:
    log.seek(0)
    return " | ".join(log.read().strip().splitlines()[-lines:])
