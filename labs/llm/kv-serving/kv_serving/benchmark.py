"""Serving measurements: admission by count vs by KV bytes, cancellation on vs off, latency vs arrival rate.

    labs/.venv/bin/python labs/llm/kv-serving/benchmark.py --output results/serving-results.json

Before any load, the serving model proves that batched paged decoding gives
each request the tokens and logits it gets alone (the equivalence gate),
and one decode step is timed at several batch sizes; the trained model
prefills prompts of ever-new lengths while this process's resident memory
is read after each (the memory section). Every experiment then
starts the lab server as its own process on 127.0.0.1 and drives it with
the load generator, which speaks only the OpenAI completions protocol.
Targets are reported in the record, never asserted. Written atomically at
the end; a failed run keeps the old record.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import torch

from labkit import bench, harness
from labkit.manifest import lab_for
from llm_models import paged
from llm_models.llama.generate import smollm2
from llm_models.serving import dtypes, kernels
from llm_models.serving.admission import kv_positions
from llm_models.serving.dtypes import (
    CHOSEN_BY_FLAG,
    CHOSEN_BY_SUPPLIED_PROBES,
    CHOSEN_BY_TIMING,
    DTYPES,
    TOLERANCES,
    tie_bound,
)
from llm_models.serving.engine import SERVING_LAYERS, SERVING_MODEL, serving_model
from llm_models.serving.kernel_rows import PREFILL_PACKED_ROWS
from llm_models.serving.llama import LlamaServingModel, served
from llm_models.serving.model import ServingModel, greedy_together
from llm_models.serving.pool import LayeredPool, pool_block_bytes
from llm_models.serving.sizes import blocks_for
from llm_models.serving.sizes import budget_blocks as blocks_in_budget

from . import chunked, figures, trained_load
from .launch import server_processes, server_threads
from .loadgen import RunResult, run_load
from .workload import WorkItem, WorkloadSpec, make_workload, real_prompts

LAB, ROOT = lab_for(__file__)

DEFAULTS = {"repeats": 9, "requests": 20, "admission_rate": 8.0, "cancel_requests": 16, "cancel_rate": 8.0,
            "rates": [4.0, 16.0, 64.0], "rate_requests": 20, "num_blocks": 112, "sweep_blocks": 256,
            "block_size": 16, "prompt_max": 256, "output_max": 128, "step_batches": [1, 2, 3, 4, 8, 16, 32]}
QUICK = {"repeats": 3, "requests": 12, "admission_rate": 40.0, "cancel_requests": 10, "cancel_rate": 40.0,
         "rates": [20.0, 80.0], "rate_requests": 10, "num_blocks": 40, "sweep_blocks": 60, "prompt_max": 48, "output_max": 24,
         "step_batches": [1, 4]}
METRICS_INTERVAL_S = 0.05
# The byte-admission server's KV budget, as a share of its pool. Below 1 on purpose: with the whole pool as the
# budget, the allocator alone would keep reservations within it, and "peak within budget" would measure nothing.
BYTE_BUDGET_SHARE = 0.75
STEP_WARMUP = 3  # untimed decode steps before each batch size's timed ones
TARGET_SPEEDUP = 4.0  # batched throughput at saturation over one request at a time (the page aims for 6x)
DTYPE_PROBE_BATCH = 16  # the batch at which the model's dtype is chosen: where batching is meant to pay
TARGET_WALL_TIME_S = 300.0  # `make bench` for this lab within 5 minutes on the reference machine


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__)
    add = parser.add_argument
    add("--requests", type=int, default=DEFAULTS["requests"], help="requests of the admission workload (default: %(default)s)")
    add("--admission-rate", type=float, default=DEFAULTS["admission_rate"], help="their arrivals per second (default: %(default)s)")
    add("--cancel-requests", type=int, default=DEFAULTS["cancel_requests"], help="requests of the cancellation workload (default: %(default)s)")
    add("--cancel-rate", type=float, default=DEFAULTS["cancel_rate"], help="their arrivals per second (default: %(default)s)")
    add("--rates", type=float, nargs="+", default=DEFAULTS["rates"], help="arrival rates of the sweep (default: %(default)s)")
    add("--rate-requests", type=int, default=DEFAULTS["rate_requests"], help="requests per rate (default: %(default)s)")
    add("--num-blocks", type=int, default=DEFAULTS["num_blocks"], help="KV blocks in every server's pool (default: %(default)s)")
    add("--sweep-blocks", type=int, default=DEFAULTS["sweep_blocks"], help="KV blocks of the rate sweep's and the serial server's pool (default: %(default)s)")
    add("--block-size", type=int, default=DEFAULTS["block_size"], help="positions per block (default: %(default)s)")
    add("--prompt-max", type=int, default=DEFAULTS["prompt_max"], help="longest prompt, tokens (default: %(default)s)")
    add("--output-max", type=int, default=DEFAULTS["output_max"], help="largest max_tokens (default: %(default)s)")
    add("--step-batches", type=int, nargs="+", default=DEFAULTS["step_batches"], help="batch sizes of the step timing (default: %(default)s)")
    add("--dtype", choices=["auto", *DTYPES], default="auto",
        help="the model's dtype; auto times the weight multiplies of a batch of 16 in both and takes the faster: "
             "bfloat16 where the CPU multiplies it natively (default: %(default)s)")
    trained_load.add_arguments(parser)
    parser.set_defaults(repeats=DEFAULTS["repeats"])
    positions = SERVING_MODEL.max_positions
    args = harness.parse(parser, argv, QUICK | trained_load.QUICK, {
        "trained_requests": (1, len(real_prompts()[0])), "trained_max_tokens": (1, 512),
        "trained_blocks": (1, 1 << 16), "trained_admission_blocks": (1, 1 << 16),
        "requests": (1, 2000), "cancel_requests": (1, 2000), "rate_requests": (1, 2000), "num_blocks": (1, 1 << 16), "sweep_blocks": (1, 1 << 16),
        "block_size": (1, positions), "prompt_max": (8, positions), "output_max": (8, positions),
        "step_batches": (1, 256)})
    if args.prompt_max + args.output_max > positions:
        parser.error(f"--prompt-max {args.prompt_max} + --output-max {args.output_max} exceeds the model's "
                     f"{positions} positions")
    if len(set(args.trained_rates)) != len(args.trained_rates) or min(args.trained_rates) <= 0:
        parser.error(f"--trained-rates must be distinct and positive, got {args.trained_rates}")
    if len(set(args.rates)) != len(args.rates):
        parser.error(f"--rates must be distinct (each rate gets its own server), got {args.rates}")
    if min(args.admission_rate, args.cancel_rate, *args.rates) <= 0:
        parser.error(f"arrival rates must be positive, got {args.admission_rate}, {args.cancel_rate}, {args.rates}")
    longest = blocks_for(kv_positions(args.prompt_max, args.output_max), args.block_size)
    for name in ("num_blocks", "sweep_blocks"):
        if getattr(args, name) < longest:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)} cannot hold the longest request the "
                         f"workload allows ({longest} blocks of {args.block_size})")
    if budget_blocks(args.num_blocks) < longest:
        parser.error(f"--num-blocks {args.num_blocks} gives a byte budget of {budget_blocks(args.num_blocks)} blocks "
                     f"({BYTE_BUDGET_SHARE:g} of the pool), below the {longest} blocks of the longest request the "
                     f"workload allows")
    return args


def budget_blocks(num_blocks: int) -> int:
    """The byte-admission server's budget in blocks: BYTE_BUDGET_SHARE of its pool, rounded down (as
    kv_serving.figures derives byte_budget_blocks from the record)."""
    return blocks_in_budget(num_blocks, BYTE_BUDGET_SHARE)


def spec(args: argparse.Namespace, requests: int, rate: float, seed_offset: int, leave: float = 0.0) -> WorkloadSpec:
    return WorkloadSpec(requests, rate, args.seed + seed_offset, SERVING_MODEL.vocab_size, (8, args.prompt_max),
                        (8, args.output_max), leave)


# ---- in-process: the equivalence gate and the cost of one step ---------------------------------------------
def equivalence(model: ServingModel, args: argparse.Namespace) -> dict[str, Any]:
    """The random model's gate (``equivalence_gate``) on random prompts of different lengths."""
    generator = torch.Generator().manual_seed(args.seed)
    lengths = [5, 40, 17, 1, 100]
    prompts = [torch.randint(0, SERVING_MODEL.vocab_size, (n,), generator=generator).tolist() for n in lengths]
    return equivalence_gate(model, SERVING_LAYERS, prompts, 12, args.block_size, TOLERANCES)


