"""Fixtures for this lab's tests: a tiny engine (the random model, or a tiny Llama behind SmolLM2's real tokenizer),
and a real uvicorn server on 127.0.0.1 in the test's loop or in a thread of its own (for a synchronous client such
as openai's)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import unittest
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any, NoReturn

import httpx
import uvicorn
from starlette.types import ASGIApp

from labkit.waiting import HANG_S, Hung, eventually, until, within
from llm_models.llama.generate import ChatModel
from llm_models.serving.admission import AdmissionPolicy, KVBudget
from llm_models.serving.engine import EngineConfig
from llm_models.serving.kernels import dump_timings, ranking
from llm_models.serving.output import SchedulerOutput
from llm_models.serving.pool import pool_block_bytes
from llm_models.serving.request import Failed, Finished, Request, Token
from llm_models.serving.runner import ServedModel
from llm_models.serving.scheduler import Scheduler
from llm_models.toy.config import ModelConfig

from .bounds import HOST, REQUEST_TIMEOUT_S, SEND_BUFFER_BYTES, STALL_TIMEOUT_S, bounded_config
from .server import GRACE_S, Server, create_app

TINY_MODEL = ModelConfig(vocab_size=64, width=32, heads=4, kv_heads=2, max_positions=96, seed=3)
TINY_LAYERS = 2
TINY_BLOCK = 4
# Probe timings (ns) that make one dtype the faster, handed to kv_serving.benchmark.main(dtype_probes=...) in place
# of the timed probe: the suite's quick runs take each branch of the dtype choice on any CPU, whichever is faster.
FLOAT32_WINS = {"float32": (1_000_000,), "bfloat16": (2_000_000,)}
BFLOAT16_WINS = {"float32": (2_000_000,), "bfloat16": (1_000_000,)}


# A server under test with a short request deadline (0.5 s) answers 408 to any client, a well-behaved one too, that
# this machine stalls for that long between its connect and its request; a request that checks the server still
# serves is tried again on a 408, so only a server that no longer serves fails it, never a stalled host.
DEADLINE_RETRIES = 5


async def despite_stalls(client: httpx.AsyncClient, method: str, url: str, **request: Any) -> httpx.Response:
    """``client.request(method, url, ...)``, sent again while a short request deadline answers 408."""
    for _ in range(DEADLINE_RETRIES):
        reply = await client.request(method, url, **request)
        if reply.status_code != 408:
            break
    return reply


def despite_stalls_sync(method: str, url: str, **request: Any) -> httpx.Response:
    """``httpx.request(method, url, ...)``, sent again while a short request deadline answers 408."""
    for _ in range(DEADLINE_RETRIES):
        reply = httpx.request(method, url, timeout=HANG_S, **request)
        if reply.status_code != 408:
            break
    return reply


def tiny_engine(num_blocks: int = 32, policy: AdmissionPolicy | None = None, **changes: object) -> EngineConfig:
    """A two-layer, width-32 engine: every test runs in milliseconds per step."""
    budget = KVBudget(num_blocks * pool_block_bytes(TINY_MODEL, TINY_LAYERS, TINY_BLOCK))
    config = EngineConfig(model=TINY_MODEL, layers=TINY_LAYERS, block_size=TINY_BLOCK, num_blocks=num_blocks,
                          policy=policy or budget, model_name="tiny", ttft_target_s=None)
    return replace(config, **changes)  # the queue bound by time is off unless a test asks for it, at a fixed rate


def tiny_chat(name: str = "tiny") -> ChatModel:
    """2 layers of width 64 with the trained model's vocabulary, tokenizer and chat template: the serving path is
    what the tests check, and this model answers in milliseconds per token."""
    from transformers import LlamaConfig

    from llm_models.llama.config import LlamaDecoderConfig
    from llm_models.llama.model import LlamaDecoder
    from llm_models.llama.tiny import TINY, tiny_reference
    from llm_models.llama.weights import trained

    config = LlamaConfig(**(TINY.to_dict() | {"vocab_size": 49_152, "max_position_embeddings": 256}))
    reference = tiny_reference(seed=0, config=config)
    model = LlamaDecoder(LlamaDecoderConfig.from_hf(reference.config), reference.state_dict())
    return ChatModel(model, trained().tokenizer, name)


# The trained-model tests' kernel timings (llm_models.serving.kernels): one row by an (in, out) copy, several by oneDNN's
# packed copy where it runs, on every host, so no test's tokens ride on what a timing picked (each pick is tested
# against the others in test_serving_kernels).
KERNEL_NS = dump_timings(ranking("in_out", "onednn"))


def tiny_chat_engine(chat: ChatModel, num_blocks: int = 64, policy: AdmissionPolicy | None = None,
                     **changes: object) -> EngineConfig:
    """The engine serving ``chat`` (tiny_chat) with a pool of ``num_blocks`` blocks of TINY_BLOCK positions."""
    config = chat.model.config
    budget = KVBudget(num_blocks * pool_block_bytes(config, config.layers, TINY_BLOCK))
    return replace(EngineConfig.for_chat(chat, TINY_BLOCK, num_blocks, policy or budget, ttft_target_s=None,
                                         kernel_ns=KERNEL_NS), **changes)


@asynccontextmanager
async def serve_in_loop(config: EngineConfig, timeout_s: float = HANG_S,
                        request_timeout_s: float = REQUEST_TIMEOUT_S,
                        stall_timeout_s: float = STALL_TIMEOUT_S, send_buffer_bytes: int = SEND_BUFFER_BYTES,
                        metrics: bool = True) -> AsyncIterator[tuple[str, object]]:
    """Start uvicorn on 127.0.0.1 with an ephemeral port inside the running loop; yield (base URL, app).

    The server is ready once uvicorn has started it, and stops when the block exits, giving replies still going
    out the servers' own grace (GRACE_S); ``timeout_s`` bounds the start and the stop, for a hang only.
    """
    app = create_app(config, request_timeout_s, stall_timeout_s, metrics)  # tests read /metrics unless told not to
    server = Server(bounded_config(app, 0, request_timeout_s, send_buffer_bytes, log_level="warning", lifespan="on",
                                   timeout_graceful_shutdown=GRACE_S))
    server.capture_signals = contextlib.nullcontext  # the test runner owns signals
    task = asyncio.get_running_loop().create_task(server.serve(), name="uvicorn-under-test")

    def started() -> bool:
        if task.done():
            task.result()  # raises the startup error
        return server.started

    try:
        await eventually(started, "the server under test to start", timeout_s)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{HOST}:{port}", app
    finally:
        server.should_exit = True
        await within(task, "the server under test to stop", timeout_s)


@contextmanager
def serve_in_thread(app: ASGIApp, timeout_s: float = HANG_S,
                    request_timeout_s: float = REQUEST_TIMEOUT_S) -> Iterator[str]:
    """Run ``app`` under uvicorn on 127.0.0.1 with an ephemeral port, on a thread and event loop of its own, its
    connections bounded as the servers' own commands bound them; yield its base URL once uvicorn has started it.
    The server stops when the block exits, as serve_in_loop's does; ``timeout_s`` bounds the start and the stop."""
    server = uvicorn.Server(bounded_config(app, 0, request_timeout_s, log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=GRACE_S))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]  # the test runner owns signals
    thread = threading.Thread(target=server.run, name="uvicorn-under-test", daemon=True)
    thread.start()

    def started() -> bool:
        if not thread.is_alive():
            raise RuntimeError("the server under test stopped before it started (its log says why)")
        return server.started

    try:
        until(started, "the server under test to start", timeout_s)
        yield f"http://{HOST}:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)
        if thread.is_alive():
            raise Hung("the server under test to stop", timeout_s)


