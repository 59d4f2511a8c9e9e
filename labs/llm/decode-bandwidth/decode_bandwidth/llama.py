"""The trained model beside the grid: the project's Llama decoder and transformers' Llama, one decode step each.

The decoder is the project's own (``llm_models.llama``): RMSNorm, rotary positions, grouped-query attention,
SwiGLU, a head tied to the token embedding, and a cache of per-layer buffers allocated once and written in
place (``ours-prealloc``). transformers' ``LlamaForCausalLM`` runs the same tensors with its ``DynamicCache``
(``hf-dynamic``), which concatenates each new position onto its keys and values. The preset ``smollm2`` is the
trained SmolLM2-135M-Instruct that ``make venv`` installs; ``tiny`` is a seeded random Llama for smoke runs.

As in the grid, the timed caches hold random keys and values of the exact shape, ``T - 1`` positions per layer
(a real prefill of a thousand tokens costs tens of seconds per model on a CPU), the same contents in both
caches. Beside them, the fast twin of our decoder (``decode_bandwidth.fast_llama``) on the same weights:
``ours-fused`` (q/k/v and gate/up fused, each matrix kind through the kernel the kernel table measured fastest in
this run) and ``ours-fused-compiled`` (the same, each layer one region torch.compile generates; its compile time
is recorded); ``ours-native``, the whole step in one C call (llm_models.llama.native_step: every layer's norms,
products, rotary turn, attention and SwiGLU in one loop nest over packed weights) and ``ours-int8``, the same call
over int8 weight-only codes (llm_models.kernels.quantize); and ``served``, the step the server runs
(llm_models.serving.llama) for one request, its cache in a paged block pool, its kernels from the serving core's
own table. Before any timing, one untimed step per mode at every context is
compared: ours must give transformers' logits, each float32 fast mode ours', and the int8 mode the logits of ours
on the int8 round trip of the weights, within the stated tolerance, or the run stops. How far that round trip is
from the float32 model is measured after the timing (``int8_quality``).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache, LlamaForCausalLM

from labkit import bench, harness
from labkit.summary import median
from llm_models.gathered import gather_parameters
from llm_models.kernels import int8_loop, matvec, timing
from llm_models.kernels.quantize import dequantized_state_dict
from llm_models.llama import native_step
from llm_models.llama.cache import LayerCache
from llm_models.llama.generate import ChatModel
from llm_models.llama.kinds import MATRIX_KINDS
from llm_models.llama.model import LlamaDecoder
from llm_models.llama.native_step import NativeStep
from llm_models.serving import kernels as serving_kernels
from llm_models.serving.engine import EngineConfig
from llm_models.serving.llama import LlamaServingModel
from llm_models.serving.model import PromptSlots
from llm_models.serving.pool import LayeredPool
from llm_models.serving.sizes import blocks_for
from llm_models.texts import PYTHON_REFERENCE

from . import attention, llama_modes, native
from .bandwidth import ReadProbe
from .fast_llama import FastLlama, fused_matrices
from .floors import kernel_bytes
from .hf import rewind
from .int8_quality import int8_quality
from .workloads import Runner, synchronizer

ROUND_TRIP = "ours-prealloc on the int8 round trip"  # the untimed step the int8 mode is checked against
CACHE_CONTENTS = ("random keys and values of the exact shape, T - 1 positions per layer and key/value head, "
                  "the same in both caches; the step adds the T-th")


def llama_pair(preset: str, seed: int) -> tuple[LlamaDecoder, LlamaForCausalLM, dict[str, Any], ChatModel | None]:
    """Our decoder and transformers' model on the same float32 tensors, what the weights are, and the trained
    model's tokenizer with it (None for a random model)."""
    if preset == "smollm2":
        from llm_models.llama.generate import smollm2
        from llm_models.llama.weights import GGUF_NAME, trained

        weights = trained()
        chat = smollm2(torch.float32)
        return chat.model, weights.reference, {
            "name": "SmolLM2-135M-Instruct", "trained": True, "source": f"{GGUF_NAME}, dequantized to float32",
            "sha256": weights.digest}, chat
    if preset == "tiny":
        from llm_models.llama.tiny import tiny_pair

        reference, model = tiny_pair(seed)
        return model, reference, {"name": "tiny random Llama", "trained": False,
                                  "source": f"transformers' initializer, seed {seed}", "sha256": None}, None
    raise ValueError(f"unknown Llama preset {preset!r}; choose smollm2 or tiny")


