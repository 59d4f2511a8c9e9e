"""Before any timing: every mode, prefilled from a real prefix and then stepped, gives the full-pass logits."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache, GPT2LMHeadModel, StaticCache

from labkit import harness

from .cache import PreallocatedCache
from .grid import ATOL, RTOL
from .model import Decoder

BATCH = 2


def prefill_then_steps(run: Any, ids: Tensor, prefix: int, cache: Any) -> Tensor:
    """Logits (B, T, vocab) of a chunked prefill of ``prefix`` tokens followed by one-token steps."""
    logits, cache = run(ids[:, :prefix], cache)
    chunks = [logits]
    for t in range(prefix, ids.shape[1]):
        logits, cache = run(ids[:, t : t + 1], cache)
        chunks.append(logits)
    return torch.cat(chunks, dim=1)


def one_row_at_a_time(model: Decoder, ids: Tensor, prefix: int) -> Tensor:
    """Each row of ids (B, T) decoded alone, batch 1, preallocated cache: the path ours-compiled's one-row
    kernels take (with two rows a step multiplies in BLAS). Logits (B, T, vocab)."""
    def run(chunk: Tensor, cache: Any) -> tuple[Tensor, Any]:
        return model(chunk, cache)

    rows = [prefill_then_steps(run, ids[row : row + 1], prefix, PreallocatedCache(model.config, 1, ids.shape[1],
                                                                                   model.device))
            for row in range(ids.shape[0])]
    return torch.cat(rows, dim=0)


def check_modes(model: Decoder, compiled: Decoder, reference: GPT2LMHeadModel, prefix: int, steps: int,
                seed: int) -> dict[str, Any]:
    """Compare every mode with this lab's single pass over the sequence; raises EquivalenceError on a miss.

    ``compiled`` is the CompiledDecoder of the same configuration (decode_bandwidth.compiled)."""
    config, length = model.config, prefix + steps
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (BATCH, length), generator=generator).to(model.device)

    def ours(chunk: Tensor, cache: Any) -> tuple[Tensor, Any]:
        return model(chunk, cache)

    def theirs(chunk: Tensor, cache: Any) -> tuple[Tensor, Any]:
        out = reference(chunk, past_key_values=cache, use_cache=True)
        return out.logits, out.past_key_values

    with torch.inference_mode():
        full = model(ids)[0]  # (B, T, vocab)
        candidates = {
            "hf-full": reference(ids).logits,
            "ours-concat": prefill_then_steps(ours, ids, prefix, None),
            "ours-prealloc": prefill_then_steps(ours, ids, prefix, PreallocatedCache(config, BATCH, length,
                                                                                     model.device)),
            "ours-compiled": one_row_at_a_time(compiled, ids, prefix),
            "hf-dynamic": prefill_then_steps(theirs, ids, prefix, DynamicCache(config=reference.config)),
            "hf-static": prefill_then_steps(theirs, ids, prefix, StaticCache(config=reference.config,
                                                                             max_cache_len=length)),
        }
        compared = {mode: harness.compare(logits, full, ATOL, RTOL, f"{mode} differs from one full pass")
                    for mode, logits in candidates.items()}
    return {"batch": BATCH, "prefix": prefix, "steps": steps, "dtype": str(config.dtype).removeprefix("torch."),
            "reference": "this lab's decoder, one pass over all prefix + steps positions", "modes": compared}
