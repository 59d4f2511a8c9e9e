"""Greedy generation with the cache, the naive recompute-everything loop beside it, and a chat front end.

``ChatModel`` is what the serving lab and the articles use: the tokenizer's
chat template turns messages into prompt ids, ``generate`` decodes greedily
with the KV cache, and ``stream`` yields the same tokens one at a time.

Text from a user is tokenized as the characters it is (``content_ids``): a message that spells
``<|im_end|>\n<|im_start|>system`` gets those characters, not control tokens, so no message can open a turn of
another role; only the chat template's own markup becomes control tokens (``chat_prompt``).
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from .config import LlamaDecoderConfig
from .decode import decode_step, prefill
from .model import LlamaDecoder
from .weights import trained

# A fast tokenizer keeps "split special tokens" as a setting of its shared Rust object, switched per call: two
# threads tokenizing at once (a server parses on a pool of threads) could read each other's setting and turn a
# template's markup into plain characters. One lock for every encode here, deliberately.
ENCODING = threading.Lock()


def content_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """``text`` as token ids, special-token spellings included as the characters they are."""
    with ENCODING:
        return [int(t) for t in tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]]


def markup_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """A template's own ``text`` as token ids, its special tokens recognised as control tokens."""
    with ENCODING:
        return [int(t) for t in tokenizer(text, add_special_tokens=False, split_special_tokens=False)["input_ids"]]


def chat_prompt(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]) -> list[int]:
    """The prompt ids of ``messages`` through the chat template, the assistant's turn opened, with each
    message's content tokenized as text (``content_ids``) and only the template's own markup as control tokens.

    The template is rendered once with a unique marker in place of each content; the markup between markers is
    tokenized with special tokens recognised, each content without. For content that spells no special token,
    the ids are the template's own tokenization (``apply_chat_template(..., tokenize=True)``)."""
    if not messages:
        raise ValueError("messages must hold at least one message, got 0")
    markers = [f"\x00{uuid.uuid4().hex}\x00" for _ in messages]
    rendered = tokenizer.apply_chat_template(
        [{"role": m["role"], "content": marker} for m, marker in zip(messages, markers)],
        add_generation_prompt=True, tokenize=False)
    ids: list[int] = []
    for marker, message in zip(markers, messages):
        if rendered.count(marker) != 1:
            raise ValueError(f"the chat template does not render each message's content exactly once "
                             f"({rendered.count(marker)} times)")
        markup, rendered = rendered.split(marker)
        ids += markup_ids(tokenizer, markup) + content_ids(tokenizer, message["content"])
    return ids + markup_ids(tokenizer, rendered)


def _prompt(model: LlamaDecoder, prompt_ids: Sequence[int], max_new_tokens: int) -> Tensor:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    if len(prompt_ids) < 1:
        raise ValueError("the prompt must hold at least one token, got 0")
    total = len(prompt_ids) + max_new_tokens
    if total > model.config.max_positions:
        raise ValueError(f"{len(prompt_ids)} prompt + {max_new_tokens} new tokens = {total}, "
                         f"beyond the model's {model.config.max_positions} positions")
    return torch.tensor([list(prompt_ids)], dtype=torch.int64, device=model.device)  # (1, T)


def greedy_tokens(model: LlamaDecoder, prompt_ids: Sequence[int], max_new_tokens: int,
                  stop_ids: frozenset[int] = frozenset()) -> Iterator[int]:
    """Each new token as it is chosen (the most likely one), with the cache; ends after a stop id or the limit."""
    prompt = _prompt(model, prompt_ids, max_new_tokens)
    # Inference mode is per thread and a generator may be resumed on another (the server's worker threads do):
    # so each step enters it afresh instead of one block spanning the yields.
    with torch.inference_mode():
        cache = model.new_cache(1, prompt.shape[1] + max_new_tokens)
        logits = prefill(model, prompt, cache)[:, -1]  # (1, vocab): the prompt's last position
    for step in range(max_new_tokens):
        token = int(logits.argmax(-1))
        yield token
        if token in stop_ids or step == max_new_tokens - 1:
            return
        with torch.inference_mode():
            logits = decode_step(model, torch.tensor([[token]], device=model.device), cache)


def greedy_full_recompute(model: LlamaDecoder, prompt_ids: Sequence[int], max_new_tokens: int,
                          stop_ids: frozenset[int] = frozenset()) -> list[int]:
    """The same choices without a cache: every new token runs the whole sequence again (the naive loop)."""
    ids = _prompt(model, prompt_ids, max_new_tokens)
    new: list[int] = []
    with torch.inference_mode():
        while len(new) < max_new_tokens:
            token = int(model(ids, last_only=True)[0, -1].argmax())
            new.append(token)
            if token in stop_ids:
                break
            ids = torch.cat((ids, torch.tensor([[token]], device=model.device)), dim=1)
    return new


@dataclass(frozen=True)
class Generation:
    prompt_ids: list[int]
    ids: list[int]  # the new tokens, a stop token included if one ended the generation
    text: str  # the new tokens as text, special tokens (the stop token) left out
    finish_reason: str  # "stop": a stop token ended it; "length": max_new_tokens did


class ChatModel:
    """A decoder and its tokenizer: chat messages in, greedy text out."""

    def __init__(self, model: LlamaDecoder, tokenizer: PreTrainedTokenizerBase, name: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        eos = tokenizer.eos_token_id
        self.stop_ids = frozenset() if eos is None else frozenset({int(eos)})

    def chat_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The prompt ids of ``messages`` ({"role", "content"} dicts) through the model's chat template,
        ending with the assistant's turn opened; each content is text, never control tokens (``chat_prompt``)."""
        return chat_prompt(self.tokenizer, messages)

    def encode(self, text: str) -> list[int]:
        """Plain text (no template) as token ids, special-token spellings as the characters they are."""
        return content_ids(self.tokenizer, text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def stream(self, prompt_ids: Sequence[int], max_new_tokens: int) -> Iterator[int]:
        """The new token ids one at a time, as greedy decoding with the cache chooses them."""
        return greedy_tokens(self.model, prompt_ids, max_new_tokens, self.stop_ids)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> Generation:
        new = list(self.stream(prompt_ids, max_new_tokens))
        stopped = bool(new) and new[-1] in self.stop_ids
        return Generation(prompt_ids=list(prompt_ids), ids=new, text=self.decode(new),
                          finish_reason="stop" if stopped else "length")


@functools.cache
def smollm2(dtype: torch.dtype = torch.float32) -> ChatModel:
    """SmolLM2-135M-Instruct on the project's decoder, loaded once per process and dtype."""
    weights = trained()
    config = LlamaDecoderConfig.from_hf(weights.reference.config, dtype=dtype)
    return ChatModel(LlamaDecoder(config, weights.reference.state_dict()), weights.tokenizer, "smollm2")
