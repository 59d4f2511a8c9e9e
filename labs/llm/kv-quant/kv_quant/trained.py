"""What a cache format does to a trained model: SmolLM2-135M-Instruct on the project's Llama decoder.

How quality is evaluated (the page says the same): the corpus is run through the decoder in chunks of
``CHUNK`` tokens (KIVI's group size, so its residual flushes at the cadence it would in decoding), each
chunk appended to the format's cache and attending to every stored position dequantized, its own keys and
values included (as a decode step's query sees its own, just-stored key). Within a chunk the mask is causal,
so position t's logits depend on tokens 0..t only. Perplexity, KL divergence and top-1 agreement at a
context length L are taken over the first L positions of one pass: because every chunk boundary falls on
a multiple of ``CHUNK``, those positions get exactly the logits a pass stopping at L would give.

The reference is the same chunked pass with the float32 format, which equals the plain cache exactly.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.llama.model import LlamaDecoder

from .config import CacheFormat
from .llama_cache import FormatLayerCache, format_cache

CHUNK = 32  # tokens per prefill call: KIVI's group size G


def corpus_ids(model_encode: Any, folder: Path) -> tuple[list[int], list[dict[str, Any]]]:
    """Every ``*.txt`` of ``folder`` in name order, encoded and joined; the files and their SHA-256."""
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise ValueError(f"no corpus: {folder} holds no *.txt file")
    ids: list[int] = []
    described = []
    for path in files:
        data = path.read_bytes()
        encoded = model_encode(data.decode("utf-8"))
        ids += encoded
        described.append({"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "tokens": len(encoded)})
    return ids, described


def new_cache(model: LlamaDecoder, fmt: CacheFormat, capacity: int) -> list[FormatLayerCache]:
    config = model.config
    return format_cache(fmt, config.layers, 1, config.kv_heads, capacity, config.head_dim, config.dtype)


def chunked_logits(model: LlamaDecoder, ids: Tensor, fmt: CacheFormat,
                   chunk: int = CHUNK) -> tuple[Tensor, list[FormatLayerCache]]:
    """(1, T, vocab) logits of ``ids`` (1, T), prefilled ``chunk`` tokens at a time into a ``fmt`` cache,
    and that cache (room for 64 more positions, so decode steps can follow)."""
    cache = new_cache(model, fmt, ids.shape[1] + 64)
    with torch.inference_mode():
        logits = torch.cat([model(ids[:, start:start + chunk], cache) for start in range(0, ids.shape[1], chunk)],
                           dim=1)
    return logits.float(), cache


def magnitudes(cache: list[FormatLayerCache], smallest_normal: float) -> dict[str, float]:
    """Over every layer's stored keys and values: the largest |entry|, and the share of nonzero entries
    below ``smallest_normal`` (where an fp8 scale of 1.0 leaves them subnormal, with fewer significant bits)."""
    found: dict[str, float] = {}
    for side in ("keys", "values"):
        entries = torch.cat([layer.store.keys_values()[side == "values"].flatten() for layer in cache]).abs()
        found[f"{side}_max_abs"] = float(entries.max())
        found[f"{side}_below_normal"] = float(((entries > 0) & (entries < smallest_normal)).float().mean())
    return found


def quality(logits: Tensor, reference: Tensor, ids: Tensor, context: int) -> dict[str, float]:
    """Over the first ``context`` positions: perplexity of the next corpus token, mean KL(reference || this)
    of the next-token distributions, and the share of positions whose most likely token agrees."""
    if not 2 <= context <= ids.shape[1]:
        raise ValueError(f"context must lie in [2, {ids.shape[1]}] tokens, got {context}")
    log_p = F.log_softmax(logits[0, :context], dim=-1)  # (L, V)
    log_ref = F.log_softmax(reference[0, :context], dim=-1)
    nll = -log_p[:-1].gather(-1, ids[0, 1:context, None]).mean()  # predicting tokens 1 .. L-1
    kl = (log_ref.exp() * (log_ref - log_p)).sum(-1).mean()
    agree = (logits[0, :context].argmax(-1) == reference[0, :context].argmax(-1)).float().mean()
    return {"perplexity": math.exp(float(nll)), "kl": max(0.0, float(kl)), "top1_agreement": float(agree)}


def greedy(model: LlamaDecoder, prompt: Sequence[int], fmt: CacheFormat, new_tokens: int) -> list[int]:
    """Greedy tokens with a ``fmt`` cache: the prompt prefilled in one chunk, then one token per step."""
    cache = new_cache(model, fmt, len(prompt) + new_tokens)
    chosen: list[int] = []
    with torch.inference_mode():
        logits = model(torch.tensor([list(prompt)]), cache)[0, -1]
        for step in range(new_tokens):
            chosen.append(int(logits.argmax()))
            if step < new_tokens - 1:
                logits = model(torch.tensor([[chosen[-1]]]), cache)[0, -1]
    return chosen


def step_timing(model: LlamaDecoder, ids: Tensor, cache: list[FormatLayerCache], repeats: int) -> dict[str, Any]:
    """Decode steps after the positions ``cache`` holds (teacher-forced with the next tokens of ``ids``), each
    timed, and after each the dequantization that step performed timed alone: every layer's cache read all
    at once (``keys_values``), which is what the step's ``update`` hands to attention. The first step warms
    up and is dropped; the context grows by one position per step."""
    step_ns, dequantize_ns = [], []
    context = cache[0].length
    with torch.inference_mode():
        for index in range(repeats + 1):
            token = ids[:, context + index:context + index + 1]
            begin = time.perf_counter_ns()
            model(token, cache)
            step = time.perf_counter_ns() - begin
            begin = time.perf_counter_ns()
            for layer in cache:
                layer.store.keys_values()
            dequantize = time.perf_counter_ns() - begin
            step_ns.append(step)
            dequantize_ns.append(dequantize)
    return {"context": context, "step_ns": step_ns[1:], "dequantize_ns": dequantize_ns[1:]}
