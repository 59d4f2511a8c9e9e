"""Fixtures for the trained-model server's tests: a tiny random Llama behind SmolLM2's real tokenizer, and a gate
that holds its tokens until the test lets them through."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from transformers import LlamaConfig

from labkit.waiting import HANG_S
from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.generate import ChatModel
from llm_models.llama.model import LlamaDecoder
from llm_models.llama.tiny import TINY, tiny_reference
from llm_models.llama.weights import trained

from ..testing import Gate


def tiny_chat(name: str = "tiny") -> ChatModel:
    """2 layers of width 64 with the trained model's vocabulary and chat template: the HTTP layer is what the
    tests check, and this model answers in milliseconds per token."""
    config = LlamaConfig(**(TINY.to_dict() | {"vocab_size": 49_152, "max_position_embeddings": 256}))
    reference = tiny_reference(seed=0, config=config)
    model = LlamaDecoder(LlamaDecoderConfig.from_hf(reference.config), reference.state_dict())
    return ChatModel(model, trained().tokenizer, name)


class TokenGate(Gate):
    """Holds each token a chat model streams until the test lets it through (``step``, ``open``).
    ``produced`` counts the tokens each call to ``stream`` computed, in call order."""

    def __init__(self, chat: ChatModel, timeout_s: float = HANG_S) -> None:
        super().__init__(timeout_s)
        self.chat = chat
        self._stream = chat.stream
        self.produced: list[int] = []
        chat.stream = self._gated  # type: ignore[method-assign]  # the server looks the method up per request

    def _gated(self, prompt_ids: Sequence[int], max_new_tokens: int) -> Iterator[int]:
        index = len(self.produced)
        self.produced.append(0)
        for token in self._stream(prompt_ids, max_new_tokens):
            self.produced[index] += 1
            self.wait()
            yield token

    def __enter__(self) -> TokenGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.open()
        self.chat.stream = self._stream  # type: ignore[method-assign]
