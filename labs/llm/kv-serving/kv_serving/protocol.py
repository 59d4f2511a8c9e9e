"""The OpenAI completions subset this server speaks: request checks and response bodies.

Prompts are lists of token ids (the model has random weights and no
tokenizer), so every choice carries ``token_ids`` next to a ``text`` that
spells the same ids in decimal. Generation is greedy; sampling fields are
refused rather than silently ignored.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

ACCEPTED_FIELDS = frozenset({"model", "prompt", "max_tokens", "stream"})


class BadRequest(ValueError):
    """A request this server cannot serve as sent: answered 400 with the message."""

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class CompletionRequest:
    prompt: list[int]
    max_tokens: int
    stream: bool
    model: str | None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_body(raw: bytes) -> CompletionRequest:
    """Decode and check one request body; BadRequest says what was wrong, with the values involved."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadRequest(f"the request body is not valid JSON: {error}", "invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    unsupported = sorted(set(body) - ACCEPTED_FIELDS)
    if unsupported:
        raise BadRequest(f"unsupported field(s) {', '.join(unsupported)}; this server accepts "
                         f"{', '.join(sorted(ACCEPTED_FIELDS))}", "unsupported_field")
    if "prompt" not in body:
        raise BadRequest("missing field prompt: a list of integer token ids")
    prompt = body["prompt"]
    if not isinstance(prompt, list) or not prompt or not all(_is_int(t) for t in prompt):
        shown = json.dumps(prompt)[:60]
        raise BadRequest(f"prompt must be a non-empty list of integer token ids, got {shown}")
    max_tokens = body.get("max_tokens", 16)  # OpenAI's default for completions
    if not _is_int(max_tokens) or max_tokens < 1:
        raise BadRequest(f"max_tokens must be an integer >= 1, got {json.dumps(max_tokens)}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"stream must be true or false, got {json.dumps(stream)}")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {json.dumps(model)}")
    return CompletionRequest(prompt, max_tokens, stream, model)


def error_body(message: str, code: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def choice(token_ids: list[int], finish_reason: str | None) -> dict[str, Any]:
    return {"index": 0, "text": "".join(f" {t}" for t in token_ids), "token_ids": token_ids,
            "logprobs": None, "finish_reason": finish_reason}


def completion_body(request_id: str, model: str, token_ids: list[int], prompt_tokens: int,
                    finish_reason: str) -> dict[str, Any]:
    return {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [choice(token_ids, finish_reason)],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(token_ids),
                      "total_tokens": prompt_tokens + len(token_ids)}}


def sse(data: dict[str, Any] | str) -> str:
    """One server-sent event: ``data: <json>`` and a blank line."""
    return f"data: {data if isinstance(data, str) else json.dumps(data, separators=(',', ':'))}\n\n"


def chunk(request_id: str, model: str, token_ids: list[int], finish_reason: str | None) -> str:
    return sse({"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
                "choices": [choice(token_ids, finish_reason)]})
