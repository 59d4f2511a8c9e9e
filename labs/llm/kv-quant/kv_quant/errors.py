"""The error chain of a cache format against the full-precision cache, on the first lab's decoder block.

Element (the cached keys and values) -> attention scores (the newest query against every key) ->
attention output (the block's output projection) -> logits, each as a max |difference| from the same
model making the same calls with a plain float cache. The block is one layer with random weights, so
its keys and values depend on the tokens alone: both runs compute exactly the same entries, and every
difference downstream comes from the format. What this measures is the mechanics; the quality on a
trained model (perplexity, KL, top-1 agreement) is the lab's later part.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from llm_models.cache_formats import CacheFormat
from llm_models.toy.model import DecoderBlock

from .cache import make_cache


@dataclass(frozen=True)
class ErrorChain:
    keys: float  # max |K_stored - K| over every cached element
    values: float  # max |V_stored - V|
    scores: float  # max |q.K_stored - q.K| / sqrt(D), the last query against every key, before softmax
    attention_output: float  # max |difference| of the attention's output projection, every decoded position
    logits: float  # max |difference| of the logits, every decoded position
    logits_magnitude: float  # max |logit| of the full-precision run, to read the difference against
    top1_agreement: float  # fraction of decoded positions whose argmax token agrees

    def as_record(self) -> dict[str, float]:
        return asdict(self)


class _Capture:
    """Forward hooks on the fused q/k/v projection and the attention output projection."""

    def __init__(self, model: DecoderBlock) -> None:
        self.projections: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self._handles = [model.qkv.register_forward_hook(lambda m, i, o: self.projections.append(o)),
                         model.out.register_forward_hook(lambda m, i, o: self.outputs.append(o))]

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def _split(projected: Tensor, model: DecoderBlock) -> tuple[Tensor, Tensor, Tensor]:
    """(B, T, C + 2 Hkv D) -> q (B, H, T, D), k and v (B, Hkv, T, D), as the block splits them."""
    config = model.config
    batch, length, _ = projected.shape
    h, hkv, d = config.heads, config.kv_heads, config.head_dim
    q, k, v = projected.split([h * d, hkv * d, hkv * d], dim=-1)
    return (q.reshape(batch, length, h, d).transpose(1, 2), k.reshape(batch, length, hkv, d).transpose(1, 2),
            v.reshape(batch, length, hkv, d).transpose(1, 2))


def _decode(model: DecoderBlock, ids: Tensor, prefix: int, cache: Any) -> tuple[Tensor, Any]:
    """Prefill, then one token per call: the logits of every decoded position (B, T - prefix, vocab)."""
    _, cache = model(ids[:, :prefix], cache)
    steps = []
    for t in range(prefix, ids.shape[1]):
        step, cache = model(ids[:, t : t + 1], cache)
        steps.append(step)
    return torch.cat(steps, dim=1), cache


def error_chain(fmt: CacheFormat | None, model: DecoderBlock, ids: Tensor, prefix: int,
                store: Any = None) -> ErrorChain:
    """Prefill ``ids[:, :prefix]`` into a ``fmt`` cache, decode the rest one token at a time (teacher
    forced), and compare with the same calls on a plain float cache (so a float32 format differs by 0).

    ``store`` replaces the ``fmt`` cache with any other KVStore that also has ``keys_values()`` (another
    library's quantized cache behind an adapter), so both are measured by the same chain."""
    batch, length = ids.shape
    if not 1 <= prefix < length:
        raise ValueError(f"prefix must leave at least one decoded token: 1 <= prefix < {length}, got {prefix}")
    config = model.config
    with torch.inference_mode():
        capture = _Capture(model)
        try:
            reference_logits, plain = _decode(model, ids, prefix, None)  # the plain concatenating cache
            q = _split(capture.projections[-1], model)[0]  # the last decoded token's query
            reference_output = torch.cat(capture.outputs[1:], dim=1)  # (B, T - prefix, C)
            capture.outputs.clear()
            if store is None and fmt is None:
                raise ValueError("give a cache format or a store to measure")
            cache = store if store is not None else make_cache(fmt, batch, config.kv_heads, config.head_dim,
                                                                config.dtype)
            logits, _ = _decode(model, ids, prefix, cache)
            outputs = torch.cat(capture.outputs[1:], dim=1)
        finally:
            capture.close()
        k, v = plain
        keys, values = cache.keys_values()
        group = config.heads // config.kv_heads
        last = q[:, :, -1:]  # (B, H, 1, D)
        scores = last @ keys.repeat_interleave(group, dim=1).transpose(-2, -1) / math.sqrt(config.head_dim)
        reference_scores = last @ k.repeat_interleave(group, dim=1).transpose(-2, -1) / math.sqrt(config.head_dim)
        return ErrorChain(
            keys=float((keys - k).abs().max()),
            values=float((values - v).abs().max()),
            scores=float((scores - reference_scores).abs().max()),
            attention_output=float((outputs - reference_output).abs().max()),
            logits=float((logits - reference_logits).abs().max()),
            logits_magnitude=float(reference_logits.abs().max()),
            top1_agreement=float((logits.argmax(-1) == reference_logits.argmax(-1)).float().mean()),
        )

