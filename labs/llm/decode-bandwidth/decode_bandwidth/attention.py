"""One new token's attention over a cache, two ways, and the measurement that picks between them.

At batch 1 a step's attention reads every stored key and value once: 2 x Hkv x P x D x 4 bytes per layer in
float32, the part of a step that grows with the context. The two ways:

- ``products``: two batched matrix products around a masked softmax, through torch's BLAS: q (Hkv, G, D) times the
  transposed keys, then the weights times the values. Each key/value head serves its G query heads as one product,
  so grouped heads are never copied G times; the mask covers the buffer's positions past the token's.
- ``c``: a C loop (llm_models/llama/attend_rows.c, through ``native.attend``): per key/value head one pass
  over the stored key rows scores all G queries against each row, a softmax, one pass over the value rows adds each
  into all G outputs; only the positions stored are read, so there is no mask.

``measure`` times both over one layer-sized cache per layer of the model, so the rows come from memory as in a
step, after checking that they agree; the benchmark takes the faster and records both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from . import native
from .llama_modes import ATTENTION, ATTENTION_ATOL, ATTENTION_PASSES, fastest_attention


def attend_products(q: Tensor, keys: Tensor, values: Tensor, visible: Tensor) -> Tensor:
    """q (Hkv, G, D) over keys and values (Hkv, P, D), the positions where ``visible`` (P,) is False masked
    -> (Hkv, G, D)."""
    scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (Hkv, G, P)
    return scores.masked_fill(~visible, float("-inf")).softmax(dim=-1) @ values


def attend(way: str, q: Tensor, keys: Tensor, values: Tensor, position: Tensor) -> Tensor:
    """q (Hkv, G, D) over positions 0 .. ``position`` of the (1, Hkv, P, D) buffers, the chosen way -> (Hkv, G, D)."""
    if way == "c":
        return native.attend(q, keys, values, position)
    visible = torch.arange(keys.shape[2], device=q.device) <= position  # (P,)
    return attend_products(q, keys[0], values[0], visible)


def available() -> tuple[list[str], dict[str, str]]:
    """The ways that run here, and why each other one does not."""
    reason = native.unavailable()
    return (list(ATTENTION), {}) if reason is None else (["products"], {"c": reason})


def measure(layers: int, kv_heads: int, group: int, dim: int, contexts: Sequence[int], seed: int = 0,
            supplied_ns: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Per context, each available way's ns over all ``layers`` caches per pass (ATTENTION_PASSES passes, the
    ways alternating), after their outputs agree within ATTENTION_ATOL at that context (ValueError if not). ``supplied_ns``
    (way -> ns per layer) stands in for the timings, so a test runs either outcome on any CPU."""
    ways, unavailable = available()
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for context in contexts:
        shape = (1, kv_heads, context, dim)
        caches = [(torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))
                  for _ in range(layers)]
        q = torch.randn(kv_heads, group, dim, generator=generator)
        position = torch.tensor([context - 1])
        with torch.inference_mode():
            outs = {way: attend(way, q, *caches[0], position) for way in ways}
            difference = max(float((outs[way] - outs["products"]).abs().max()) for way in ways)
            if difference > ATTENTION_ATOL:
                raise ValueError(f"attention: the ways differ by {difference:.3g} at context {context}, beyond "
                                 f"atol {ATTENTION_ATOL}; no timing taken")
            durations: dict[str, list[float]] = {way: [] for way in ways}
            for _ in range(ATTENTION_PASSES if supplied_ns is None else 1):
                for way in ways:
                    if supplied_ns is not None:
                        durations[way].append(round(supplied_ns[way] * layers))
                        continue
                    started = time.perf_counter_ns()
                    for keys, values in caches:
                        attend(way, q, keys, values, position)
                    durations[way].append(time.perf_counter_ns() - started)
        rows.append({"context": context, "bytes_per_layer": 2 * kv_heads * context * dim * 4,
                     "max_abs_diff": difference, "durations_ns": durations})
        del caches
    return {"layers": layers, "passes": ATTENTION_PASSES if supplied_ns is None else 1, "atol": ATTENTION_ATOL,
            "timings": "timed" if supplied_ns is None else "supplied", "unavailable": unavailable, "rows": rows,
            "chosen": fastest_attention(rows)}

