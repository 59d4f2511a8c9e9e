"""The timed things: one decode step at a fixed context per mode, and a client's generation workload.

A step at context T attends over T positions: T - 1 cached ones and the new
token. Caches for the step timings hold random keys and values of the exact
shape (a real prefill of 1,024 tokens at batch 16 costs minutes on a CPU);
equivalence on real prefixes is proven separately, before any timing. Each
mode is a pair: the step, which the clock times, and a reset run after the
clock stops, which rewinds the cache to T - 1 and drops the step's outputs, so
every repetition does the same work and none pays for undoing the last one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor
from transformers import GPT2LMHeadModel
from transformers.generation.streamers import BaseStreamer

from .cache import PreallocatedCache, random_concat_cache
from .decode import greedy_generate
from .hf import hf_filled_cache, rewind
from .model import Decoder


def synchronizer(device: torch.device) -> Callable[[], None]:
    """Waits for queued GPU work; a no-op on the CPU, where every op has finished when it returns."""
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


Runner = tuple[Callable[[], None], Callable[[], None]]  # (the timed step, the untimed reset after it)


def step_runners(model: Decoder, compiled: Decoder, reference: GPT2LMHeadModel, batch: int, context: int,
                 generator: torch.Generator) -> dict[str, Runner]:
    """Per mode, one decode step at ``context`` over the same random cache contents, and the reset that
    rewinds its cache and frees what the step returned (run outside the clock). ``compiled`` is the
    CompiledDecoder of the same weights, stepped over a preallocated cache of its own."""
    config, device = model.config, model.device
    cached = context - 1
    layers = random_concat_cache(config, batch, cached, generator, device)  # (B, Hkv, T - 1, D) per layer

    def filled() -> PreallocatedCache:
        cache = PreallocatedCache(config, batch, context, device)
        for index, (keys, values) in enumerate(layers):
            cache.keys[index][:, :, :cached] = keys
            cache.values[index][:, :, :cached] = values
        cache.length = cached
        return cache

    prealloc, own = filled(), filled()  # ours-prealloc's and ours-compiled's: the same contents
    dynamic = hf_filled_cache(reference, layers, static=False, capacity=context)
    static = hf_filled_cache(reference, layers, static=True, capacity=context)
    token = torch.zeros(batch, 1, dtype=torch.long, device=device)
    sync = synchronizer(device)
    # The step's outputs (logits, and concatenation's new cache) live here until the reset, so freeing
    # them is outside the clock for every mode alike.
    held: list[object] = []

    def ours_concat() -> None:
        held.append(model(token, layers, check_values=False))  # a new, longer list; ``layers`` is untouched
        sync()

    def ours_prealloc() -> None:
        held.append(model(token, prealloc, check_values=False))
        sync()

    def ours_compiled() -> None:
        held.append(compiled(token, own, check_values=False))
        sync()

    def ours_reset(cache: PreallocatedCache | None) -> Callable[[], None]:
        def reset() -> None:
            held.clear()
            if cache is not None:
                cache.rewind(cached)
        return reset

    def hf(cache: object) -> Runner:
        def run() -> None:
            held.append(reference(token, past_key_values=cache, use_cache=True))
            sync()

        def reset() -> None:
            held.clear()
            rewind(cache, cached)
            sync()
        return run, reset

    return {"ours-concat": (ours_concat, ours_reset(None)), "ours-prealloc": (ours_prealloc, ours_reset(prealloc)),
            "ours-compiled": (ours_compiled, ours_reset(own)),
            "hf-dynamic": hf(dynamic), "hf-static": hf(static)}


class _Stamps(BaseStreamer):
    """transformers' streamer hook: a timestamp for every new token (its first call is the prompt)."""

    def __init__(self, start: int) -> None:
        self.start, self.calls, self.stamps = start, 0, []

    def put(self, value: Tensor) -> None:
        self.calls += 1
        if self.calls > 1:
            self.stamps.append(time.perf_counter_ns() - self.start)

    def end(self) -> None:
        pass


def client_run(mode: str, model: Decoder, reference: GPT2LMHeadModel, prompt: Tensor,
               new_tokens: int) -> tuple[list[int], Tensor]:
    """One greedy generation as a client sees it: ns from the call to each new token, and the tokens."""
    sync = synchronizer(model.device)
    sync()
    start = time.perf_counter_ns()
    if mode == "ours":
        stamps: list[int] = []

        def seen(token: Tensor) -> None:
            sync()  # a client sees a token when it exists, not when it is queued
            stamps.append(time.perf_counter_ns() - start)

        tokens = greedy_generate(model, prompt, new_tokens, seen)
        return stamps, tokens
    streamer = _Stamps(start)
    out = reference.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, streamer=streamer,
                             pad_token_id=0, eos_token_id=None)
    return streamer.stamps, out[:, prompt.shape[1]:]
