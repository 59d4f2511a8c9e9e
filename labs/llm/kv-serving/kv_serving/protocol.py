"""The OpenAI completions subset this server speaks: request checks and response bodies.

Prompts are lists of token ids (the model has random weights and no
tokenizer), so every choice carries ``token_ids`` next to a ``text`` that
spells the same ids in decimal. Generation is greedy; sampling fields are
refused rather than silently ignored, except the values that ask for greedy
decoding anyway (``n: 1``, ``temperature: 0``).
"""

from __future__ import annotations

import codecs
import json
import sys
from dataclasses import dataclass
from typing import Any

from llm_models.serving.refusals import Refusal

ACCEPTED_FIELDS = frozenset({"model", "prompt", "max_tokens", "stream", "stream_options", "n", "temperature",
                             "cache_salt"})
MAX_SALT_CHARS = 1024  # a tenant's secret or id, not a document: a longer one is refused
MAX_INT_DIGITS = 20  # no token id or max_tokens comes near; Python refuses to parse past 4300 digits anyway
BYTES_PER_TOKEN_ID = 32  # a generous JSON spelling of one id: digits, comma, indentation
BODY_SLACK_BYTES = 16 * 1024  # the other fields, whitespace and a long model name


def max_body_bytes(max_positions: int) -> int:
    """The largest request body worth reading: a prompt filling every position, generously spelled, and slack."""
    return BYTES_PER_TOKEN_ID * max_positions + BODY_SLACK_BYTES


class BadRequest(ValueError):
    """A request this server cannot serve as sent: answered 400 with the message and the field at fault."""

    def __init__(self, message: str, code: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.param = code, param


@dataclass(frozen=True)
class CompletionRequest:
    prompt: list[int]
    max_tokens: int
    stream: bool
    model: str | None
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage, as OpenAI sends
    cache_salt: str | None = None  # vLLM's: the prefix cache shares blocks only among requests with the same salt


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: object, limit: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise BadRequest(f"the request body holds an integer of {digits} digits; token ids and max_tokens have "
                         f"at most {MAX_INT_DIGITS}", "invalid_json")
    return int(text)


def _parse_constant(name: str) -> float:
    raise BadRequest(f"the request body is not valid JSON: {name} is not a JSON value", "invalid_json")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A key given twice in one object is refused, as the record loader refuses it: json would keep the last."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise BadRequest(f"the request body holds key {_shown(key)} twice in one object; which value counts "
                             f"would be a silent choice", "duplicate_key", key if _encodable(key) else None)
        seen.add(key)
    return dict(pairs)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lone_surrogate(value: object, where: str) -> str | None:
    """The first string (key or value) in ``value`` that no UTF-8 text can carry, such as a lone \\ud800
    escape: echoed in a reply, it could not be encoded."""
    if isinstance(value, str):
        return None if _encodable(value) else where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and not _encodable(key):
            return f"a key of {where}" if where else "a field name"
        found = _lone_surrogate(item, f"{where}.{key}" if isinstance(key, str) and where else
                                f"{where}[{key}]" if where else str(key))
        if found:
            return found
    return None