def equivalence_gate(model: ServingModel | LlamaServingModel, layers: int, prompts: list[list[int]], steps: int,
         block_size: int, tolerances: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Greedy decoding of prompts of different lengths, batched together, then each alone fed the batched row's
    tokens (the same inputs at every step): logits within ``tolerances`` for the model's dtype (dtypes.TOLERANCES
    element-wise, or TRAINED_TOLERANCES, in bfloat16 by steps at each row's scale) at every step. Where alone's
    argmax differs from the batched choice, the two logits were a tie within that rounding: recorded as a tie with
    its margin, refused beyond dtypes.tie_bound."""
    dtype = str(model.config.dtype).removeprefix("torch.")
    tolerance = tolerances[dtype]
    lengths = [len(p) for p in prompts]
    blocks = sum(blocks_for(n + steps, block_size) for n in lengths)

    def run(batch: list[list[int]], forced: list[list[int]] | None = None) -> tuple[list[list[int]], list[torch.Tensor]]:
        pool = LayeredPool(model.config, layers, blocks, block_size)
        return greedy_together(model, pool, batch, steps, forced)

    together, together_logits = run(prompts)
    worst, largest, worst_steps, ties = 0.0, 0.0, 0.0, []
    for b, prompt in enumerate(prompts):
        chosen, alone_logits = run([prompt], forced=[together[b]])
        batched, alone = together_logits[b].float(), alone_logits[0].float()  # (steps + 1, vocab)
        worst = max(worst, float((batched - alone).abs().max()))
        largest = max(largest, float(alone.abs().max()))
        if dtypes.row_scaled(tolerance):
            for step, (row, reference) in enumerate(zip(batched, alone)):
                scale, apart = float(reference.abs().max()), float((row - reference).abs().max())
                worst_steps = max(worst_steps, apart / dtypes.bfloat16_step(scale))
                if apart > dtypes.difference_bound(tolerance, scale):
                    raise bench.EquivalenceError(
                        f"request {b} (prompt {len(prompt)}) step {step}: batched differs from alone by {apart:.3g}, "
                        f"{apart / dtypes.bfloat16_step(scale):.1f} bfloat16 steps at the row's largest |logit| "
                        f"{scale:.3g}, beyond {dtypes.tolerance_text(tolerance)}")
        elif not torch.allclose(batched, alone, atol=tolerance["atol"], rtol=tolerance["rtol"]):
            raise bench.EquivalenceError(f"request {b} (prompt {len(prompt)}) batched differs from alone by up to "
                                         f"{worst:.3g}, beyond {dtypes.tolerance_text(tolerance)} for {dtype}")
        for step, (alone_token, batched_token) in enumerate(zip(chosen[0], together[b])):
            if alone_token != batched_token:
                row = alone[step]
                ties.append({"request": b, "step": step, "margin": float(row[alone_token] - row[batched_token])})
    bound = tie_bound(tolerance, largest)
    for tie in ties:
        if tie["margin"] > bound:
            raise bench.EquivalenceError(f"request {tie['request']} step {tie['step']}: batched and alone chose "
                                         f"different tokens {tie['margin']:.3g} apart, beyond the {bound:.3g} "
                                         f"rounding can explain")
    row_steps = {"max_row_steps": worst_steps} if dtypes.row_scaled(tolerance) else {}
    return {"prompt_lengths": lengths, "steps": steps, "max_abs_diff": worst, "max_abs_reference": largest,
            **row_steps, "within_tolerance": True, "ties": ties}  # tokens_identical is derived from ties


def weights_only(model: ServingModel, batch: int) -> Callable[[], None]:
    """The step's multiplications by weights alone, on a batch of random activations: every layer's fused
    projection, output projection and feed-forward network, and the output head. No attention, no gather, no
    cache writes: what a batch shares, timed apart from what it does not."""
    x = torch.randn(batch, 1, model.config.width, generator=torch.Generator().manual_seed(batch)).to(model.config.dtype)

    @torch.inference_mode()
    def run() -> None:
        for block in model.blocks:
            block.qkv(x)
            block.out(x)
            block.ffn(x)
        model.blocks[-1].head(x)

    return run


def timed(step: Callable[[], None], repeats: int) -> dict[str, Any]:
    """The durations alone: their median, min and max are derived (kv_serving.figures)."""
    for _ in range(STEP_WARMUP):
        step()
    return {"durations_ns": [bench.time_ns(step) for _ in range(repeats)]}


def step_times(model: ServingModel, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One decode step at each batch size, rows at different positions (128 on average); then, at the same batch
    size, the step's weight multiplications alone."""
    rows = []
    for batch in args.step_batches:
        pool = LayeredPool(model.config, SERVING_LAYERS, batch * blocks_for(256, args.block_size), args.block_size)
        tables = [pool.allocate(blocks_for(256, args.block_size)) for _ in range(batch)]
        positions = [64 + (b * 37) % 128 for b in range(batch)]
        tokens = [b % model.config.vocab_size for b in range(batch)]
        def step(pool: LayeredPool = pool, tokens: list[int] = tokens, positions: list[int] = positions,
                 tables: list[list[int]] = tables) -> None:
            model.decode(pool, tokens, positions, tables)

        rows.append({"batch": batch, **timed(step, args.repeats),
                     "weights": timed(weights_only(model, batch), args.repeats)})
    return rows


# ---- in-process: resident memory while prompts of ever-new lengths arrive --------------------------------------
# The prompts, one request each, after a warm-up prompt a token longer than any (prefill_memory): first every row
# count the packed kernel may still meet in a prefill (1 to PREFILL_PACKED_ROWS, 528 tokens: the whole bounded set it
# keeps a primitive for), then every length from MEMORY_LONGEST down to PREFILL_PACKED_ROWS + 1 (the BLAS kernel's),
# each new to this process, the longest first, so that no prompt needs more activation memory than one before it.
# 64 prompts, 2,080 tokens: about 8 s at the 250 tokens/s one quiet thread prefilled the trained model at these
# lengths on the 2-core AMD EPYC (88 prompts took 21 s of a reference run that must fit 20 minutes). With oneDNN's
# packed kernel taking these prefills, each new length there kept about 1.7 MB: the window's 24 new lengths would
# show some 40 MB, where after the warm-up no prompt moved resident memory by more than 4 kB.
MEMORY_LONGEST = 64
# Prompts above the bound before the window whose growth the figures judge (kv_serving.figures): what the allocator
# still does after the warm-up lands here, not in the window. Measured there: after the warm-up, none of the 56 moved
# resident memory by more than 4 kB; in a run without one, the first of them moved it by 4.7 MB, the next seven by up
# to 0.4 MB each.
MEMORY_SETTLE = 8
MEMORY_QUICK_WINDOW = 4  # a quick run's prompts after the settling ones: the section's shape, 514 tokens in 2 to 4 s
MEMORY_QUICK_STRIDE = 8  # and every 8th row count of the packed kernel's
MEMORY_SEED_OFFSET = 11  # the prompts' random token ids, apart from the other sections'
STATUS = Path("/proc/self/status")  # VmRSS: this process's resident memory, in kB


def memory_lengths(quick: bool) -> list[int]:
    """The section's prompt lengths in the order prefilled: the packed kernel's row counts, then the longer ones from
    the longest down; every one distinct."""
    longest = PREFILL_PACKED_ROWS + MEMORY_SETTLE + MEMORY_QUICK_WINDOW if quick else MEMORY_LONGEST
    packed = range(1, PREFILL_PACKED_ROWS + 1, MEMORY_QUICK_STRIDE if quick else 1)
    return [*packed, *range(longest, PREFILL_PACKED_ROWS, -1)]


def resident_bytes() -> int | None:
    """This process's resident memory now (VmRSS), None where the system has no /proc/self/status."""
    try:
        lines = STATUS.read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("VmRSS:")), None)


