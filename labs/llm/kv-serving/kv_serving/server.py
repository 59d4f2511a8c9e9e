"""The HTTP face of the scheduler: FastAPI on uvicorn, bound to 127.0.0.1 only.

    python -m kv_serving.server --port 8000            # byte budget = the whole pool
    python -m kv_serving.server --max-running 8        # admission by request count instead

``POST /v1/completions`` (OpenAI subset, streaming or not), ``GET /v1/models``,
``GET /health``, and ``GET /metrics`` when started with ``--metrics``. A client that disconnects mid-stream cancels its request
(unless started with ``--ignore-disconnects``, the benchmark's baseline).
SIGINT (Ctrl-C) or SIGTERM first fails every queued and running request, so
each client gets an answer, then stops the server. Slow or oversized requests are bounded by
kv_serving.bounds (408 and 413).
"""

# ruff: noqa: E402  (the imports after the first handlers are installed come late on purpose)

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any


def _stop_while_not_serving(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM while the server imports and builds its model, before uvicorn's handlers take over
    (or after they are gone): no request is open, so stop at once, in one line, as a benchmark does."""
    name = signal.Signals(signum).name
    print(f"kv_serving.server: interrupted ({name}) while not serving; no request was open", file=sys.stderr,
          flush=True)
    os._exit(128 + signum)


if __name__ == "__main__":  # before the imports below: an interrupt while torch loads is one line, not a traceback
    for _signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signum, _stop_while_not_serving)

import argparse
import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus

import torch
import uvicorn
from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope, Send

from labkit import huge_pages
from labkit.exit import exit_now
from llm_models.cache_formats import FORMAT_NAMES, CacheFormat, block_bytes
from llm_models.llama.kinds import WEIGHTS
from llm_models.serving.admission import AdmissionPolicy, KVBudget
from llm_models.serving.dtypes import DTYPES
from llm_models.serving.engine import SERVING_LAYERS, EngineConfig, policy_from, serving_model
from llm_models.serving.kernels import parse_timings
from llm_models.serving.pool import pool_block_bytes
from llm_models.serving.prefill_bound import TTFT_TARGET_S
from llm_models.serving.prefix import INDEXES
from llm_models.serving.refusals import RequestRefused
from llm_models.serving.request import Failed, Finished, Request, Token
from llm_models.serving.scheduler import ORDERS, Scheduler
from llm_models.serving.text import TextStream
from llm_models.toy.config import ModelConfig

from .bounds import (
    FLOW,
    REQUEST_TIMEOUT_S,
    STALL_TIMEOUT_S,
    TRANSPORT,
    BodyTooLarge,
    BodyTooSlow,
    bounded_config,
    read_body,
    stalls,
    unsent_bytes,
)
from .protocol import (
    HTTP_STATUS,
    BadRequest,
    CompletionRequest,
    TokenReplies,
    error_body,
    max_body_bytes,
    parse_body,
    sse,
    usage,
)
from .text_protocol import TextReplies, TextRequest, parse_chat, parse_completion

if TYPE_CHECKING:  # a type only: transformers is imported by the trained model's path alone
    from llm_models.llama.config import LlamaDecoderConfig

Parsed = CompletionRequest | TextRequest

GRACE_S = 3  # after every request has failed, how long uvicorn waits for replies still being sent or bodies read
STEP_GRACE_S = 60  # on a signal, how long the model call under way may take to return before the replies go out
SHUTTING_DOWN = "the server is shutting down"


def request_usage(request: Request) -> dict[str, Any]:
    """OpenAI's usage for one request: every generated token counted, its own cache hit named."""
    return usage(len(request.prompt), len(request.output), request.cached_tokens)
MODELS = ("random", "smollm2")


class Server(uvicorn.Server):
    """uvicorn, but on SIGINT or SIGTERM every request is answered before the connections close.

    Plain uvicorn stops accepting, waits up to its graceful timeout for open streams (which would run on to
    max_tokens), then cancels them mid-reply. Here the scheduler first fails every queued and running request:
    each stream ends with an error event and ``data: [DONE]``, each plain request gets a 503, and the wait ends
    once those replies are out. A running request fails when the model call under way returns (a long prompt's
    prefill takes seconds): uvicorn's grace for the replies starts after that, not during it (STEP_GRACE_S bounds
    the call). Either signal then exits with code 0: the server did what the signal asked.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn's own handler also records the signal to raise it again once the server has stopped: after a
        # clean shutdown, SIGTERM would then end the process as killed (-15) and SIGINT raise KeyboardInterrupt.
        # Here neither is raised again (exit code 0); a second Ctrl-C still skips the graceful wait.
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        scheduler = getattr(getattr(self.config.app, "state", None), "scheduler", None)
        if isinstance(scheduler, Scheduler):
            scheduler.fail_all(SHUTTING_DOWN)
            deadline = time.monotonic() + STEP_GRACE_S
            # a second Ctrl-C (force_exit) stops this wait too
            while not self.force_exit and time.monotonic() < deadline and not await scheduler.settled(0.1):
                pass
        await super().shutdown(sockets)
        if self.force_exit:  # uvicorn skips the lifespan on a forced exit; stopping the scheduler is quick
            await self.lifespan.shutdown()


class ClientStalled(Exception):
    """A stream's client took no byte of it for the stall timeout (kv_serving.bounds.StallWatch)."""


class EventStream(StreamingResponse):
    """A text/event-stream reply that ends quietly if uvicorn cancels it at shutdown, and that gives up on a client
    taking nothing: while a write waits, the bytes its client has not taken are watched (kv_serving.bounds says
    why progress and not a completed write is the measure); when none has been taken for ``stall_timeout_s``,
    ``on_stall`` cancels the request, a last error event and the end of the body go out behind what the client
    has not read, and the connection closes once it takes them (or is aborted after another timeout without)."""

    def __init__(self, content: AsyncIterator[str], stall_timeout_s: float, on_stall: Callable[[str], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.stall_timeout_s, self.on_stall = stall_timeout_s, on_stall

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.get("state", {})
        transport, flow = state.get(TRANSPORT), state.get(FLOW)

        def unsent() -> int | None:
            return None if transport is None else unsent_bytes(transport)

        async def bounded(message: Message) -> None:
            if flow is not None and not flow.write_paused:  # uvicorn writes at once: nothing to wait for or watch
                await send(message)
                return
            sending = asyncio.ensure_future(send(message))

            async def sent(poll_s: float) -> bool:
                return bool((await asyncio.wait((sending,), timeout=poll_s))[0])

            if await stalls(self.stall_timeout_s, unsent, sent):
                sending.cancel()  # uvicorn waits for room before it writes: the message was not written
                await asyncio.gather(sending, return_exceptions=True)
                raise ClientStalled
            sending.result()

        try:
            await super().__call__(scope, receive, bounded)
        except asyncio.CancelledError:  # uvicorn gave up on a reply at shutdown (a client not reading): just close
            pass
        except ClientStalled:
            why = f"the client took nothing of its stream for {self.stall_timeout_s:g} s"
            self.on_stall(why)
            if transport is None or flow is None:  # an in-process ASGI call (a test's) has no connection
                return
            # NOTE: the last event and the body's end skip uvicorn's wait for room (flow), so the reply ends as HTTP
            # says (chunked, complete) without waiting on the client; the transport holds them behind the rest
            flow.resume_writing()
            last = sse(error_body(why, "client_stalled", "server_error")) + sse("[DONE]")
            await send({"type": "http.response.body", "body": last.encode(), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            transport.close()  # sends what is buffered, then closes
            closing = asyncio.ensure_future(abort_when_stalled(transport, self.stall_timeout_s))
            CLOSING.add(closing)
            closing.add_done_callback(CLOSING.discard)


# Connections closing behind a cut stream, each watched until its client has taken what is left or it is aborted.
# NOTE: the event loop keeps only a weak reference to a task; one referenced nowhere else may be collected mid-watch.
CLOSING: set[asyncio.Future[None]] = set()


async def abort_when_stalled(transport: asyncio.BaseTransport, timeout_s: float) -> None:
    """Abort a closing connection whose client takes nothing of what is left for ``timeout_s``."""

    def closed() -> bool:  # the client has taken everything, or the connection is gone
        return not unsent_bytes(transport) or transport.get_extra_info("socket") is None

    async def closed_after(poll_s: float) -> bool:
        await asyncio.sleep(poll_s)
        return closed()

    if not closed() and await stalls(timeout_s, lambda: unsent_bytes(transport), closed_after):
        transport.abort()


def create_app(config: EngineConfig, request_timeout_s: float = REQUEST_TIMEOUT_S,
               stall_timeout_s: float = STALL_TIMEOUT_S, metrics: bool = False, settle_pages: bool = False) -> FastAPI:
    """The app; ``metrics`` serves GET /metrics (the server's --metrics: off unless the operator opts in);
    ``settle_pages`` moves the process's memory onto 2 MiB pages once the model and pool are built (the server
    command's: one server per process)."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        scheduler = config.build()
        app.state.scheduler = scheduler
        scheduler.start()
        await scheduler.seeded()  # uvicorn listens only once this returns
        # NOTE: the weights and the pool were allocated asking for 2 MiB pages, but the kernel falls back to 4 KiB
        # ones silently when memory is fragmented, and a step over fallen-back weights ran a tenth slower: move
        # them now, before the first request (labkit.huge_pages). Settling walks the whole process, so only the
        # server command does it: a process running several servers in threads (the tests, the benchmark's quick
        # mode, whose timings mean nothing) settled all its memory once per server, 42 times in 104 s in one run.
        if settle_pages:
            huge_pages.settle()
        try:
            yield
        finally:
            await scheduler.stop()

    app = FastAPI(title="kv-serving lab", lifespan=lifespan)
    body_limit = max_body_bytes(config.model.max_positions)

    @app.exception_handler(HTTPException)
    async def http_error(http: HTTPRequest, error: HTTPException) -> JSONResponse:
        code = HTTPStatus(error.status_code).phrase.lower().replace(" ", "_").replace("-", "_")
        return JSONResponse(error_body(f"{error.detail}: {http.method} {http.url.path}", code),
                            status_code=error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def server_error(http: HTTPRequest, error: Exception) -> JSONResponse:  # uvicorn still logs the traceback
        return JSONResponse(error_body(f"internal error: {type(error).__name__}: {error}", "internal_error",
                                       "server_error"), status_code=500)

    @app.get("/health", response_model=None)
    async def health(http: HTTPRequest) -> dict[str, str] | JSONResponse:
        problem = http.app.state.scheduler.health()
        if problem is None:
            return {"status": "ok"}
        return JSONResponse({"status": "unavailable", "reason": problem}, status_code=503)

    @app.get("/metrics", response_model=None)
    async def metrics_json(http: HTTPRequest) -> dict[str, object] | JSONResponse:
        if not metrics:  # NOTE: its counters move with other clients' cache hits (--metrics says why it is opt-in)
            return JSONResponse(error_body("GET /metrics is off on this server: start it with --metrics to serve "
                                           "it", "not_found"), status_code=404)
        return http.app.state.scheduler.metrics()

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        return {"object": "list", "data": [{"id": config.model_name, "object": "model", "created": 0,
                                            "owned_by": "ml-systems-labs"}]}

    async def read_json(http: HTTPRequest) -> bytes | Response:
        """The request body, or the reply that refuses it (media type, size, deadline, a client gone)."""
        media_type = http.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json":
            return JSONResponse(error_body(f"content-type must be application/json, got {media_type or 'none'}",
                                           "unsupported_media_type"), status_code=415)
        charset = next((part.split("=", 1)[1].strip().strip('"').lower()
                        for part in http.headers.get("content-type", "").split(";")[1:]
                        if part.strip().lower().startswith("charset=")), "utf-8")
        if charset not in ("utf-8", "utf8"):  # RFC 8259: JSON exchanged between systems is UTF-8
            return JSONResponse(error_body(f"content-type charset={charset}: a JSON body must be UTF-8 (RFC 8259)",
                                           "unsupported_media_type"), status_code=415)
        try:
            return await read_body(http, body_limit, config.model.max_positions, request_timeout_s)
        except ClientDisconnect:  # gone before the body arrived: nothing was queued, nobody to answer
            return Response(status_code=499)
        except BodyTooLarge as error:  # uvicorn discards the rest as it arrives, so the client reads this reply
            return JSONResponse(error_body(str(error), "request_too_large"), status_code=413)
        except BodyTooSlow as error:  # the rest of the body is not waited for: the connection closes
            return JSONResponse(error_body(str(error), "request_timeout"), status_code=408,
                                headers={"Connection": "close"})
        except asyncio.CancelledError:  # a body still arriving when uvicorn gave up waiting at shutdown
            return JSONResponse(error_body(SHUTTING_DOWN, "server_shutting_down", "server_error"), status_code=503)

    async def serve(http: HTTPRequest, parse: Callable[[bytes], Parsed]) -> Response:
        """Read, parse, queue, then stream or wait: the same for every endpoint and either model."""
        scheduler: Scheduler = http.app.state.scheduler
        raw = await read_json(http)
        if isinstance(raw, Response):
            return raw
        try:
            # a text model's parse tokenizes: off the event loop, so every other request and stream goes on
            body = await asyncio.to_thread(parse, raw) if config.chat is not None else parse(raw)
            if body.model is not None and body.model != config.model_name:
                return JSONResponse(error_body(f"model {body.model!r} is not served here; GET /v1/models lists "
                                               f"{config.model_name!r}", "model_not_found", param="model"),
                                    status_code=404)
            request = scheduler.submit(*submission(body))
        except BadRequest as error:
            return JSONResponse(error_body(str(error), error.code, param=error.param), status_code=400)
        except RequestRefused as error:
            status = HTTP_STATUS[error.refusal]
            headers = {"Retry-After": str(error.retry_after_s)} if status == 503 else None
            kind = "server_overloaded" if status == 503 else "invalid_request_error"
            return JSONResponse(error_body(str(error), error.refusal.value, kind, error.param), status_code=status,
                                headers=headers)
        replies = replies_for(body, request)
        if body.stream:
            return EventStream(stream_events(scheduler, request, replies), stall_timeout_s,
                               lambda why: scheduler.disconnect(request, why))
        try:
            return await complete(http, scheduler, request, replies)
        except asyncio.CancelledError:  # uvicorn gave up waiting at shutdown; the request is already disconnected
            return JSONResponse(error_body(SHUTTING_DOWN, "server_shutting_down", "server_error"), status_code=503)

    def submission(body: Parsed) -> tuple[list[int], int, TextStream | None, str, str | None]:
        if isinstance(body, CompletionRequest):
            return body.prompt, body.max_tokens, None, "prompt", body.cache_salt
        assert config.chat is not None
        text = TextStream(config.chat.tokenizer, config.chat.stop_ids, body.stop)
        return body.prompt_ids, body.max_tokens, text, body.prompt_field, body.cache_salt

    def replies_for(body: Parsed, request: Request) -> TokenReplies | TextReplies:
        if isinstance(body, CompletionRequest):
            return TokenReplies(request.request_id, request.created, config.model_name, body.include_usage)
        chat_id = request.request_id.replace("cmpl-", "chatcmpl-", 1) if body.chat else request.request_id
        return TextReplies(chat_id, request.created, config.model_name, body.include_usage, body.chat)

    if config.chat is None:
        @app.post("/v1/completions", response_model=None)
        async def completions(http: HTTPRequest) -> Response:
            return await serve(http, parse_body)
    else:
        chat = config.chat

        @app.post("/v1/completions", response_model=None)
        async def text_completions(http: HTTPRequest) -> Response:
            return await serve(http, lambda raw: parse_completion(raw, chat))

        @app.post("/v1/chat/completions", response_model=None)
        async def chat_completions(http: HTTPRequest) -> Response:
            return await serve(http, lambda raw: parse_chat(raw, chat))

    return app


async def stream_events(scheduler: Scheduler, request: Request,
                        replies: TokenReplies | TextReplies) -> AsyncIterator[str]:
    """SSE chunks, one per token; if the client leaves, Starlette cancels this generator mid-await."""
    try:
        for opening in replies.opening():
            yield opening
        while True:
            event = await request.events.get()
            if isinstance(event, Token):
                yield replies.token(event.token_id, event.text, event.listed)
            elif isinstance(event, Finished):
                yield replies.finish(event.reason)
                if replies.include_usage:
                    yield replies.usage(request_usage(request))
                yield sse("[DONE]")
                return
            else:
                yield sse(error_body(event.message, event.refusal.value, "server_error"))
                yield sse("[DONE]")
                return
    finally:
        scheduler.disconnect(request)  # a no-op once the request is done


async def complete(http: HTTPRequest, scheduler: Scheduler, request: Request,
                   replies: TokenReplies | TextReplies) -> JSONResponse:
    """Wait for the whole completion, watching for the client leaving meanwhile."""

    async def client_left() -> None:
        while (await http.receive())["type"] != "http.disconnect":
            pass

    async def outcome() -> Finished | Failed:
        while True:
            event = await request.events.get()
            if not isinstance(event, Token):
                return event

    finish = asyncio.ensure_future(outcome())
    watch = asyncio.ensure_future(client_left())
    try:
        await asyncio.wait((finish, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (finish, watch):
            task.cancel()
        await asyncio.gather(finish, watch, return_exceptions=True)
        if not finish.done() or finish.cancelled() or finish.exception() is not None:
            scheduler.disconnect(request)
    result = finish.result() if finish.done() and not finish.cancelled() else None
    if isinstance(result, Finished):
        text = None if request.text is None else request.text.text
        return JSONResponse(replies.body(request.reply_ids, text, request_usage(request), result.reason))
    scheduler.disconnect(request)
    if isinstance(result, Failed):
        return JSONResponse(error_body(result.message, result.refusal.value, "server_error"),
                            status_code=HTTP_STATUS[result.refusal])
    return JSONResponse(error_body("the client disconnected", "request_failed", "server_error"), status_code=503)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the lab's model on 127.0.0.1 (OpenAI completions subset; "
                                                 "chat completions too for the trained model).")
    add = parser.add_argument
    add("--model", choices=MODELS, default="random",
        help="random: the small random model the load experiments sweep (token ids in and out); smollm2: the "
             "trained SmolLM2-135M-Instruct, text in and out (default: %(default)s)")
    add("--port", type=int, default=8000, help="TCP port on 127.0.0.1; 0 picks a free one (default: 8000)")
    add("--num-blocks", type=int, default=256, help="blocks in the KV pool (default: 256)")
    add("--block-size", type=int, default=16, help="positions per block (default: 16)")
    add("--max-running", type=int, default=None, help="admit by request count (instead of by KV bytes)")
    add("--kv-budget-bytes", type=int, default=None, help="admit by KV bytes (default: the whole pool)")
    add("--kv-format", choices=FORMAT_NAMES, default=None,
        help="price the KV budget's blocks in this cache format's bytes (kv_quant: float32, bfloat16, int8, int4, "
             "kivi, q8_0, q4_0, fp8) instead of the pool's own; with no --kv-budget-bytes, the budget is the whole "
             "pool priced so")
    add("--max-waiting", type=int, default=256, help="waiting-queue length beyond which requests get 503")
    add("--ttft-target-s", type=float, default=TTFT_TARGET_S,
        help="refuse (503, with the seconds until it would fit) a request whose first token would come after this "
             "many seconds, pricing the prefills ahead of it and its own at the cost the server measures (per call "
             "and per token) and any wait for running requests to free KV blocks, and refuse (400) a prompt whose "
             "own prefill takes longer; 0: no such bound "
             "(default: %(default)s)")
    add("--ignore-disconnects", action="store_true", help="keep decoding after clients leave (a baseline)")
    add("--metrics", action="store_true",
        help="serve GET /metrics: pool, queue, counters and the prefix cache's queries and hits. Off by default: "
             "with prefix caching, a hit counter read around one request tells any client whether another's "
             "prompt is cached")
    add("--prefix-caching", choices=("off", *INDEXES), default="off",
        help="keep full blocks' keys and values after their requests end and reuse them for prompts that start with "
             "the same tokens: hash (vLLM's chained block hashes) or radix (SGLang's tree of pages); each reply's "
             "usage.prompt_tokens_details.cached_tokens says how much of its own prompt was found "
             "(default: %(default)s)")
    add("--schedule", choices=ORDERS, default="fcfs",
        help="the waiting queue's order: fcfs, or longest-prefix (the request with the longest cached prefix "
             "first; needs --prefix-caching) (default: %(default)s)")
    add("--threads", type=int, default=1, help="torch threads of the decode worker (default: 1)")
    add("--kernel-ns", default=None,
        help="the trained model's kernel timings as JSON (kind -> rows -> kernel -> ns, as /metrics kernels lists "
             "them): its kernels are chosen by these instead of timed at start (default: timed)")
    add("--dtype", choices=DTYPES, default="float32", help="the model's dtype (default: %(default)s)")
    add("--weights", choices=WEIGHTS, default="float32",
        help="the trained model's matrices: float32, or int8 codes with one scale per row, which its decode steps "
             "read (a quarter of the bytes; the decode lab's ours-int8 step, whose page gives their quality); "
             "prefill runs on the float32 matrices the codes stand for, and so do the decode rows that ride in a "
             "--prefill-chunk pass (default: %(default)s)")
    add("--prefill-chunk", type=int, default=None, metavar="TOKENS",
        help="chunked prefill: at most TOKENS prompt tokens prefilled a pass, in the same forward pass as the "
             "running requests' decode rows, a multiple of --block-size, so a long prompt does not stop the running "
             "streams for its whole prefill (default: each prompt whole)")
    add("--no-settle-pages", action="store_true",
        help="start without moving the model's and pool's memory onto 2 MiB pages (labkit.huge_pages): a trained "
             "server listens seconds sooner, but a step over weights left on 4 KiB pages can run a tenth slower")
    add("--request-timeout-s", type=float, default=REQUEST_TIMEOUT_S,
        help="seconds a request's headers (from the connection's accept, or a later request's first byte), then its "
             "body, may take to arrive before a 408 "
             "(default: %(default)s)")
    add("--stall-timeout-s", type=float, default=STALL_TIMEOUT_S,
        help="seconds a stream's client may take no byte of it before its request is cancelled, its blocks freed, "
             "a last error event sent and its connection closed; a client whose socket takes bytes at least once "
             "in that time is never cut (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0 <= args.ttft_target_s < float("inf"):
        parser.error(f"--ttft-target-s must be 0 (no bound) or a finite number of seconds, got {args.ttft_target_s}")
    for name in ("request_timeout_s", "stall_timeout_s"):
        if not 0 < getattr(args, name) < float("inf"):
            parser.error(f"--{name.replace('_', '-')} must be a finite number of seconds above 0, "
                         f"got {getattr(args, name)}")
    for name in ("num_blocks", "block_size", "max_waiting", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.prefill_chunk is not None and (args.prefill_chunk < args.block_size or args.prefill_chunk % args.block_size):
        parser.error(f"--prefill-chunk must be a positive multiple of --block-size {args.block_size}, "
                     f"got {args.prefill_chunk}")
    if args.kernel_ns is not None:
        try:
            parse_timings(args.kernel_ns)
        except ValueError as error:
            parser.error(str(error))
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0 to 65535, got {args.port}")
    if args.schedule != "fcfs" and args.prefix_caching == "off":
        parser.error(f"--schedule {args.schedule} ranks requests by their cached prefix: it needs --prefix-caching "
                     f"hash or radix")
    if args.weights != "float32" and (args.model != "smollm2" or args.dtype != "float32"):
        parser.error(f"--weights {args.weights} is the trained model's in float32: use --model smollm2 --dtype float32, "
                     f"got --model {args.model} --dtype {args.dtype}")
    if args.kv_format is not None and args.max_running is not None:
        parser.error(f"--kv-format {args.kv_format} prices a KV budget; --max-running {args.max_running} admits by "
                     f"count instead")
    shape, layers = served_shape(args.model, args.dtype)
    needed = args.num_blocks * pool_block_bytes(shape, layers, args.block_size)
    available = available_memory()
    if available is not None and needed > available:
        parser.error(f"--num-blocks {args.num_blocks} of --block-size {args.block_size} needs {needed} bytes "
                     f"({needed / 2**30:.1f} GiB) of KV memory; this machine has {available} bytes "
                     f"({available / 2**30:.1f} GiB) available")
    return args


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation: Linux's MemAvailable, else free pages; None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def served_shape(model: str, dtype: str) -> tuple[ModelConfig | LlamaDecoderConfig, int]:
    """The served model's config and layers, known before its weights load (for the pool's size)."""
    if model == "smollm2":
        from llm_models.llama.config import LlamaDecoderConfig  # transformers: imported for this model only

        config = LlamaDecoderConfig(dtype=getattr(torch, dtype))  # the defaults are SmolLM2-135M's shape
        return config, config.layers
    return serving_model(dtype), SERVING_LAYERS


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine the arguments describe; for the trained model this loads its weights (seconds)."""
    shape, layers = served_shape(args.model, args.dtype)
    policy: AdmissionPolicy
    if args.max_running is not None:
        policy = policy_from(args.max_running, args.kv_budget_bytes)
    else:
        cache_format = None if args.kv_format is None else CacheFormat(args.kv_format)
        budget = args.kv_budget_bytes
        if budget is None:  # the whole pool, priced in the format's bytes if one is named
            pool_block = pool_block_bytes(shape, layers, args.block_size)
            block = pool_block if cache_format is None else block_bytes(
                cache_format, layers, args.block_size, shape.kv_heads, shape.head_dim)
            budget = args.num_blocks * block
        policy = KVBudget(budget, cache_format)
    options = dict(block_size=args.block_size, num_blocks=args.num_blocks, policy=policy,
                   max_waiting=args.max_waiting, ttft_target_s=args.ttft_target_s or None,
                   honor_disconnect=not args.ignore_disconnects, threads=args.threads,
                   prefix_index=None if args.prefix_caching == "off" else args.prefix_caching, order=args.schedule,
                   kernel_ns=args.kernel_ns, weights=args.weights, prefill_chunk=args.prefill_chunk)
    if args.model == "smollm2":
        from llm_models.llama.generate import smollm2

        config = EngineConfig.for_chat(smollm2(getattr(torch, args.dtype)), **options)  # type: ignore[arg-type]
    else:
        config = EngineConfig(model=shape, **options)  # type: ignore[arg-type]
    return config


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = engine_config(args)
    except ValueError as error:
        print(f"kv_serving.server: {error}", file=sys.stderr)
        return 2
    # SIGINT or SIGTERM: every request fails with an answer, uvicorn stops accepting and waits (GRACE_S at most)
    # for those answers to go out, the lifespan stops the scheduler and returns every block, and the exit code is
    # 0 for either signal; a second Ctrl-C skips the wait
    app = create_app(config, args.request_timeout_s, args.stall_timeout_s, args.metrics,
                     settle_pages=not args.no_settle_pages)
    Server(bounded_config(app, args.port, args.request_timeout_s, log_level="info",
                          timeout_graceful_shutdown=GRACE_S)).run()
    return 0


if __name__ == "__main__":
    exit_now(main())  # no interpreter shutdown after the last line, for a signal to land in (labkit.exit)
