"""The cache on a trained model: SmolLM2-135M-Instruct on the project's Llama-family decoder (llm_models.llama).

One chat prompt, answered greedily three ways: with the cache in float32, without it (every new token runs
the whole sequence again) in float32, and with the cache in bfloat16. Then the float32 answer is fed back
teacher-forced, so both dtypes and both paths are compared on the same positions: the cached path (the
prompt prefilled in one chunk, then one token per step) against one causal pass over the whole sequence,
whose logit at each position is what a fresh pass over that position's prefix computes: the largest logit
difference and how often the most likely token agrees. What the record stores are these raw results; which
answers match and where the dtypes part are derived (kv_cache.figures).
"""

from __future__ import annotations

from typing import Any

import torch

from llm_models.llama.decode import decode_step, prefill
from llm_models.llama.generate import greedy_full_recompute, smollm2
from llm_models.llama.model import LlamaDecoder
from llm_models.llama.weights import GGUF_NAME, trained

PROMPT = "What is a KV cache in a transformer?"
NEW_TOKENS = 48  # enough for the float32 and bfloat16 answers to part, if they do
QUICK_NEW_TOKENS = 4  # a smoke run's answer: the same code path, a fraction of the time
ATOL = 1e-3  # cached against full recompute in float32, as the lab's parity tests against transformers
RTOL = 1e-4


def answer(dtype: torch.dtype, prompt_ids: list[int], new_tokens: int) -> dict[str, Any]:
    chat = smollm2(dtype)
    generation = chat.generate(prompt_ids, new_tokens)
    return {"ids": generation.ids, "text": generation.text}


def teacher_forced(model: LlamaDecoder, ids: torch.Tensor, prompt: int) -> torch.Tensor:
    """The cached path over given ids: the prompt prefilled in one chunk, then one token per step; (1, T, vocab)."""
    cache = model.new_cache(1, ids.shape[1])
    steps = [prefill(model, ids[:, :prompt], cache)]
    steps += [decode_step(model, ids[:, t : t + 1], cache)[:, None] for t in range(prompt, ids.shape[1])]
    return torch.cat(steps, dim=1)


def measure(new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """The section of the record: the prompt, the three greedy answers and the teacher-forced comparisons."""
    exact = smollm2(torch.float32)
    prompt_ids = exact.chat_ids([{"role": "user", "content": PROMPT}])
    cached = answer(torch.float32, prompt_ids, new_tokens)
    full = greedy_full_recompute(exact.model, prompt_ids, new_tokens, exact.stop_ids)
    halved = answer(torch.bfloat16, prompt_ids, new_tokens)
    ids = torch.tensor([prompt_ids + cached["ids"]])
    with torch.inference_mode():
        step_cached = teacher_forced(exact.model, ids, len(prompt_ids))  # (1, T, vocab)
        step_full = exact.model(ids)  # one causal pass: position t sees tokens 0..t, as a pass over that prefix would
        step_bf16 = teacher_forced(smollm2(torch.bfloat16).model, ids, len(prompt_ids)).float()
    return {
        "model": "SmolLM2-135M-Instruct", "weights": GGUF_NAME, "weights_sha256": trained().digest,
        "prompt": PROMPT, "prompt_tokens": len(prompt_ids), "new_tokens": new_tokens,
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "float32": {**cached, "full_recompute_ids": full},
        "bfloat16": halved,
        "teacher_forced": {
            "positions": ids.shape[1],
            "max_abs_reference": float(step_full.abs().max()),
            "cached_vs_full_max_abs_diff": float((step_cached - step_full).abs().max()),
            "bfloat16_vs_float32_max_abs_diff": float((step_bf16 - step_cached).abs().max()),
            "bfloat16_argmax_agrees": int((step_bf16.argmax(-1) == step_cached.argmax(-1)).sum()),
        },
    }