def prefill_memory(model: LlamaServingModel, lengths: Sequence[int], block_size: int, seed: int,
                   settle: int = MEMORY_SETTLE) -> dict[str, Any] | None:
    """Each of ``lengths`` as one request's prompt, one after another, through the served model's prefill over a pool,
    as the scheduler prefills a request admitted alone (blocks for its prompt, released after); this process's
    resident bytes before the first and after each. Before the first reading, one prompt a token longer than any of
    them (a length not among them): the pool's pages are touched only when first written, and a first prefill sets up
    buffers of its own (3.7 MB on the trained model), neither of them state kept per length. None where resident
    memory cannot be read. Random token ids: which kernels run and what they keep depend on a prompt's length, not on
    its ids."""
    warmup = max(lengths) + 1
    generator = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, model.config.vocab_size, (n,), generator=generator).tolist()
               for n in [warmup, *lengths]]
    # a prefill only (max_tokens 1): the pool holds the warm-up prompt, the longest
    pool = LayeredPool(model.config, model.layers, blocks_for(kv_positions(warmup, 1), block_size), block_size)

    def prefill(prompt: list[int]) -> None:
        table = pool.allocate(blocks_for(kv_positions(len(prompt), 1), block_size))
        try:
            model.prefill(pool, [prompt], [table])
        finally:
            pool.release(table)

    prefill(prompts[0])
    gc.collect()  # what ran before leaves no garbage to be freed in the middle of the run
    before, after = resident_bytes(), []
    if before is None:
        return None
    started = time.perf_counter()
    for prompt in prompts[1:]:
        prefill(prompt)
        after.append(resident_bytes())
    return {"packed_rows": PREFILL_PACKED_ROWS, "settle": settle, "block_size": block_size, "seed": seed,
            "threads": torch.get_num_threads(), "warmup_length": warmup, "lengths": list(lengths),
            "rss_before_bytes": before, "rss_bytes": after, "seconds": time.perf_counter() - started}