def load_object(raw: bytes, accepted: frozenset[str]) -> dict[str, Any]:
    """Decode one request body into its JSON object; BadRequest says what was wrong. The body must be UTF-8
    without a byte order mark (RFC 8259), every key once per object, every string valid Unicode text, every
    field one of ``accepted`` (anything else is refused by name, never ignored)."""
    if raw.startswith(codecs.BOM_UTF8):
        raise BadRequest("the request body starts with a UTF-8 byte order mark; a JSON body is UTF-8 without one "
                         "(RFC 8259)", "invalid_json")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest(f"the request body is not UTF-8 (byte {error.start} of {len(raw)}); a JSON body must be "
                         f"UTF-8 (RFC 8259)", "invalid_json") from None
    try:
        body = json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant,
                          object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as error:
        raise BadRequest(f"the request body is not valid JSON: {error}", "invalid_json") from None
    except RecursionError:
        raise BadRequest(f"the request body nests arrays or objects too deeply to parse (more than about "
                         f"{sys.getrecursionlimit()} levels)", "invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    unencodable = _lone_surrogate(body, "")
    if unencodable:
        field = unencodable.split(".")[0].split("[")[0]
        raise BadRequest(f"{unencodable} holds a lone surrogate (a \\ud800-\\udfff escape not in a pair), which is "
                         f"not Unicode text", "invalid_string", field if field in accepted else None)
    unsupported = sorted(set(body) - accepted)
    if unsupported:
        raise BadRequest(f"unsupported field(s) {', '.join(unsupported)}; this server accepts "
                         f"{', '.join(sorted(accepted))}", "unsupported_field", unsupported[0])
    return body


@dataclass(frozen=True)
class Common:
    """The fields every request shares, checked."""

    max_tokens: int
    stream: bool
    model: str | None
    include_usage: bool
    cache_salt: str | None = None


def cache_salt(body: dict[str, Any]) -> str | None:
    """The optional cache_salt (vLLM's field): a non-empty string of at most MAX_SALT_CHARS characters."""
    salt = body.get("cache_salt")
    if "cache_salt" in body and (not isinstance(salt, str) or not 0 < len(salt) <= MAX_SALT_CHARS):
        raise BadRequest(f"cache_salt must be a non-empty string of at most {MAX_SALT_CHARS} characters, got "
                         f"{_shown(salt)}", param="cache_salt")
    return salt


def common_fields(body: dict[str, Any], max_tokens_default: int, max_tokens_name: str = "max_tokens") -> Common:
    """max_tokens (under ``max_tokens_name``), stream, stream_options, model, cache_salt; n and temperature only as
    greedy."""
    max_tokens = body.get(max_tokens_name, max_tokens_default)
    if not _is_int(max_tokens) or max_tokens < 1:
        raise BadRequest(f"{max_tokens_name} must be an integer >= 1, got {_shown(max_tokens)}", param=max_tokens_name)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"stream must be true or false, got {_shown(stream)}", param="stream")
    model = body.get("model")
    if "model" in body and not isinstance(model, str):  # null too: absent means "the served model", null is no name
        raise BadRequest(f"model must be a string, got {_shown(model)}", param="model")
    n = body.get("n", 1)
    if not _is_int(n) or n != 1:
        raise BadRequest(f"n must be 1 (one greedy completion per request), got {_shown(n)}", param="n")
    temperature = body.get("temperature", 0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature != 0:
        raise BadRequest(f"temperature must be 0 (this server decodes greedily), got {_shown(temperature)}",
                         param="temperature")
    return Common(max_tokens, stream, model, _include_usage(body, stream), cache_salt(body))


def parse_body(raw: bytes) -> CompletionRequest:
    """A completion of token ids (the random model, which has no tokenizer); BadRequest says what was wrong,
    with the values involved."""
    body = load_object(raw, ACCEPTED_FIELDS)
    if "prompt" not in body:
        raise BadRequest("missing field prompt: a list of integer token ids", param="prompt")
    prompt = body["prompt"]
    if not isinstance(prompt, list) or not prompt:
        raise BadRequest(f"prompt must be a non-empty list of integer token ids, got {_shown(prompt)}",
                         param="prompt")
    for position, token in enumerate(prompt):
        if not _is_int(token):
            raise BadRequest(f"prompt[{position}] must be an integer token id, got {_shown(token)}",
                             param="prompt")
    common = common_fields(body, 16)  # OpenAI's default for completions
    return CompletionRequest(prompt, common.max_tokens, common.stream, common.model, common.include_usage,
                             common.cache_salt)


def _include_usage(body: dict[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise BadRequest("stream_options is only allowed with stream: true", param="stream_options")
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise BadRequest(f"stream_options must be an object with at most include_usage, got {_shown(options)}",
                         param="stream_options")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise BadRequest(f"stream_options.include_usage must be true or false, got {_shown(include_usage)}",
                         param="stream_options")
    return include_usage


# The HTTP status each of the engine's refusals is answered with: 400 for a request that can never run here as sent,
# 503 for one the engine is too loaded or stopping to take now (with Retry-After), 500 for the engine's own fault.
HTTP_STATUS: dict[Refusal, int] = {
    Refusal.INVALID_REQUEST: 400,
    Refusal.CONTEXT_LENGTH_EXCEEDED: 400,
    Refusal.INVALID_TOKEN: 400,
    Refusal.KV_BUDGET_EXCEEDED: 400,
    Refusal.PROMPT_OVER_TTFT_TARGET: 400,
    Refusal.QUEUE_FULL: 503,
    Refusal.PREFILL_QUEUE_FULL: 503,
    Refusal.SERVER_SHUTTING_DOWN: 503,
    Refusal.SCHEDULER_STOPPED: 503,
    Refusal.REQUEST_FAILED: 503,
    Refusal.INTERNAL_ERROR: 500,
}


def error_body(message: str, code: str, kind: str = "invalid_request_error",
               param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: message, type, param (the field at fault, or null) and code."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def choice(token_ids: list[int], finish_reason: str | None) -> dict[str, Any]:
    return {"index": 0, "text": "".join(f" {t}" for t in token_ids), "token_ids": token_ids,
            "logprobs": None, "finish_reason": finish_reason}


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object. ``completion_tokens`` counts every token the model generated, an end-of-turn token
    that stopped the reply included; ``cached_tokens``: of this request's own prompt, the tokens found in the
    prefix cache (the only place one client learns of the cache: /metrics is opt-in)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def completion_body(request_id: str, created: int, model: str, token_ids: list[int], counts: dict[str, Any],
                    finish_reason: str) -> dict[str, Any]:
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": [choice(token_ids, finish_reason)], "usage": counts}


def sse(data: dict[str, Any] | str) -> str:
    """One server-sent event: ``data: <json>`` and a blank line."""
    return f"data: {data if isinstance(data, str) else json.dumps(data, separators=(',', ':'))}\n\n"


def chunk(request_id: str, created: int, model: str, token_ids: list[int], finish_reason: str | None,
          with_usage: bool = False) -> str:
    """One streamed chunk; with ``stream_options.include_usage`` every chunk carries ``usage: null``."""
    body: dict[str, Any] = {"id": request_id, "object": "text_completion", "created": created, "model": model,
                            "choices": [choice(token_ids, finish_reason)]}
    if with_usage:
        body["usage"] = None
    return sse(body)


def usage_chunk(request_id: str, created: int, model: str, counts: dict[str, Any],
                kind: str = "text_completion") -> str:
    """The last chunk before ``[DONE]`` under ``stream_options.include_usage``: no choices, the whole usage."""
    return sse({"id": request_id, "object": kind, "created": created, "model": model, "choices": [], "usage": counts})


@dataclass(frozen=True)
class TokenReplies:
    """The random model's replies: every choice spells its token ids (no tokenizer)."""

    request_id: str
    created: int
    model: str
    include_usage: bool

    def opening(self) -> list[str]:
        return []

    def token(self, token_id: int, text: str | None, listed: bool = True) -> str:
        return chunk(self.request_id, self.created, self.model, [token_id] if listed else [], None,
                     self.include_usage)

    def finish(self, reason: str) -> str:
        return chunk(self.request_id, self.created, self.model, [], reason, self.include_usage)

    def usage(self, counts: dict[str, Any]) -> str:
        return usage_chunk(self.request_id, self.created, self.model, counts)

    def body(self, token_ids: list[int], text: str | None, counts: dict[str, Any], reason: str) -> dict[str, Any]:
        return completion_body(self.request_id, self.created, self.model, token_ids, counts, reason)
