"""Real text from the trained model: ``GET /v1/models``, ``POST /v1/chat/completions`` and ``POST /v1/completions``.

    python -m kv_serving.trained --port 8000      # or: make lab-server MODEL=smollm2

The load experiments keep the lab's small random model (``kv_serving.server``): its continuous batching and
block pool are what they measure, and a 30-layer model would make each run minutes long on 2 cores. This server
runs the trained model on the kv-cache lab's Llama decoder, one request at a time (an asyncio lock; the decode
loop runs in a worker thread so the event loop keeps answering), greedy with the KV cache. A chat request goes
through the model's chat template; a completion's ``prompt`` is a string or a list of token ids. Responses carry
text; errors are OpenAI error objects naming the field at fault. Bound to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse

from llm_models.llama.generate import ChatModel

from ..bounds import REQUEST_TIMEOUT_S, bounded_config
from ..protocol import error_body, sse, usage

DEFAULT_MAX_TOKENS = 128
ROLES = ("system", "user", "assistant")  # the roles SmolLM2's template renders (it prints any role name verbatim)


class BadRequest(ValueError):
    def __init__(self, message: str, param: str | None, code: str = "invalid_request", status: int = 400) -> None:
        super().__init__(message)
        self.param, self.code, self.status = param, code, status


@dataclass(frozen=True)
class Parsed:
    prompt_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool


def _object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(f"the request body is not valid JSON: {error}", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}", None)
    return body


def _common(body: dict[str, Any], chat: ChatModel, prompt_ids: list[int]) -> Parsed:
    model = body.get("model")
    if model is not None and model != chat.name:
        raise BadRequest(f"model {model!r} is not served here; GET /v1/models lists {chat.name!r}", "model",
                         "model_not_found", 404)
    limit = body.get("max_completion_tokens", body.get("max_tokens", DEFAULT_MAX_TOKENS))
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise BadRequest(f"{name} must be a positive integer, got {json.dumps(limit)}", name)
    room = chat.model.config.max_positions - len(prompt_ids)
    if limit > room:
        raise BadRequest(f"{len(prompt_ids)} prompt tokens + {name} {limit} = {len(prompt_ids) + limit}, beyond the "
                         f"model's {chat.model.config.max_positions} positions", name)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"stream must be true or false, got {json.dumps(stream)}", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("stream_options must be an object", "stream_options")
    return Parsed(prompt_ids, limit, stream, bool(options.get("include_usage", False)))


def parse_chat_body(raw: bytes, chat: ChatModel) -> Parsed:
    """A chat request: ``messages`` through the model's chat template, the assistant's turn opened."""
    body = _object(raw)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of {role, content} objects, got "
                         f"{json.dumps(messages)[:60]}", "messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(f"messages[{index}] must be an object, got {type(message).__name__}",
                             f"messages[{index}]")
        if message.get("role") not in ROLES:
            raise BadRequest(f"messages[{index}].role must be one of {', '.join(ROLES)}, got "
                             f"{json.dumps(message.get('role'))}", f"messages[{index}].role")
        if not isinstance(message.get("content"), str):
            raise BadRequest(f"messages[{index}].content must be a string, got "
                             f"{type(message.get('content')).__name__}", f"messages[{index}].content")
    prompt = chat.chat_ids([{"role": m["role"], "content": m["content"]} for m in messages])
    return _common(body, chat, prompt)


def parse_completion_body(raw: bytes, chat: ChatModel) -> Parsed:
    """A completion request: ``prompt`` is text (tokenized as is, no template) or a list of token ids."""
    body = _object(raw)
    prompt = body.get("prompt")
    vocab = chat.model.config.vocab_size
    if isinstance(prompt, str) and prompt:
        ids = chat.encode(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [(i, t) for i, t in enumerate(prompt) if not 0 <= t < vocab]
        if bad:
            raise BadRequest(f"prompt[{bad[0][0]}] = {bad[0][1]} is not a token id in [0, {vocab})",
                             f"prompt[{bad[0][0]}]")
        ids = list(prompt)
    else:
        raise BadRequest(f"prompt must be a non-empty string or list of token ids, got {json.dumps(prompt)[:60]}",
                         "prompt")
    return _common(body, chat, ids)


def text_pieces(chat: ChatModel, tokens: Iterator[int]) -> Iterator[tuple[int, str]]:
    """Each token with the text it adds; a piece that ends inside a multi-byte character waits for the next token."""
    ids: list[int] = []
    sent = ""
    for token in tokens:
        ids.append(token)
        text = chat.decode(ids)
        if text.endswith("\ufffd"):  # half a character so far
            yield token, ""
            continue
        yield token, text[len(sent):]
        sent = text


async def _tokens(lock: asyncio.Lock, chat: ChatModel, parsed: Parsed) -> AsyncIterator[tuple[int, str]]:
    """The pieces as the worker thread produces them, one request at a time."""
    async with lock:
        pieces = text_pieces(chat, chat.stream(parsed.prompt_ids, parsed.max_tokens))
        done = object()
        while True:
            item = await asyncio.to_thread(next, pieces, done)
            if item is done:
                return
            yield item


def create_chat_app(load: Callable[[], ChatModel]) -> FastAPI:
    """The app; ``load`` gives the model once, at startup (smollm2 by default, a tiny model in tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.chat = await asyncio.to_thread(load)
        app.state.lock = asyncio.Lock()
        yield

    app = FastAPI(title="kv-serving lab: trained model", lifespan=lifespan)

    @app.get("/v1/models")
    async def models(http: HTTPRequest) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": http.app.state.chat.name, "object": "model", "created": 0,
                                            "owned_by": "ml-systems-labs"}]}

    async def serve(http: HTTPRequest, parse: Callable[[bytes, ChatModel], Parsed], chat_api: bool) -> Response:
        chat: ChatModel = http.app.state.chat
        try:
            parsed = parse(await http.body(), chat)
        except BadRequest as error:
            return JSONResponse(error_body(str(error), error.code, param=error.param), status_code=error.status)
        name = f"{'chatcmpl' if chat_api else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        pieces = _tokens(http.app.state.lock, chat, parsed)
        if parsed.stream:
            return StreamingResponse(stream(name, created, chat, parsed, pieces, chat_api),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        ids, text = [], ""
        async for token, piece in pieces:
            ids.append(token)
            text += piece
        reason = "stop" if ids and ids[-1] in chat.stop_ids else "length"
        if chat_api:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": text, "token_ids": ids, "logprobs": None, "finish_reason": reason}
        return JSONResponse({"id": name, "object": "chat.completion" if chat_api else "text_completion",
                             "created": created, "model": chat.name, "choices": [choice],
                             "usage": usage(len(parsed.prompt_ids), len(ids))})

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(http: HTTPRequest) -> Response:
        return await serve(http, parse_chat_body, chat_api=True)

    @app.post("/v1/completions", response_model=None)
    async def completions(http: HTTPRequest) -> Response:
        return await serve(http, parse_completion_body, chat_api=False)

    return app


async def stream(name: str, created: int, chat: ChatModel, parsed: Parsed,
                 pieces: AsyncIterator[tuple[int, str]], chat_api: bool) -> AsyncIterator[str]:
    """SSE chunks in OpenAI's shapes: chat deltas (the role first) or completion text, then ``[DONE]``."""
    kind = "chat.completion.chunk" if chat_api else "text_completion"
    extra = {"usage": None} if parsed.include_usage else {}

    def event(choice: dict[str, Any]) -> str:
        return sse({"id": name, "object": kind, "created": created, "model": chat.name, "choices": [choice]} | extra)

    if chat_api:
        yield event({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
    count, last = 0, None
    try:
        async for token, piece in pieces:
            count, last = count + 1, token
            if chat_api:
                yield event({"index": 0, "delta": {"content": piece}, "finish_reason": None})
            else:
                yield event({"index": 0, "text": piece, "token_ids": [token], "logprobs": None, "finish_reason": None})
    finally:
        await pieces.aclose()  # a client that left releases the lock now, not when the generator is collected
    reason = "stop" if last in chat.stop_ids else "length"
    yield event({"index": 0, "delta": {}, "finish_reason": reason} if chat_api else
                {"index": 0, "text": "", "token_ids": [], "logprobs": None, "finish_reason": reason})
    if parsed.include_usage:
        yield sse({"id": name, "object": kind, "created": created, "model": chat.name, "choices": [],
                   "usage": usage(len(parsed.prompt_ids), count)})
    yield sse("[DONE]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the trained SmolLM2-135M-Instruct on 127.0.0.1 "
                                                 "(OpenAI chat and completions subset).")
    parser.add_argument("--port", type=int, default=8000, help="TCP port on 127.0.0.1; 0 picks a free one")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the decode loop (default: 1)")
    parser.add_argument("--request-timeout-s", type=float, default=REQUEST_TIMEOUT_S,
                        help="seconds a request's headers may take to arrive, from the connection's accept (or a "
                             "later request's first byte), before a 408 and the connection's close "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535 or args.threads < 1:
        parser.error(f"--port must be 0 to 65535 and --threads at least 1, got {args.port} and {args.threads}")
    if not 0 < args.request_timeout_s < float("inf"):
        parser.error(f"--request-timeout-s must be a finite number of seconds above 0, got {args.request_timeout_s}")
    import torch

    from llm_models.llama.generate import smollm2

    torch.set_num_threads(args.threads)
    uvicorn.Server(bounded_config(create_chat_app(smollm2), args.port, args.request_timeout_s, log_level="info")).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