def memory_section(args: argparse.Namespace) -> dict[str, Any] | None:
    """The section on the trained model as the trained gate served it (the same copy: llm_models.serving.llama.served
    and smollm2 keep one per process), at the run's thread count."""
    model = served(smollm2(getattr(torch, trained_load.TRAINED_DTYPE)).model)
    lengths = memory_lengths(args.quick)
    bench.progress(f"trained model: resident memory over {len(lengths)} prompts of distinct lengths, each prefilled "
                   f"alone ({sum(lengths):,} tokens)")
    section = prefill_memory(model, lengths, args.block_size, args.seed + MEMORY_SEED_OFFSET)
    if section is None:
        bench.progress(f"no {STATUS}: resident memory not measured")
    return section


# ---- against a server process --------------------------------------------------------------------------------
def request_rows(run: RunResult, text: bool = False) -> list[dict[str, Any]]:
    """Each request's row; a text model's keeps its token ids and finish reason (to set against its solo run)."""
    return [{"index": r.index, "prompt_tokens": r.prompt_tokens, "max_tokens": r.max_tokens, "outcome": r.outcome,
             "status": r.status, "tokens": r.tokens, "sent_s": r.sent_s, "ttft_s": r.ttft_s, "e2e_s": r.e2e_s,
             "error": r.error, **({"token_ids": r.token_ids, "finish_reason": r.finish_reason} if text else {})}
            for r in run.requests]


