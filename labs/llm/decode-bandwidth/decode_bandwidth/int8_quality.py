"""What int8 weight-only codes cost the trained model in quality, measured as the quantized-cache lab measures a
cache format (llm_models.quality), with the weights quantized instead of the cache.

The int8 timed mode equals our decoder on the int8 round trip of the weights (each matrix dequantized), checked
at every context before timing; so the round trip stands in for it here, where whole chunks of text are run. The
text is the long one nobody on this project wrote (llm_models.texts); the float32 decoder and the round trip read
its first ``QUALITY_POSITIONS`` tokens in chunks, each into its own cache. At every position the record keeps,
per model, the negative log-likelihood of the next token, KL(float32 || int8) between the two next-token
distributions and whether the most likely token differs (llm_models.quality.score_chunk). Then one prompt is
answered greedily by each: where the two answers first part is the departure point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.llama.generate import greedy_tokens
from llm_models.llama.model import LlamaDecoder
from llm_models.quality import CHUNK, Scores, score_chunk


def chunked_scores(model: LlamaDecoder, round_trip: LlamaDecoder, ids: Tensor, positions: int) -> dict[str, Scores]:
    """Per model ("float32", "int8"), its scores at each of the first ``positions`` tokens of ``ids`` (1, T)."""
    if ids.shape[1] <= positions:
        raise ValueError(f"scoring {positions} positions needs {positions + 1} tokens, got {ids.shape[1]}")
    caches = {"float32": model.new_cache(1, positions), "int8": round_trip.new_cache(1, positions)}
    scores = {"float32": Scores(), "int8": Scores()}
    with torch.inference_mode():
        for start in range(0, positions, CHUNK):
            end = min(start + CHUNK, positions)
            part, targets = ids[:, start:end], ids[0, start + 1:end + 1]
            log_ref = F.log_softmax(model(part, caches["float32"])[0].float(), dim=-1)  # (T, vocab)
            top_ref = log_ref.argmax(-1)
            score_chunk(scores["float32"], log_ref, log_ref, top_ref, targets, start)
            log_p = F.log_softmax(round_trip(part, caches["int8"])[0].float(), dim=-1)
            score_chunk(scores["int8"], log_p, log_ref, top_ref, targets, start)
    return scores


def int8_quality(model: LlamaDecoder, round_trip: LlamaDecoder, ids: Tensor, positions: int,
                 prompt: Sequence[int], new_tokens: int) -> dict[str, Any]:
    """The record's quality entry: per-position scores over the text, and both greedy answers to ``prompt``."""
    scores = chunked_scores(model, round_trip, ids, positions)
    answers = {name: list(greedy_tokens(decoder, prompt, new_tokens))
               for name, decoder in (("float32", model), ("int8", round_trip))}
    return {"positions": positions, "chunk": CHUNK, "scores": {name: s.as_record() for name, s in scores.items()},
            "greedy": {"prompt_tokens": len(prompt), "new_tokens": new_tokens, "ids": answers}}
