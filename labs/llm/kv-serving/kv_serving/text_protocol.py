"""The OpenAI chat and completions subset for a model with a tokenizer (the trained SmolLM2-135M).

Requests carry text: ``messages`` through the model's chat template (each content tokenized as plain text,
ChatModel.chat_ids), or a completion's ``prompt`` as a string (or its token ids). ``stop`` (a string
or up to four) ends a reply where a stop string begins; the model's own end of turn ends it too. The body goes
through the same strict loader as the random model's (protocol.load_object): any other field is refused by
name. Parsing tokenizes, so the server calls these functions off its event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .protocol import BadRequest, _is_int, _shown, common_fields, load_object, sse, usage_chunk

if TYPE_CHECKING:  # a type only: the random model's server never imports transformers
    from llm_models.llama.generate import ChatModel

SHARED_FIELDS = frozenset({"model", "max_tokens", "stream", "stream_options", "n", "temperature", "stop", "cache_salt"})
CHAT_FIELDS = SHARED_FIELDS | {"messages", "max_completion_tokens"}
COMPLETION_FIELDS = SHARED_FIELDS | {"prompt"}
ROLES = ("system", "user", "assistant")  # the roles SmolLM2's template renders (it prints any role name verbatim)
MESSAGE_FIELDS = ("role", "content")
MAX_STOPS = 4  # as OpenAI allows
CHAT_MAX_TOKENS = 128  # a chat answer's default length
COMPLETION_MAX_TOKENS = 16  # OpenAI's default for completions


@dataclass(frozen=True)
class TextRequest:
    prompt_ids: list[int]
    prompt_field: str  # the field the prompt came from: "messages" or "prompt"
    max_tokens: int
    stream: bool
    model: str | None
    include_usage: bool
    stop: tuple[str, ...]
    chat: bool  # /v1/chat/completions (message deltas) rather than /v1/completions (text)
    cache_salt: str | None = None  # vLLM's: the prefix cache shares blocks only among requests with the same salt


def parse_stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not 1 <= len(stops) <= MAX_STOPS or \
            not all(isinstance(s, str) and s for s in stops):
        raise BadRequest(f"stop must be a non-empty string or a list of 1 to {MAX_STOPS} of them, got {_shown(stop)}",
                         param="stop")
    return tuple(stops)


def parse_chat(raw: bytes, chat: ChatModel) -> TextRequest:
    """A chat request: ``messages`` through the model's chat template, the assistant's turn opened."""
    body = load_object(raw, CHAT_FIELDS)
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise BadRequest("give max_tokens or max_completion_tokens, not both", param="max_completion_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"messages must be a non-empty list of {{role, content}} objects, got {_shown(messages)}",
                         param="messages")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{where} must be an object, got {_shown(message)}", param=where)
        extra = sorted(set(message) - set(MESSAGE_FIELDS))
        if extra:
            raise BadRequest(f"{where} holds unsupported field(s) {', '.join(extra)}; a message has role and "
                             f"content", "unsupported_field", f"{where}.{extra[0]}")
        if message.get("role") not in ROLES:
            raise BadRequest(f"{where}.role must be one of {', '.join(ROLES)}, got {_shown(message.get('role'))}",
                             param=f"{where}.role")
        if not isinstance(message.get("content"), str):
            raise BadRequest(f"{where}.content must be a string, got {_shown(message.get('content'))}",
                             param=f"{where}.content")
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    common = common_fields(body, CHAT_MAX_TOKENS, name)
    stop = parse_stop(body)
    prompt = chat.chat_ids(messages)  # each content tokenized as text: no message can open another turn
    return TextRequest(prompt, "messages", common.max_tokens, common.stream, common.model, common.include_usage,
                       stop, chat=True, cache_salt=common.cache_salt)


def parse_completion(raw: bytes, chat: ChatModel) -> TextRequest:
    """A completion request: ``prompt`` is text (tokenized as plain text, no template) or a list of token ids."""
    body = load_object(raw, COMPLETION_FIELDS)
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        ids = chat.encode(prompt)  # special-token spellings stay text here too
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        ids = list(prompt)  # the scheduler checks each id against the vocabulary, naming the position
    else:
        raise BadRequest(f"prompt must be a non-empty string or list of token ids, got {_shown(prompt)}",
                         param="prompt")
    common = common_fields(body, COMPLETION_MAX_TOKENS)
    stop = parse_stop(body)
    return TextRequest(ids, "prompt", common.max_tokens, common.stream, common.model, common.include_usage, stop,
                       chat=False, cache_salt=common.cache_salt)



@dataclass(frozen=True)
class TextReplies:
    """A text model's replies in OpenAI's shapes: chat (a message, or deltas opened by the role) or completion
    text. Every streamed choice also carries the ``token_ids`` it adds (as vLLM's ``return_token_ids`` does), so
    a client can count tokens even when a token adds no text yet."""

    request_id: str
    created: int
    model: str
    include_usage: bool
    chat: bool

    @property
    def kind(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def _event(self, choice: dict[str, Any]) -> str:
        extra = {"usage": None} if self.include_usage else {}
        return sse({"id": self.request_id, "object": self.kind, "created": self.created, "model": self.model,
                    "choices": [{"index": 0, **choice}]} | extra)

    def opening(self) -> list[str]:
        if not self.chat:
            return []
        return [self._event({"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None})]

    def token(self, token_id: int, text: str | None, listed: bool = True) -> str:
        """``listed`` False: an end-of-turn token, whose id the reply leaves out (its text, if a held-back part of
        the output is released with it, is still sent)."""
        ids = [token_id] if listed else []
        if self.chat:
            return self._event({"delta": {"content": text or ""}, "token_ids": ids, "logprobs": None,
                                "finish_reason": None})
        return self._event({"text": text or "", "token_ids": ids, "logprobs": None, "finish_reason": None})

    def finish(self, reason: str) -> str:
        if self.chat:
            return self._event({"delta": {}, "logprobs": None, "finish_reason": reason})
        return self._event({"text": "", "token_ids": [], "logprobs": None, "finish_reason": reason})

    def usage(self, counts: dict[str, Any]) -> str:
        return usage_chunk(self.request_id, self.created, self.model, counts, self.kind)

    def body(self, token_ids: list[int], text: str | None, counts: dict[str, Any], reason: str) -> dict[str, Any]:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text or ""}, "logprobs": None,
                      "finish_reason": reason}
        else:
            choice = {"index": 0, "text": text or "", "token_ids": token_ids, "logprobs": None,
                      "finish_reason": reason}
        return {"id": self.request_id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice],
                "usage": counts}
