"""The trained model beside the grid: the project's Llama decoder and transformers' Llama, one decode step each.

The decoder is the KV-cache lab's (``kv_cache.llama``): RMSNorm, rotary positions, grouped-query attention,
SwiGLU, a head tied to the token embedding, and a cache of per-layer buffers allocated once and written in
place (``ours-prealloc``). transformers' ``LlamaForCausalLM`` runs the same tensors with its ``DynamicCache``
(``hf-dynamic``), which concatenates each new position onto its keys and values. The preset ``smollm2`` is the
trained SmolLM2-135M-Instruct that ``make venv`` installs; ``tiny`` is a seeded random Llama for smoke runs.

As in the grid, the timed caches hold random keys and values of the exact shape, ``T - 1`` positions per layer
(a real prefill of a thousand tokens costs tens of seconds per model on a CPU), the same contents in both
caches. Before any timing, one untimed step per mode at every context is compared: both must give the same
logits within the stated tolerance, or the run stops.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache, LlamaForCausalLM

from kv_cache.llama import LayerCache, LlamaDecoder
from labkit import harness

from .formulas import LLAMA_ATOL, LLAMA_BATCH, LLAMA_RTOL
from .hf import rewind
from .workloads import Runner, synchronizer

CACHE_CONTENTS = ("random keys and values of the exact shape, T - 1 positions per layer and key/value head, "
                  "the same in both caches; the step adds the T-th")


def llama_pair(preset: str, seed: int) -> tuple[LlamaDecoder, LlamaForCausalLM, dict[str, Any]]:
    """Our decoder and transformers' model on the same float32 tensors, and what the weights are."""
    if preset == "smollm2":
        from kv_cache.llama import smollm2, trained
        from kv_cache.llama.weights import GGUF_NAME

        weights = trained()
        return smollm2(torch.float32).model, weights.reference, {
            "name": "SmolLM2-135M-Instruct", "trained": True, "source": f"{GGUF_NAME}, dequantized to float32",
            "sha256": weights.digest}
    if preset == "tiny":
        from kv_cache.llama.testing import tiny_pair

        reference, model = tiny_pair(seed)
        return model, reference, {"name": "tiny random Llama", "trained": False,
                                  "source": f"transformers' initializer, seed {seed}", "sha256": None}
    raise ValueError(f"unknown Llama preset {preset!r}; choose smollm2 or tiny")


def random_layers(model: LlamaDecoder, cached: int, generator: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """Per layer, (1, Hkv, cached, D) keys and values drawn from ``generator``."""
    config = model.config
    shape = (LLAMA_BATCH, config.kv_heads, cached, config.head_dim)
    return [(torch.randn(shape, generator=generator).to(config.dtype),
             torch.randn(shape, generator=generator).to(config.dtype)) for _ in range(config.layers)]


def step_runners(model: LlamaDecoder, reference: LlamaForCausalLM, context: int,
                 generator: torch.Generator) -> tuple[dict[str, Runner], list[Tensor]]:
    """Per mode, one decode step at ``context`` over the same random cache contents and the reset that rewinds
    its cache (run outside the clock); and the list every step appends its logits to, which the reset clears."""
    device = model.device
    cached = context - 1
    layers = [(keys.to(device), values.to(device)) for keys, values in random_layers(model, cached, generator)]
    ours = model.new_cache(LLAMA_BATCH, context)  # room for exactly the T positions the step attends over
    for store, (keys, values) in zip(ours, layers, strict=True):
        store.keys[:, :, :cached] = keys
        store.values[:, :, :cached] = values
        store.length = cached
    # Copies: transformers' cache concatenates onto its tensors, ours writes into its own buffers.
    theirs = (DynamicCache(ddp_cache_data=[(k.clone(), v.clone()) for k, v in layers]) if cached
              else DynamicCache(config=reference.config))
    token = torch.randint(0, model.config.vocab_size, (LLAMA_BATCH, 1), generator=generator).to(device)
    sync = synchronizer(device)
    held: list[Tensor] = []  # the step's logits live here until the reset: freeing them is outside the clock

    def ours_step() -> None:
        held.append(model(token, ours))
        sync()

    def ours_reset() -> None:
        held.clear()
        rewind_ours(ours, cached)

    def hf_step() -> None:
        held.append(reference(token, past_key_values=theirs, use_cache=True).logits)
        sync()

    def hf_reset() -> None:
        held.clear()
        rewind(theirs, cached)
        sync()

    return {"ours-prealloc": (ours_step, ours_reset), "hf-dynamic": (hf_step, hf_reset)}, held


def rewind_ours(cache: list[LayerCache], length: int) -> None:
    """Forget every position from ``length`` on: the next step writes over them."""
    for store in cache:
        store.length = length


def check_step(runners: dict[str, Runner], held: list[Tensor], context: int) -> dict[str, Any]:
    """One untimed step per mode from the same cache: ours must give transformers' logits (EquivalenceError if not)."""
    logits = {}
    for mode, (step, reset) in runners.items():
        step()
        logits[mode] = held[-1].float().clone()
        reset()
    entry = harness.compare(logits["ours-prealloc"], logits["hf-dynamic"], LLAMA_ATOL, LLAMA_RTOL,
                            f"Llama ours-prealloc differs from hf-dynamic at context {context}")
    return {"context": context, **entry}