def random_layers(model: LlamaDecoder, cached: int, generator: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """Per layer, (1, Hkv, cached, D) keys and values drawn from ``generator``."""
    config = model.config
    shape = (llama_modes.LLAMA_BATCH, config.kv_heads, cached, config.head_dim)
    return [(torch.randn(shape, generator=generator).to(config.dtype),
             torch.randn(shape, generator=generator).to(config.dtype)) for _ in range(config.layers)]


def step_runners(model: LlamaDecoder, reference: LlamaForCausalLM, context: int, generator: torch.Generator,
                 fast: Mapping[str, FastLlama | NativeStep] | None = None, round_trip: LlamaDecoder | None = None,
                 served: LlamaServingModel | None = None) -> tuple[dict[str, Runner], list[Tensor]]:
    """Per mode, one decode step at ``context`` over the same random cache contents and the reset that rewinds
    its cache (run outside the clock); and the list every step appends its logits to, which the reset clears.
    With ``round_trip`` (our decoder on the int8 round trip of the weights) its untimed step is there too, as
    ``ROUND_TRIP``: the int8 mode's reference. With ``served``, the served step over the same contents in a pool."""
    device = model.device
    cached = context - 1
    layers = [(keys.to(device), values.to(device)) for keys, values in random_layers(model, cached, generator)]
    ours = model.new_cache(llama_modes.LLAMA_BATCH, context)  # room for exactly the T positions the step attends over
    for store, (keys, values) in zip(ours, layers, strict=True):
        store.keys[:, :, :cached] = keys
        store.values[:, :, :cached] = values
        store.length = cached
    # Copies: transformers' cache concatenates onto its tensors, ours writes into its own buffers.
    theirs = (DynamicCache(ddp_cache_data=[(k.clone(), v.clone()) for k, v in layers]) if cached
              else DynamicCache(config=reference.config))
    token = torch.randint(0, model.config.vocab_size, (llama_modes.LLAMA_BATCH, 1), generator=generator).to(device)
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

    runners: dict[str, Runner] = {"ours-prealloc": (ours_step, ours_reset), "hf-dynamic": (hf_step, hf_reset)}
    for mode, twin in (fast or {}).items():
        runners[mode] = own_cache_runner(twin.step, twin.model, layers, token, context, held)
    if round_trip is not None:
        runners[ROUND_TRIP] = own_cache_runner(round_trip, round_trip, layers, token, context, held)
    if served is not None:
        runners[llama_modes.LLAMA_SERVED] = served_runner(served, layers, int(token[0, 0]), context, held)
    return runners, held


def served_runner(served: LlamaServingModel, layers: list[tuple[Tensor, Tensor]], token: int, context: int,
                  held: list[Tensor]) -> Runner:
    """The served step for one request whose first ``context - 1`` positions hold ``layers``' keys and values,
    written into a pool of the serving engine's block size where the server's prefill writes them (PromptSlots). The step writes position ``context - 1``
    in place, so running it again repeats the same step: the reset only drops the logits."""
    cached, size = context - 1, EngineConfig.block_size
    if cached < 1:
        raise ValueError(f"the served step needs at least one cached position before it, got context {context}")
    pool = LayeredPool(served.config, served.layers, blocks_for(context, size), size)
    table = pool.allocate(blocks_for(context, size))
    slots = PromptSlots(pool, cached, table)  # where a prefill of the first context - 1 positions writes them
    for index, (keys, values) in enumerate(layers):  # (1, Hkv, cached, D) each
        slots.write(index, keys, values)

    def run() -> None:
        held.append(served.decode(pool, [token], [cached], [table])[:, None])  # (1, 1, vocab), as the decoder's

    def reset() -> None:
        held.clear()

    return run, reset


def own_cache_runner(step: Callable[[Tensor, list[LayerCache]], Tensor], model: LlamaDecoder,
                     layers: list[tuple[Tensor, Tensor]], token: Tensor, context: int, held: list[Tensor]) -> Runner:
    """``step`` (a fast twin's, or our decoder's on other weights) over its own copy of the cache contents, in
    ``model``'s cache layout, and its reset."""
    cached = context - 1
    cache = model.new_cache(llama_modes.LLAMA_BATCH, context)
    for store, (keys, values) in zip(cache, layers, strict=True):
        store.keys[:, :, :cached] = keys
        store.values[:, :, :cached] = values
        store.length = cached

    def run() -> None:
        held.append(step(token, cache))

    def reset() -> None:
        held.clear()
        rewind_ours(cache, cached)

    return run, reset


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
    entry = harness.compare(logits["ours-prealloc"], logits["hf-dynamic"], llama_modes.LLAMA_ATOL, llama_modes.LLAMA_RTOL,
                            f"Llama ours-prealloc differs from hf-dynamic at context {context}")
    fast = {mode: harness.compare(logits[mode], logits[reference_of(mode)], llama_modes.LLAMA_FAST_ATOL,
                                  llama_modes.LLAMA_FAST_RTOL, f"Llama {mode} differs from {reference_of(mode)} at "
                                  f"context {context}")
            for mode in llama_modes.LLAMA_CHECKED if mode in logits}
    return {"context": context, **entry, "fast": fast}


def reference_of(mode: str) -> str:
    """The untimed step a fast mode must equal: ours-prealloc, or for int8 weights ours on their round trip."""
    return ROUND_TRIP if llama_modes.LLAMA_WEIGHTS[mode] == "int8" else llama_modes.LLAMA_REFERENCE


# ---- the benchmark's trained-model section: load and check before timing, then the rotated repetitions ----
def max_positions(preset: str) -> int:
    """The positions a Llama preset's config allows, read without loading any weights."""
    from llm_models.llama.config import LlamaDecoderConfig
    from llm_models.llama.tiny import TINY

    return LlamaDecoderConfig().max_positions if preset == "smollm2" else TINY.max_position_embeddings


def prepare(args: argparse.Namespace, threads: list[int],
            kernel_ns: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """The Llama pair, its cache at every context, and every context's equivalence, before any timing;
    ``kernel_ns`` stands in for the kernel table's timings (kernel_table)."""
    started = time.perf_counter_ns()
    bench.progress(f"Llama: loading {args.llama_preset} on this lab's decoder and on transformers' LlamaForCausalLM")
    model, reference, weights, chat = llama_pair(args.llama_preset, args.seed)
    # each timed copy of the weights in one buffer of its own, on 2 MiB pages once settled (llm_models.gathered)
    gather_parameters(model)
    gather_parameters(reference)
    round_trip = LlamaDecoder(model.config, dequantized_state_dict(reference.state_dict()))
    generator = torch.Generator().manual_seed(args.seed + 4)
    runners, checks = {}, []
    torch.set_num_threads(threads[0])
    kernels = kernel_table(model, threads[0], kernel_ns)
    attention = attention_table(model, args.contexts, args.seed, kernel_ns)
    fast: dict[str, FastLlama | NativeStep] = {}
    for mode, (weight_format, compiled) in llama_modes.LLAMA_FAST.items():
        fast[mode] = FastLlama(model, kernels["chosen"][llama_modes.kernel_set(weight_format, compiled)], compiled,
                               attention["chosen"])
        bench.progress(f"Llama {mode}: {'compiling its layer and head regions' if compiled else 'first step'}")
        kernels["warm_s"][mode] = fast[mode].warm()
    for mode, weight_format in llama_modes.LLAMA_NATIVE.items():
        bench.progress(f"Llama {mode}: the whole step in one C call, packing its {weight_format} weights")
        started_native = time.perf_counter()
        fast[mode] = NativeStep(model, weight_format)
        kernels["warm_s"][mode] = time.perf_counter() - started_native + fast[mode].warm()
    bench.progress(f"Llama {llama_modes.LLAMA_SERVED}: the serving core's kernel table, {threads[0]} thread(s)")
    served = LlamaServingModel(model, None if kernel_ns is None else served_timings(kernel_ns))
    with torch.inference_mode():
        for context in args.contexts:
            bench.progress(f"Llama equivalence: one step per mode at context {context}, ours against transformers, "
                           f"the float32 fast modes against ours, {llama_modes.LLAMA_INT8} against ours on the int8 "
                           "round trip")
            runners[context] = step_runners(model, reference, context, generator, fast, round_trip, served)
            checks.append(check_step(*runners[context], context))
    return {"model": model, "round_trip": round_trip, "chat": chat, "weights": weights, "runners": runners,
            "equivalence": checks, "kernels": kernels, "attention": attention, "served_kernels": served.kernels.as_record(),
            "served_way": served.decode_way,
            "prepare_ns": time.perf_counter_ns() - started}


def served_timings(kernel_ns: Mapping[str, Mapping[str, float]]) -> dict[str, dict[int, dict[str, float]]]:
    """The serving core's kernel timings (kind -> rows -> kernel -> ns) a test's fixed ranking implies: the same
    ranking among the serving core's candidates, at every row count it times."""
    return {kind: {rows: {name: ns for name, ns in kernel_ns[kind].items() if name in serving_kernels.CANDIDATES}
                   for rows in serving_kernels.ROWS} for kind in MATRIX_KINDS}


def kernel_table(model: LlamaDecoder, threads: int,
                 supplied_ns: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Every candidate kernel of each weight format timed over every matrix of each fused kind, at ``threads``,
    and per format the fastest per kind: the fast modes' kernels, chosen by this measurement. ``supplied_ns``
    (kind -> kernel -> ns) stands in for the timings, so a test runs each outcome of the choice on any CPU (the
    compiled set's fallback when oneDNN wins, either int8 kernel); the record says so."""
    runs, missing = matvec.available([name for names in llama_modes.KERNEL_CANDIDATES.values() for name in names])
    how = "timed" if supplied_ns is None else "supplied"
    bench.progress(f"Llama kernel table: {', '.join(runs)} over each kind of fused matrix, {threads} thread(s)"
                   + ("" if supplied_ns is None else "; timings supplied by the caller, not measured"))
    kinds = fused_matrices(model)
    kernels = {name: (matvec.KERNELS[name].prepare, matvec.KERNELS[name].eager) for name in runs}
    ns = timing.measure(kinds, lambda dtype, rows: kernels, (1,), llama_modes.KERNEL_PASSES,
                        supplied_ns=None if supplied_ns is None else {kind: {1: supplied_ns[kind]} for kind in kinds})
    rows = [{"kind": kind, "shape_out_in": list(matrices[0].shape), "matrices": len(matrices),
             "kernels": {name: {"bytes": matvec.KERNELS[name].bytes_per_matrix(*matrices[0].shape), "ns": ns[kind][1][name]}
                         for name in runs}}
            for kind, matrices in kinds.items()]
    traceable = {name: matvec.KERNELS[name].traced is not None for name in runs}
    chosen = {}
    for weight_format, compiled in llama_modes.KERNEL_CHOICES:
        present = llama_modes.set_candidates(weight_format, compiled, runs, traceable)
        if not present:
            raise RuntimeError(f"no {weight_format} kernel{' a compiled region can trace' if compiled else ''} runs "
                               "here: " + "; ".join(f"{name}: {why}" for name, why in missing.items()))
        chosen[llama_modes.kernel_set(weight_format, compiled)] = {
            row["kind"]: llama_modes.fastest_kernel(row, present) for row in rows}
    return {"threads": threads, "passes": llama_modes.KERNEL_PASSES, "timings": how, "unavailable": missing,
            "descriptions": {name: matvec.KERNELS[name].description for name in runs},
            "formats": {name: matvec.KERNELS[name].weights for name in runs}, "traceable": traceable, "rows": rows,
            "chosen": chosen, "native_build_s": int8_loop.build().seconds + native.build().seconds
            + native_step.build().seconds, "warm_s": {}}


def attention_table(model: LlamaDecoder, contexts: list[int], seed: int,
                    kernel_ns: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Both ways of attending (decode_bandwidth.attention) over one random cache per layer of ``model`` at every
    context, at the thread count in force; the fast modes take the faster. With ``kernel_ns`` (a test's fixed
    outcome) its "attention" entry (way -> ns per layer) stands in for the timings."""
    supplied = None
    if kernel_ns is not None:
        if "attention" not in kernel_ns:
            raise ValueError("kernel_ns fixes the kernel table's outcome, so it must fix attention's too: give it an "
                             "'attention' entry (way -> ns per layer), as decode_bandwidth.testing.kernel_ranking does")
        supplied = kernel_ns["attention"]
    config = model.config
    bench.progress(f"Llama attention: {' and '.join(attention.available()[0])} over {config.layers} layer caches at "
                   f"contexts {', '.join(map(str, contexts))}"
                   + ("" if supplied is None else "; timings supplied by the caller, not measured"))
    return attention.measure(config.layers, config.kv_heads, config.heads // config.kv_heads, config.head_dim,
                             contexts, seed, supplied)


def fastest_read(floor_ns: Mapping[str, int], buffer_bytes: int) -> str:
    """The read kernel whose pass in ``floor_ns`` moved its bytes fastest: the one each paired round reads again."""
    return max(floor_ns, key=lambda name: kernel_bytes(name, buffer_bytes) / floor_ns[name])


Attempt = dict[str, Any]  # one group's rounds: order, floor_ns, round_floor and each mode's durations_ns


def measured_groups(keys: list[tuple[int, int]], measure: Callable[[int, int, int], Attempt],
                    rates: Callable[[Attempt], list[float]], progress: harness.Progress, rounds: int
                    ) -> dict[tuple[int, int], list[Attempt]]:
    """Every (threads, context) group's attempts: each measured once (``measure(threads, context, attempt)``), then
    the group whose floor reads ran most slowed measured again, up to LLAMA_REMEASURE times (llama_modes.most_slowed
    over each attempt's round read ``rates``)."""
    attempts = {key: [measure(*key, 0)] for key in keys}
    for _ in range(llama_modes.LLAMA_REMEASURE):
        slowed = llama_modes.most_slowed({key: [rates(attempt) for attempt in tries] for key, tries in attempts.items()},
                                         {key: key[0] for key in keys})
        if slowed is None:
            break
        progress.bar.total += rounds
        progress.note(f"Llama {slowed[0]}t context {slowed[1]}: its floor reads ran more than "
                      f"{llama_modes.LLAMA_SLOWED:.0%} under the fastest at {slowed[0]} thread(s); measuring it again")
        attempts[slowed].append(measure(*slowed, len(attempts[slowed])))
    return attempts


def section(args: argparse.Namespace, threads: list[int], prepared: dict[str, Any], reader: ReadProbe,
            floor: Callable[[], dict[str, int]]) -> dict[str, Any]:
    """Paired rounds at every (threads, context): one pass of each of the floor's read kernels (``floor``) before
    the group, then ``args.llama_rounds`` rounds, each one pass of the fastest of those kernels and one step of
    every mode in rotated order. Every ratio the page draws (a step over its floor, over transformers', int8 over
    its own floor) is a ratio within one round (labkit.summary.paired). Groups whose floor reads ran slowed are
    measured again (llama_modes.most_slowed); the record's raw Llama section."""
    started = time.perf_counter_ns()
    rounds = args.llama_rounds
    progress = harness.Progress(len(threads) * len(args.contexts) * rounds)

    def measure(count: int, context: int, attempt: int) -> Attempt:
        torch.set_num_threads(count)
        modes, held = prepared["runners"][context]

        def run(mode: str, modes: dict[str, Any] = modes) -> int:
            step, reset = modes[mode]
            elapsed = bench.time_ns(step)
            reset()
            return elapsed

        label = f"Llama {count}t context {context}" + (f", attempt {attempt + 1}" if attempt else "")
        beside = floor()
        kernel = fastest_read(beside, reader.read)
        with torch.inference_mode():
            order, durations, round_floor = harness.time_rounds(
                llama_modes.LLAMA_MODES, run, rounds, args.warmup, progress, label,
                before_round=functools.partial(reader.one, kernel))
        progress.note(f"{label}: median " + ", ".join(f"{m} {median(d) / 1e6:.1f} ms" for m, d in durations.items()))
        return {"order": order, "floor_ns": beside, "round_floor": {"kernel": kernel, "durations_ns": round_floor},
                "durations_ns": durations}

    def rates(attempt: Attempt) -> list[float]:
        read = attempt["round_floor"]
        return [kernel_bytes(read["kernel"], reader.read) / ns * 1e9 for ns in read["durations_ns"]]

    keys = [(count, context) for count in threads for context in args.contexts]
    try:
        attempts = measured_groups(keys, measure, rates, progress, rounds)
    finally:
        progress.close()
    groups, cells = [], []
    for (count, context), tries in attempts.items():
        kept = llama_modes.kept_attempt([rates(attempt) for attempt in tries])
        chosen = tries[kept]
        groups.append({"threads": count, "context": context, "order": chosen["order"], "floor_ns": chosen["floor_ns"],
                       "round_floor": chosen["round_floor"],
                       "set_aside": [attempt for index, attempt in enumerate(tries) if index != kept]})
        cells += [{"mode": mode, "threads": count, "context": context, "durations_ns": chosen["durations_ns"][mode]}
                  for mode in llama_modes.LLAMA_MODES]
    quality = measure_quality(prepared, threads[-1], args.seed)
    torch.set_num_threads(args.threads)
    return {"preset": args.llama_preset, "model": prepared["model"].config.as_record(), "weights": prepared["weights"],
            "reference": "transformers' LlamaForCausalLM on the same tensors, with its DynamicCache",
            "batch": llama_modes.LLAMA_BATCH, "dtype": llama_modes.LLAMA_DTYPE, "threads": threads, "contexts": args.contexts,
            "repeats": rounds, "warmup": args.warmup, "modes": llama_modes.LLAMA_MODES, "baseline": llama_modes.LLAMA_BASELINE,
            "order_policy": bench.ORDER_POLICY, "cache_contents": CACHE_CONTENTS,
            "tolerance": {"atol": llama_modes.LLAMA_ATOL, "rtol": llama_modes.LLAMA_RTOL}, "equivalence": prepared["equivalence"],
            "fast_tolerance": {"atol": llama_modes.LLAMA_FAST_ATOL, "rtol": llama_modes.LLAMA_FAST_RTOL},
            "kernels": prepared["kernels"], "attention": prepared["attention"],
            "served_kernels": prepared["served_kernels"], "served_way": prepared["served_way"],
            "int8_reference": ROUND_TRIP, "quality": quality,
            "groups": groups, "cells": cells,
            "remeasure": {"slowed": llama_modes.LLAMA_SLOWED, "limit": llama_modes.LLAMA_REMEASURE},
            "wall_time_s": (prepared["prepare_ns"] + time.perf_counter_ns() - started) / 1e9}


def measure_quality(prepared: dict[str, Any], threads: int, seed: int) -> dict[str, Any]:
    """The int8 round trip against float32 (decode_bandwidth.int8_quality): over the long text and one greedy
    answer for the trained model; over seeded random tokens for a random one. Untimed, at ``threads``."""
    model, chat = prepared["model"], prepared["chat"]
    positions = llama_modes.quality_positions(model.config.max_positions)
    if chat is not None:
        text = PYTHON_REFERENCE
        ids = torch.tensor([chat.encode(text.read())[:positions + 1]])
        prompt = chat.chat_ids([{"role": "user", "content": llama_modes.QUALITY_PROMPT}])
        source: dict[str, Any] = {"text": text.name, "sha256": text.sha256, "prompt": llama_modes.QUALITY_PROMPT}
    else:
        generator = torch.Generator().manual_seed(seed + 5)
        ids = torch.randint(0, model.config.vocab_size, (1, positions + 1), generator=generator)
        prompt = torch.randint(0, model.config.vocab_size, (8,), generator=generator).tolist()
        source = {"text": f"seeded random tokens, seed {seed + 5}", "sha256": None, "prompt": None}
    new_tokens = min(llama_modes.QUALITY_NEW_TOKENS, model.config.max_positions - len(prompt))
    bench.progress(f"Llama quality: float32 and the int8 round trip over {positions} positions, then one greedy "
                   f"answer of {new_tokens} tokens each, {threads} thread(s)")
    torch.set_num_threads(threads)
    started = time.perf_counter()
    found = int8_quality(model, prepared["round_trip"], ids, positions, prompt, new_tokens)
    answers = {name: chat.decode(tokens) if chat is not None else None
               for name, tokens in found["greedy"]["ids"].items()}
    return {**source, **found, "answers": answers, "threads": threads, "seconds": time.perf_counter() - started}
