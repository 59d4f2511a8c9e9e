"""The HTTP face of the scheduler: FastAPI on uvicorn, bound to 127.0.0.1 only.

    python -m kv_serving.server --port 8000            # byte budget = the whole pool
    python -m kv_serving.server --max-running 8        # admission by request count instead

``POST /v1/completions`` (OpenAI subset, streaming or not), ``GET /health``,
``GET /metrics``. A client that disconnects mid-stream cancels its request
(unless started with ``--ignore-disconnects``, the benchmark's baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from .engine import EngineConfig, policy_from
from .pool import block_bytes
from .protocol import BadRequest, chunk, completion_body, error_body, parse_body, sse
from .request import Failed, Finished, Request, Token
from .scheduler import RequestRefused, Scheduler

HOST = "127.0.0.1"  # never another interface: this is a lab server with no authentication
GRACE_S = 3


def create_app(config: EngineConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        scheduler = config.build()
        app.state.scheduler = scheduler
        scheduler.start()
        try:
            yield
        finally:
            await scheduler.stop()

    app = FastAPI(title="kv-serving lab", lifespan=lifespan)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics(http: HTTPRequest) -> dict[str, object]:
        return http.app.state.scheduler.metrics()

    @app.post("/v1/completions", response_model=None)
    async def completions(http: HTTPRequest) -> Response:
        scheduler: Scheduler = http.app.state.scheduler
        try:
            raw = await http.body()
        except ClientDisconnect:  # gone before the body arrived: nothing was queued, nobody to answer
            return Response(status_code=499)
        try:
            body = parse_body(raw)
            request = scheduler.submit(body.prompt, body.max_tokens)
        except BadRequest as error:
            return JSONResponse(error_body(str(error), error.code), status_code=400)
        except RequestRefused as error:
            headers = {"Retry-After": "1"} if error.status == 503 else None
            kind = "server_overloaded" if error.status == 503 else "invalid_request_error"
            return JSONResponse(error_body(str(error), error.code, kind), status_code=error.status,
                                headers=headers)
        model = body.model or config.model_name
        if body.stream:
            return StreamingResponse(stream_events(scheduler, request, model), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await complete(http, scheduler, request, model)

    return app


async def stream_events(scheduler: Scheduler, request: Request, model: str) -> AsyncIterator[str]:
    """SSE chunks, one per token; if the client leaves, Starlette cancels this generator mid-await."""
    try:
        while True:
            event = await request.events.get()
            if isinstance(event, Token):
                yield chunk(request.request_id, model, [event.token_id], None)
            elif isinstance(event, Finished):
                yield chunk(request.request_id, model, [], event.reason)
                yield sse("[DONE]")
                return
            else:
                yield sse(error_body(event.message, "request_failed", "server_error"))
                yield sse("[DONE]")
                return
    finally:
        scheduler.disconnect(request)  # a no-op once the request is done


async def complete(http: HTTPRequest, scheduler: Scheduler, request: Request, model: str) -> JSONResponse:
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
        return JSONResponse(completion_body(request.request_id, model, request.output, len(request.prompt),
                                            result.reason))
    scheduler.disconnect(request)
    message = result.message if isinstance(result, Failed) else "the client disconnected"
    return JSONResponse(error_body(message, "request_failed", "server_error"), status_code=503)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the lab's model on 127.0.0.1 (OpenAI completions subset).")
    add = parser.add_argument
    add("--port", type=int, default=8000, help="TCP port on 127.0.0.1; 0 picks a free one (default: 8000)")
    add("--num-blocks", type=int, default=256, help="blocks in the KV pool (default: 256)")
    add("--block-size", type=int, default=16, help="positions per block (default: 16)")
    add("--max-running", type=int, default=None, help="admit by request count (instead of by KV bytes)")
    add("--kv-budget-bytes", type=int, default=None, help="admit by KV bytes (default: the whole pool)")
    add("--max-waiting", type=int, default=256, help="waiting-queue length beyond which requests get 503")
    add("--ignore-disconnects", action="store_true", help="keep decoding after clients leave (a baseline)")
    add("--threads", type=int, default=1, help="torch threads of the decode worker (default: 1)")
    args = parser.parse_args(argv)
    for name in ("num_blocks", "block_size", "max_waiting", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0 to 65535, got {args.port}")
    return args


def engine_config(args: argparse.Namespace) -> EngineConfig:
    base = EngineConfig()
    budget = args.kv_budget_bytes
    if budget is None and args.max_running is None:
        budget = args.num_blocks * block_bytes(base.model, base.layers, args.block_size)
    return EngineConfig(block_size=args.block_size, num_blocks=args.num_blocks,
                        policy=policy_from(args.max_running, budget), max_waiting=args.max_waiting,
                        honor_disconnect=not args.ignore_disconnects, threads=args.threads)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = engine_config(args)
    except ValueError as error:
        print(f"kv_serving.server: {error}", file=sys.stderr)
        return 2
    # uvicorn handles SIGINT/SIGTERM: stop accepting, give open streams GRACE_S seconds, then cancel them,
    # and let the lifespan stop the scheduler and return every block; a second Ctrl-C forces the exit
    uvicorn.run(create_app(config), host=HOST, port=args.port, log_level="info", access_log=False,
                timeout_graceful_shutdown=GRACE_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