def final_metrics(url: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """The server's counters once it has nothing left to do (requests of departed clients included). ``timeout_s``
    bounds a hang, not a slow machine: a server still busy after it fails the run rather than give counters of a
    run that has not ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = httpx.get(f"{url}/metrics", timeout=timeout_s).json()
        if metrics["num_running"] == 0 and metrics["num_waiting"] == 0:
            return metrics
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server at {url} still had {metrics['num_running']} running and "
                               f"{metrics['num_waiting']} waiting requests {timeout_s:g} s after the load ended")
        time.sleep(0.05)


def measure(url: str, workload: WorkloadSpec | list[WorkItem]) -> dict[str, Any]:
    """One load run against a server started for it alone: its counters and peaks describe this run only."""
    before = final_metrics(url)
    if before["submitted"] or before["decode_steps"]:
        raise RuntimeError(f"the server at {url} has served requests before this run; every run needs a fresh one")
    items = make_workload(workload) if isinstance(workload, WorkloadSpec) else workload
    text = any(item.text_request is not None for item in items)
    model = trained_load.MODEL if text else "kv-serving-random"
    run = asyncio.run(run_load(url, items, model, metrics_interval_s=METRICS_INTERVAL_S))
    after = final_metrics(url)
    server = {key: after[key] for key in SERVER_FIELDS}  # its mean_batch is derived (kv_serving.figures)
    return {"summary": run.summary(), "requests": request_rows(run, text), "occupancy": run.occupancy,
            "server": server}


def workload_record(workload: WorkloadSpec) -> dict[str, Any]:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(workload).items()}


SERVER_FIELDS = ("num_blocks", "budget_blocks", "num_used_blocks", "peak_used_blocks", "peak_running",
                 "decode_steps", "decode_rows", "prefills", "prefill_calls", "tokens_generated", "submitted", "completed",
                 "cancelled", "failed_for_memory", "refused_too_large", "refused_queue_full",
                 "decode_rows_after_disconnect", "prefills_after_disconnect", "decode_steps_with_departed",
                 "rows_dropped", "tokens_after_disconnect", "block_seconds_after_disconnect", "decode_seconds",
                 "prefill_seconds")


def admission_policies(args: argparse.Namespace) -> tuple[WorkloadSpec, dict[str, Any], list[tuple[str, str, list[str]]]]:
    """The workload, its requests' sizes in blocks, and the three policies: by bytes, by a safe count, by a mean
    count. The sizes the record stores beside them (longest, mean, budget bytes) are derived from these."""
    workload = spec(args, args.requests, args.admission_rate, 1)
    size = args.block_size
    need = [blocks_for(kv_positions(len(i.prompt), i.max_tokens), size) for i in make_workload(workload)]
    longest = blocks_for(workload.longest_positions, size)  # the longest request the workload allows
    mean = statistics.mean(need)
    blocks = budget_blocks(args.num_blocks)  # smaller than the pool: the policy, not the allocator, enforces it
    budget = blocks * pool_block_bytes(serving_model(args.dtype), SERVING_LAYERS, size)
    # the count limits keep the whole pool: they have no budget of their own
    safe, average = max(1, args.num_blocks // longest), max(1, round(args.num_blocks / mean))
    sizes = {"workload": workload_record(workload), "pool_blocks": args.num_blocks, "request_blocks": need}
    policies = [
        ("kv_budget_bytes", f"by KV bytes: {budget:,} bytes = {blocks} of the pool's {args.num_blocks} blocks",
         ["--kv-budget-bytes", str(budget)]),
        ("count_safe", f"by count: {safe} running (safe for the longest request)", ["--max-running", str(safe)]),
        ("count_average", f"by count: {average} running (sized for the mean request)", ["--max-running", str(average)]),
    ]
    return workload, sizes, policies


def admission(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    workload, sizes, policies = admission_policies(args)
    results = []
    for name, label, options in policies:
        bench.progress(f"admission {label}: {args.requests} requests at {args.admission_rate}/s")
        results.append({"name": name, "label": label, "options": options, **measure(urls[name], workload)})
    return {**sizes, "policies": results}


def cancellation(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    workload = spec(args, args.cancel_requests, args.cancel_rate, 2, leave=1.0)
    results = []
    for honor in (True, False):
        bench.progress(f"cancellation {'honoured' if honor else 'ignored'}: every client leaves partway")
        results.append({"honor_disconnect": honor, **measure(urls["honor" if honor else "ignore"], workload)})
    return {"workload": workload_record(workload), "modes": results}


def rates(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    points = []
    for rate in args.rates:
        bench.progress(f"arrival rate {rate}/s: {args.rate_requests} requests, byte budget")
        points.append({"rate": rate, **measure(urls[f"rate {rate:g}"], spec(args, args.rate_requests, rate, 3))})
    saturated = spec(args, args.rate_requests, max(args.rates), 3)
    bench.progress(f"serial: the same {args.rate_requests} requests at {saturated.rate}/s, one at a time")
    serial = {"rate": saturated.rate, **measure(urls["serial"], saturated)}
    return {"requests": args.rate_requests, "points": points, "serial": serial}  # best rate, speedup: derived


def server_arguments(args: argparse.Namespace) -> dict[str, list[str]]:
    """Every server the runs use, one fresh server per run, so its counters and peaks describe that run alone."""
    # the bursts are the experiment: no queue bound may refuse them (a count far above any run's, no time bound)
    common = ["--block-size", str(args.block_size), "--max-waiting", "1024", "--ttft-target-s", "0",
              "--threads", str(args.threads), "--dtype", args.dtype]
    pool = ["--num-blocks", str(args.num_blocks), *common]
    # The sweep's pool is larger than the admission experiment's; whether it still fills at a given rate is
    # measured (each run's peak), not assumed.
    sweep = ["--num-blocks", str(args.sweep_blocks), *common]
    _, _, policies = admission_policies(args)
    return {**{name: [*pool, *options] for name, _, options in policies},
            "honor": pool, "ignore": [*pool, "--ignore-disconnects"],
            **{f"rate {rate:g}": sweep for rate in args.rates}, "serial": [*sweep, "--max-running", "1"]}


def choose_dtype(args: argparse.Namespace,
                 supplied: Mapping[str, Sequence[int]] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Resolve --dtype auto: time one step's weight multiplies at a batch of DTYPE_PROBE_BATCH in float32 and in
    bfloat16 (the model built in each) and serve in the faster (dtypes.faster_dtype). Where the CPU has no native
    bfloat16 multiply, the emulated one loses and float32 is kept. Each dtype passes the equivalence gate before it
    is timed. ``supplied`` (dtype -> probe durations in ns) stands in for the timings: a test sets which dtype wins,
    so each branch runs on any CPU; the record says so. Sets args.dtype; returns what the record says of the
    choice, and the chosen model's gate."""
    if supplied is not None and (args.dtype != "auto" or sorted(supplied) != sorted(DTYPES)):
        raise ValueError(f"supplied probe timings need --dtype auto and one entry per dtype {list(DTYPES)}, got "
                         f"--dtype {args.dtype} and {sorted(supplied)}")
    probes, gates = {}, {}
    for dtype in DTYPES if args.dtype == "auto" else (args.dtype,):
        candidate = ServingModel(serving_model(dtype), SERVING_LAYERS)
        bench.progress(f"equivalence in {dtype}: batched paged decode vs each request alone")
        gates[dtype] = equivalence(candidate, args)
        probes[dtype] = ({"durations_ns": list(supplied[dtype])} if supplied is not None else
                         timed(weights_only(candidate, DTYPE_PROBE_BATCH), max(3, args.repeats // 3)))
    how = CHOSEN_BY_FLAG if args.dtype != "auto" else CHOSEN_BY_TIMING if supplied is None else CHOSEN_BY_SUPPLIED_PROBES
    if args.dtype == "auto":
        args.dtype = dtypes.faster_dtype(probes)
    bench.progress(f"dtype: {args.dtype} ({how})")
    return {"chosen": args.dtype, "how": how, "batch": DTYPE_PROBE_BATCH, "probes": probes}, gates[args.dtype]


def trained_sections(args: argparse.Namespace) -> dict[str, Any]:
    """The trained model's sections: its in-process gate, its resident memory where this machine can read it, then
    its servers."""
    planned = trained_load.plan(args, BYTE_BUDGET_SHARE)
    trained = trained_load.gate(args, planned, equivalence_gate, timed)
    # in process, before any server: a quick run's servers are threads of this process, and would count in its memory
    found = with_memory(args, {})
    launch = server_threads if args.quick else server_processes
    # Three rounds of servers, each started together and stopped before the next: the trained model's (each holds
    # its own copy of SmolLM2's weights), its two for chunked prefill, then the random model's. Starting every
    # process at once made their startups compete for the two cores long enough to outlast the startup bound on a
    # busy machine.
    # NOTE: every trained server chooses its kernels by the table the gate timed quietly, in process, at this run's
    # thread count: timed by each server while the others start, the servers of one run could multiply differently
    handed = kernels.dump_timings(kernels.timings_of(trained["kernels"][0]["rows"]))
    servers = {name: [*options, "--kernel-ns", handed] for name, options in planned["servers"].items()}
    bench.progress(f"starting {len(servers)} servers on 127.0.0.1: {', '.join(servers)}")
    with launch(list(servers.values())) as addresses:
        # the trained model first: what a reader would see from a real server
        section = {**trained, **trained_load.run(args, dict(zip(servers, addresses)), planned, measure, handed)}
    # a round of its own: two more copies of the weights beside the seven above would not fit in 24 GiB
    servers = {name: [*options, "--kernel-ns", handed]
               for name, options in chunked.server_arguments(planned["sweep"], args.quick).items()}
    bench.progress(f"starting {len(servers)} servers on 127.0.0.1: trained, {' and '.join(servers)} prefill")
    with launch(list(servers.values())) as addresses:
        section["chunked_prefill"] = chunked.run(args.quick, dict(zip(servers, addresses)))
    return {**found, "trained": section}


def with_memory(args: argparse.Namespace, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the memory section added where this machine can read it (memory_section)."""
    memory = memory_section(args)
    return record if memory is None else {**record, "memory": memory}


def reused_trained(args: argparse.Namespace, trained: Mapping[str, Any]) -> dict[str, Any]:
    """``trained``, a section another run in this process measured (tests only): the trained model is float32 whatever
    the random model's dtype (trained_load.TRAINED_DTYPE), so a test of the dtype choice's other branch need not
    measure it twice. Refused unless it was measured with this run's trained workload."""
    asked = trained_load.workload_identity(args)
    found = {name: trained.get(name) for name in asked}
    if found != asked:
        raise ValueError(f"a reused trained section must come from a run with the same trained workload: it has "
                         f"{found}, this run asks for {asked}")
    return copy.deepcopy(dict(trained))


def sections(args: argparse.Namespace, dtype_probes: Mapping[str, Sequence[int]] | None = None,
             trained: Mapping[str, Any] | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    choice, gate = choose_dtype(args, dtype_probes)
    model = ServingModel(serving_model(args.dtype), SERVING_LAYERS)
    record: dict[str, Any] = {"tolerance": dict(TOLERANCES[args.dtype]), "equivalence": gate}
    bench.progress(f"decode step time at batch sizes {args.step_batches}")
    record["step_times"] = step_times(model, args)
    size = args.block_size
    record["config"] = {
        "model": model.config.as_record(),
        "benchmark": {"layers": SERVING_LAYERS, "block_size": size, "num_blocks": args.num_blocks,
                      "sweep_blocks": args.sweep_blocks, "byte_budget_share": BYTE_BUDGET_SHARE,
                      "step_warmup": STEP_WARMUP,
                      "seed": args.seed, "quick": args.quick, "threads": args.threads, "repeats": args.repeats,
                      "metrics_interval_s": METRICS_INTERVAL_S,
                      "servers": "threads of the benchmark process" if args.quick else "separate processes",
                      "prompt_tokens": [8, args.prompt_max], "output_tokens": [8, args.output_max],
                      "rates": args.rates, "sampling": "greedy (argmax); every request runs to max_tokens",
                      "dtype_choice": choice,
                      # which way attention read the blocks (llm_models.serving.model.PagedRows): in place where the C loop
                      # was built, else gathered; the same logits within llm_models.paged.ATOL either way
                      "attention": ({"way": "in place", "unavailable": None} if paged.unavailable() is None else
                                    {"way": "gathered", "unavailable": paged.unavailable()})},
    }
    if trained is None:
        record.update(trained_sections(args))
    else:
        record.update(with_memory(args, {"trained": reused_trained(args, trained)}))
    launch = server_threads if args.quick else server_processes
    servers = server_arguments(args)
    bench.progress(f"starting {len(servers)} servers on 127.0.0.1: {', '.join(servers)}")
    with launch(list(servers.values())) as addresses:
        urls = dict(zip(servers, addresses))
        record["admission"] = admission(args, urls)
        record["cancellation"] = cancellation(args, urls)
        record["rates"] = rates(args, urls)
    record["wall_time_s"] = time.perf_counter() - started  # from building the model to the last server's stop
    # the page's targets, reported, never asserted: kv_serving.figures derives each verdict
    record["targets"] = {"speedup_target": TARGET_SPEEDUP, "wall_time_limit_s": TARGET_WALL_TIME_S}
    return record


def summary(record: dict[str, Any]) -> list[str]:
    t = record["targets"]
    lines = [f"{p['label']}: {p['summary']['completed']} completed, {p['summary']['failed']} failed, peak "
             f"{p['server']['peak_used_blocks']} of {p['server']['budget_blocks']} blocks allowed "
             f"(pool {p['server']['num_blocks']})" for p in record["admission"]["policies"]]
    honoured, ignored = (m["server"] for m in record["cancellation"]["modes"])
    lines.append(f"decode rows for departed clients: {honoured['decode_rows_after_disconnect']} honoured "
                 f"({honoured['rows_dropped']} dropped, {honoured['cancelled']} cancelled), "
                 f"{ignored['decode_rows_after_disconnect']} ignored; blocks leaked: "
                 f"{t['blocks_leaked_after_cancellation']}")
    lines.append(f"batched throughput {t['speedup_over_serial']:.2f}x serial (target {t['speedup_target']:g}x); "
                 f"wall time {t['wall_time_s']:.0f} s ({'within' if t['wall_time_met'] else 'over'} "
                 f"{t['wall_time_limit_s']:.0f} s)")
    return lines


def main(argv: Sequence[str] | None = None, dtype_probes: Mapping[str, Sequence[int]] | None = None,
         trained: Mapping[str, Any] | None = None) -> int:
    """Measure, validate against the schema, then replace the record in one rename. ``dtype_probes`` stands in for
    the dtype probe's timings (choose_dtype), ``trained`` for the trained model's section (reused_trained): tests
    only, never the command line."""
    args = parse_args(argv)
    return harness.run(LAB, ROOT, args, argv, lambda: sections(args, dtype_probes, trained), summary,
                       derive=figures.derive)
