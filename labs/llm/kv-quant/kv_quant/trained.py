"""What a cache format does to a trained model: SmolLM2-135M-Instruct on the project's Llama decoder.

How quality is evaluated (the page says the same): a long text nobody on this project wrote (llm_models.texts)
is run through the decoder once per format, all formats in step, chunk by chunk. Each chunk is appended to the
format's cache and attends to every stored position dequantized, its own keys and values included (as a
decode step's query sees its own, just-stored key); within a chunk the mask is causal, so position t's logits
depend on tokens 0..t only. Formats that encode each token on its own take ``CHUNK`` tokens per call: their
stored codes, and so their logits, do not depend on how the text is cut. KIVI takes ``KIVI_CHUNK`` (its group
size), so its residual flushes at the cadence it would in decoding. The reference is the same pass with the
float32 format, which equals the plain cache exactly.

At every position t (predicting token t + 1) the pass keeps, per format: the negative log-likelihood of the
next token, KL(float32 || format) between the two next-token distributions, and whether the most likely
token differs from float32's (llm_models.quality.score_chunk). kv_quant.figures turns those into perplexity, KL and top-1 agreement over the
first L positions, with seeded bootstrap intervals (labkit.bootstrap).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.cache_formats import CacheFormat
from llm_models.llama.model import LlamaDecoder
from llm_models.quality import CHUNK, Scores, score_chunk

from .llama_cache import FormatLayerCache, format_cache

KIVI_CHUNK = 32  # KIVI's group size G: the cadence its residual flushes at while decoding
ROOM = 64  # positions each cache keeps free after the text, for the timed decode steps


def new_cache(model: LlamaDecoder, fmt: CacheFormat, capacity: int) -> list[FormatLayerCache]:
    config = model.config
    return format_cache(fmt, config.layers, 1, config.kv_heads, capacity, config.head_dim, config.dtype)


def chunked_logits(model: LlamaDecoder, ids: Tensor, fmt: CacheFormat, cache: list[FormatLayerCache],
                   chunk: int) -> Tensor:
    """(T, vocab) float32 logits of ``ids`` (1, T), prefilled ``chunk`` tokens per call into ``cache``."""
    return torch.cat([model(ids[:, start:start + chunk], cache) for start in range(0, ids.shape[1], chunk)],
                     dim=1)[0].float()


def chunk_for(fmt: CacheFormat) -> int:
    return KIVI_CHUNK if fmt.name == "kivi" else CHUNK


def evaluate(model: LlamaDecoder, ids: Tensor, formats: Sequence[CacheFormat], positions: int,
             progress: Any = None) -> tuple[dict[str, Scores], dict[str, list[FormatLayerCache]]]:
    """Every format's per-position scores over the first ``positions`` tokens of ``ids`` (1, T > positions),
    against the first format (the float32 reference), and the caches as the pass left them."""
    if ids.shape[1] <= positions:
        raise ValueError(f"evaluating {positions} positions needs {positions + 1} tokens, got {ids.shape[1]}")
    reference, *others = formats
    caches = {fmt.label: new_cache(model, fmt, positions + ROOM) for fmt in formats}
    scores = {fmt.label: Scores() for fmt in formats}
    with torch.inference_mode():
        for start in range(0, positions, CHUNK):
            end = min(start + CHUNK, positions)
            if progress is not None:
                progress(f"trained model: positions {start:,}-{end - 1:,} of {positions:,}, {len(formats)} formats")
            part, targets = ids[:, start:end], ids[0, start + 1:end + 1]
            log_ref = F.log_softmax(chunked_logits(model, part, reference, caches[reference.label], CHUNK), dim=-1)
            top_ref = log_ref.argmax(-1)
            score_chunk(scores[reference.label], log_ref, log_ref, top_ref, targets, start)
            for fmt in others:
                logits = chunked_logits(model, part, fmt, caches[fmt.label], chunk_for(fmt))
                score_chunk(scores[fmt.label], F.log_softmax(logits, dim=-1), log_ref, top_ref, targets, start)
    return scores, caches


def magnitudes(cache: list[FormatLayerCache], smallest_normal: float) -> dict[str, float]:
    """Over every layer's stored keys and values: the largest |entry|, and the share of nonzero entries
    below ``smallest_normal`` (where an fp8 scale of 1.0 leaves them subnormal, with fewer significant bits)."""
    found: dict[str, float] = {}
    for side in ("keys", "values"):
        entries = torch.cat([layer.store.keys_values()[side == "values"].flatten() for layer in cache]).abs()
        found[f"{side}_max_abs"] = float(entries.max())
        found[f"{side}_below_normal"] = float(((entries > 0) & (entries < smallest_normal)).float().mean())
    return found


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