@asynccontextmanager
async def unread_stream(app: ASGIApp, path: str, body: dict[str, Any],
                        state: dict[str, Any] | None = None) -> AsyncIterator[asyncio.Task[None]]:
    """A client that sends ``body`` to ``path`` of ``app`` (called directly, as ASGI) and then takes nothing of the
    reply and never leaves: every write of a reply's body waits forever, as on a socket whose reader has stopped
    reading. ``state`` is the connection's scope state (a stand-in transport). Yields the request's task; it is
    cancelled when the block exits."""
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await asyncio.Event().wait()  # the client never leaves either
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            await asyncio.Event().wait()  # the client reads nothing: no write completes

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json")], "client": (HOST, 1), "server": (HOST, 80),
             "state": dict(state or {})}
    task = asyncio.get_running_loop().create_task(app(scope, receive, send))  # type: ignore[arg-type]
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


SMALLEST_RECEIVE_BUFFER = 2048  # a client socket's SO_RCVBUF: the kernel raises it to its own minimum (about 2 KiB)


async def open_stream_socket(url: str, path: str, body: dict[str, Any]) -> socket.socket:
    """A real client socket on 127.0.0.1 whose receive buffer is as small as the kernel allows, that has sent
    ``body`` as a POST to ``path`` and read nothing yet (the caller reads, slowly, or never)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALLEST_RECEIVE_BUFFER)  # before connecting: the window
    client.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(client, (host, int(port)))
        payload = json.dumps(body).encode()
        await loop.sock_sendall(client, f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: "
                                        f"application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
    except BaseException:
        client.close()
        raise
    return client


@asynccontextmanager
async def never_reading_stream(url: str, path: str, body: dict[str, Any]) -> AsyncIterator[socket.socket]:
    """A client that sends ``body`` (a streamed request) and then takes not one byte of the reply, its socket kept
    open until the block exits: the reply backs up through the kernel's buffers into the server's writes."""
    client = await open_stream_socket(url, path, body)
    try:
        yield client
    finally:
        client.close()


async def read_slowly(url: str, path: str, body: dict[str, Any], chunk_bytes: int, pause_s: float) -> bytes:
    """A client that reads the streamed reply to ``body`` ``chunk_bytes`` at a time with ``pause_s`` between reads,
    to its end (the server closing, or the stream's ``data: [DONE]``); the bytes it read."""
    client = await open_stream_socket(url, path, body)
    loop, received = asyncio.get_running_loop(), bytearray()
    try:
        while b"data: [DONE]" not in received:
            part = await loop.sock_recv(client, chunk_bytes)
            if not part:
                break
            received += part
            await asyncio.sleep(pause_s)
    finally:
        client.close()
    return bytes(received)


# Events waiting in a request's queue that show its stream's writes are held up: each write takes one, and the loop
# runs them between steps, so a connection that takes what it is sent leaves at most a step's event or two queued.
BACKED_UP_EVENTS = 4


def stepping_until_stalled(scheduler: Scheduler, gate: StepGate, cancelled: int) -> Callable[[], bool]:
    """A condition for labkit.waiting.eventually that drives ``gate`` too: it lets decode steps through one at a
    time while some running stream still takes its events, holds them once every live stream has backed up (so no
    request can reach its last token before its stall is seen, however fast the host), and is true once
    ``cancelled`` requests have been cancelled. A stream backs up only if its reply outgrows the buffers."""

    def condition() -> bool:
        if scheduler.counters.cancelled >= cancelled:
            return True
        live = [request for request in scheduler.running if not request.client_gone]
        if not live or any(request.events.qsize() < BACKED_UP_EVENTS for request in live):
            gate.step_if_held()  # with none live, a step lets the loop retire the departed and admit the next
        return False

    return condition


class QuietLoopTestCase(unittest.IsolatedAsyncioTestCase):
    """Asyncio tests without debug mode's slow-callback warnings: a decode step is meant to take time."""

    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().set_debug(False)


def greedy_alone(scheduler: Scheduler, prompt: list[int], max_tokens: int) -> list[int]:
    """What the model generates for this prompt with no cache and no neighbours."""
    ids = list(prompt)
    for _ in range(max_tokens):
        ids.append(int(scheduler.model.reference_logits(ids).argmax()))
    return ids[len(prompt):]


class Unrunnable:
    """A served model (llm_models.serving.runner.ServedModel) that refuses to run: what ``schedule`` decides, it
    decides without the model."""

    kernels = None

    def __init__(self) -> None:
        self.config = TINY_MODEL

    def prefill(self, *args: object) -> NoReturn:
        raise AssertionError("schedule() called the model's prefill")

    def decode(self, *args: object) -> NoReturn:
        raise AssertionError("schedule() called the model's decode")

    def mixed(self, *args: object) -> NoReturn:
        raise AssertionError("schedule() called the model's mixed pass")


def ran(output: SchedulerOutput) -> None:
    """What the loop does once a pass's prefills return, for a test that calls ``schedule`` by hand: each request's
    prompt computed up to the end of its chunk (the whole prompt, without chunked prefill)."""
    for prefill in output.prefills:
        prefill.request.computed = prefill.start + prefill.tokens


async def drain(request: Request) -> tuple[list[int], Finished | Failed]:
    """Every token a request streams, and the event that ended it."""
    tokens = []
    while True:
        event = await request.events.get()
        if isinstance(event, Token):
            tokens.append(event.token_id)
        else:
            return tokens, event


class SchedulerTestCase(QuietLoopTestCase):
    """``start`` builds and starts a scheduler (tiny_engine with ``changes``); every one started is stopped after
    the test."""

    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        self.schedulers: list[Scheduler] = []

    async def asyncTearDown(self) -> None:
        for scheduler in self.schedulers:
            await scheduler.stop()

    def start(self, **changes: object) -> Scheduler:
        scheduler = tiny_engine(**changes).build()
        scheduler.start()
        self.schedulers.append(scheduler)
        return scheduler


class Gate:
    """Holds a piece of work until the test lets it through, so how far a request gets before the test acts
    depends on the test, never on the host's speed. Every wait is bounded by ``timeout_s``, a bound for a hang
    (labkit.waiting.HANG_S): a gate the test forgets to open lets the work through then, and the test's own
    bounded wait has named what it waited for by that time. Subclasses call ``wait`` where the work is held."""

    def __init__(self, timeout_s: float = HANG_S) -> None:
        self.timeout_s = timeout_s
        self._permits = threading.Semaphore(0)
        self._open = threading.Event()
        self._held = threading.Event()  # something is waiting at the gate
        self._count = threading.Lock()
        self._released = self._passed = 0  # steps let through, and those that have gone through

    def wait(self) -> None:
        """Block the calling (worker) thread until a step is let through or the gate opens."""
        if not self._open.is_set():
            self._held.set()
            self._permits.acquire(timeout=self.timeout_s)
            with self._count:
                self._passed += 1
            self._held.clear()

    @property
    def holding(self) -> bool:
        """Something is waiting at the gate right now."""
        return self._held.is_set()

    def step(self, count: int = 1) -> None:
        """Let ``count`` more through."""
        with self._count:
            self._released += count
        self._permits.release(count)

    def step_if_held(self) -> bool:
        """Let one more through if something waits at the gate and every step let through has gone (a test
        polling this steps one at a time, never piling up steps while the worker is slow to wake); True if
        it did."""
        with self._count:
            if not self._held.is_set() or self._released != self._passed:
                return False
            self._released += 1
        self._permits.release(1)
        return True

    def open(self) -> None:
        """Let everything through from now on."""
        self._open.set()
        self._permits.release(1)


class StepGate(Gate):
    """Holds a model's decode steps until the test lets them run (``step``, ``open``). Prefills pass freely, and so
    do chunked prefill's mixed passes (``mixed``), decode rows and all."""

    def __init__(self, model: ServedModel, timeout_s: float = HANG_S) -> None:
        super().__init__(timeout_s)
        self.model = model
        self._decode = model.decode
        model.decode = self._gated  # type: ignore[method-assign]  # the scheduler looks the method up per step

    def _gated(self, *args: object) -> object:
        self.wait()
        return self._decode(*args)

    def __enter__(self) -> StepGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.open()
        self.model.decode = self._decode  # type: ignore[method-assign]
