"""Text in and out for a model with a tokenizer: prompts as ids, and each request's output as text with stops.

Prompts are the decoder's own chat front end (``llm_models.llama.generate``: ``chat_prompt`` renders messages
through the chat template with every message's content tokenized as plain text, so a user who writes
``<|im_end|>\\n<|im_start|>system`` gets those characters and no message can open a turn of another role;
``content_ids`` does the same for a string prompt). ``TextStream`` turns one request's tokens into text as they
come (the incremental detokenization vLLM does: a window of recent ids, so each token costs the same however
long the output grows), ends the request at a stop token or a ``stop`` string, and never sends the part of
the text that might still turn out to begin a stop string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: a server of the random model never imports transformers (seconds per start)
    from transformers import PreTrainedTokenizerBase

DETOKENIZE_WINDOW = 6  # ids decoded before the new ones: enough context for a byte-level BPE to join its pieces


@dataclass
class TextStream:
    """One request's output as text: ``push`` each new token, get the text to send now and whether it stopped.

    A stop token (the model's end of turn) ends the request and adds no text; a ``stop`` string ends it where
    the string begins, and neither it nor anything after it is sent (OpenAI's rule)."""

    tokenizer: PreTrainedTokenizerBase
    stop_ids: frozenset[int]
    stop: tuple[str, ...] = ()
    finish_reason: str | None = None  # "stop" once a stop token or string ended it

    def __post_init__(self) -> None:
        self._ids: list[int] = []
        self._prefix, self._read = 0, 0  # ids[prefix:read] decoded to the text already in self._text
        self._text = ""  # everything decoded so far
        self._sent = 0  # characters of _text already sent

    @property
    def text(self) -> str:
        """What has been sent so far."""
        return self._text[:self._sent]

    def push(self, token: int) -> tuple[str, bool]:
        """The text ``token`` lets out (maybe empty), and whether the request ends here."""
        if token in self.stop_ids:
            self.finish_reason = "stop"
            return self._release(len(self._text)), True
        self._ids.append(token)
        before = self.tokenizer.decode(self._ids[self._prefix:self._read], skip_special_tokens=True)
        after = self.tokenizer.decode(self._ids[self._prefix:], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):  # not half a character
            self._text += after[len(before):]
            self._prefix, self._read = max(0, len(self._ids) - DETOKENIZE_WINDOW), len(self._ids)
        found = self._first_stop()
        if found is not None:
            self.finish_reason = "stop"
            return self._release(found), True
        return self._release(len(self._text) - self._held_back()), False

    def flush(self) -> str:
        """The text held back for a stop string that never came: the request ended for its length."""
        return self._release(len(self._text))

    def _release(self, end: int) -> str:
        piece = self._text[self._sent:end]
        self._sent = max(self._sent, end)
        return piece

    def _first_stop(self) -> int | None:
        """Where the earliest stop string begins in the unsent text, if one has appeared."""
        hits = [at for s in self.stop if (at := self._text.find(s, self._sent)) >= 0]
        return min(hits) if hits else None

    def _held_back(self) -> int:
        """Characters at the end of the text that begin some stop string: not sent until the next tokens say."""
        tail = self._text[self._sent:]
        return max((n for s in self.stop for n in range(min(len(s) - 1, len(tail)), 0, -1)
                    if tail.endswith(s[:n])), default=0)
