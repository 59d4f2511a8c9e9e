"""The load experiment on the trained model: real prompts against ``kv_serving.server --model smollm2``.

The same engine as the random model's runs, so the same measurements: the repository's fixed prompt set
(kv_serving/prompts.json, its digest in the record) arrives as a Poisson process at several rates, each rate at a
fresh server that admits by KV bytes; the highest rate once more at a server that runs one request at a time
(``--max-running 1``: the one-at-a-time server as a mode of this engine, and every request's solo run); and the
admission comparison (by bytes, by a safe count, by a mean count) on a smaller pool. Before any load, the
in-process gate shows batched paged decoding of the first prompts equal to each alone, as the random model's does.
Every request's tokens are kept, so the record can show each batched run's tokens against the solo run's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from dataclasses import replace
from typing import Any

import torch

from labkit import bench, huge_pages
from llm_models.llama.generate import smollm2
from llm_models.serving.admission import kv_positions
from llm_models.serving.dtypes import TRAINED_TOLERANCES
from llm_models.serving.kernels import timings_of
from llm_models.serving.llama import LlamaServingModel, served
from llm_models.serving.pool import LayeredPool, pool_block_bytes
from llm_models.serving.sizes import blocks_for
from llm_models.texts import PYTHON_REFERENCE

from .loadgen import run_load
from .workload import PROMPTS, WorkItem, real_prompts, real_workload

MODEL = "smollm2"
# NOTE: the trained model is served in float32 whatever dtype the random model's probe chose (the probe times a batch
# of 16 where bfloat16 may win): its decode steps take the one-call C step over float32 matrices or their int8 codes,
# which bfloat16 would leave for torch's layer, and the decode lab, whose steps the serving page sets these beside,
# times float32 and int8. A bfloat16-capable CPU then serves the same model as one without.
TRAINED_DTYPE = "float32"
# Sized to the benchmark's five minutes on two cores: the serial run (every request's solo run, one after another)
# is the longest of the trained runs, about requests x (a prefill + max_tokens steps).
DEFAULTS = {"trained_requests": 16, "trained_max_tokens": 28, "trained_rates": [4.0, 64.0],
            "trained_blocks": 128, "trained_admission_blocks": 40}
QUICK = {"trained_requests": 4, "trained_max_tokens": 6, "trained_rates": [64.0], "trained_blocks": 48,
         "trained_admission_blocks": 24}
GATE_PROMPTS, GATE_STEPS = 3, 8  # the in-process gate: the first real prompts, batched against alone
# One request's decode step at these contexts, in process: the decode lab times its trained steps at the same three,
# so the serving page can set the served step beside that lab's fastest (each page reads its own record).
SOLO_CONTEXTS = (128, 512, 1024)
QUICK_SOLO_CONTEXTS = (16, 64)
# ...and at these thread counts (a full run; a quick one at the run's own): the server's default and two, the
# decode lab's other count. Every count's model chooses by the kernel table timed at the run's own count (the decode
# steps read none: they take the one-call step; the table picks the short prefills' kernels).
SOLO_THREADS = (1, 2)
SEED_OFFSET = 7  # the trained runs' arrivals, apart from the random model's workloads
# What a client sees per token, beside the step that makes it, in paired rounds at the solo contexts: each round runs
# the served step in process CLIENT_TOKENS - 1 times, and one streamed request to an idle one-at-a-time server whose
# prompt leaves it at the same context and which asks for CLIENT_TOKENS tokens (the first from its prefill, then
# CLIENT_TOKENS - 1 gaps between tokens, each one decode step as the client receives it); the two sides alternate
# which goes first. The client's servers cache prefixes, and one untimed request per context fills that cache first:
# each round's request then prefills only its last partial block, where prefilling every prompt whole took 74 s of
# the benchmark's five minutes (both formats, 1,024 tokens the longest). The decode steps a client times read the
# same blocks either way.
CLIENT_ROUNDS, QUICK_CLIENT_ROUNDS = 4, 2
CLIENT_TOKENS = 9
# The one-at-a-time server each weight format's client streams from, float32 and int8 codes (--weights int8).
CLIENT_SERVERS = {"float32": "trained client", "int8": "trained client int8"}
CLIENT_PREFIX_CACHE = "hash"  # their --prefix-caching
# Batched against one at a time in paired rounds: each round sends the same burst (the first BATCHING_REQUESTS
# prompts at once, BATCHING_TOKENS tokens each) to the batching server of the highest rate and to the serial server,
# alternating which goes first; the figure is the median of the per-round throughput ratios with its middle half
# (labkit.summary.paired), where the sweep's ratio divides one run by another. The burst is smaller than the sweep's
# so that BATCHING_ROUNDS rounds cost about 45 s: the serial side is about 8 x (a short prefill + 15 steps). With
# four rounds the middle halves of two runs back to back (3.25-3.31 and 3.21-3.25) just missed each other.
BATCHING_ROUNDS, QUICK_BATCHING_ROUNDS = 6, 2
BATCHING_REQUESTS, BATCHING_TOKENS = 8, 16
QUICK_BATCHING = (3, 4)  # a quick run's burst: requests, tokens


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--trained-requests", type=int, default=DEFAULTS["trained_requests"],
        help="real prompts of the trained model's runs, the file's first (default: %(default)s)")
    add("--trained-max-tokens", type=int, default=DEFAULTS["trained_max_tokens"],
        help="max_tokens of each (default: %(default)s)")
    add("--trained-rates", type=float, nargs="+", default=DEFAULTS["trained_rates"],
        help="arrival rates of the trained model's sweep; the highest also serves one at a time (default: %(default)s)")
    add("--trained-blocks", type=int, default=DEFAULTS["trained_blocks"],
        help="KV blocks of the trained sweep's pools (default: %(default)s)")
    add("--trained-admission-blocks", type=int, default=DEFAULTS["trained_admission_blocks"],
        help="KV blocks of the trained admission comparison's pools (default: %(default)s)")


def prompt_ids(requests: int) -> list[list[int]]:
    """Each real prompt's ids as the server makes them (chat template, or plain text)."""
    chat = smollm2()
    prompts, _ = real_prompts()
    return [chat.chat_ids(p["messages"]) if p["kind"] == "chat" else chat.encode(p["prompt"]) for p in prompts[:requests]]


def plan(args: argparse.Namespace, budget_share: float) -> dict[str, Any]:
    """The workload's sizes and the servers' arguments, known before any server starts."""
    ids = prompt_ids(args.trained_requests)
    size, out = args.block_size, args.trained_max_tokens
    need = [blocks_for(kv_positions(len(p), out), size) for p in ids]
    longest, mean = max(need), statistics.mean(need)
    pool = args.trained_admission_blocks
    budget = int(pool * budget_share)
    if budget < longest or args.trained_blocks < longest:
        raise ValueError(f"--trained-admission-blocks {pool} (budget {budget}) and --trained-blocks "
                         f"{args.trained_blocks} must hold the longest request, {longest} blocks of {size}")
    config = smollm2(getattr(torch, TRAINED_DTYPE)).model.config
    block = pool_block_bytes(config, config.layers, size)
    # the bursts are the experiment: no queue bound may refuse them (a count far above any run's, no time bound)
    common = ["--model", MODEL, "--block-size", str(size), "--max-waiting", "1024", "--ttft-target-s", "0",
              "--threads", str(args.threads), "--dtype", TRAINED_DTYPE]
    sweep = ["--num-blocks", str(args.trained_blocks), *common]
    small = ["--num-blocks", str(pool), *common]
    safe, average = max(1, pool // longest), max(1, round(pool / mean))
    by_bytes = ("kv_budget_bytes", f"by KV bytes: {budget * block:,} bytes = {budget} of the pool's {pool} blocks",
                [*small, "--kv-budget-bytes", str(budget * block)])
    if safe == average:
        # NOTE: prompts of nearly one size give both counts the same server; running it twice bought a second
        # sample of one policy, not a comparison, and a server start and a run of the benchmark's five minutes
        counts = [("count_safe", f"by count: {safe} running (safe for the longest request, and the count sized "
                                 f"for the mean one too)", [*small, "--max-running", str(safe)])]
    else:
        counts = [("count_safe", f"by count: {safe} running (safe for the longest request)",
                   [*small, "--max-running", str(safe)]),
                  ("count_average", f"by count: {average} running (sized for the mean request)",
                   [*small, "--max-running", str(average)])]
    policies = [by_bytes, *counts]
    servers = {**{f"trained rate {rate:g}": sweep for rate in args.trained_rates},
               "trained serial": [*sweep, "--max-running", "1"],
               **{f"trained {name}": options for name, _, options in policies}}
    client = [*sweep, "--max-running", "1", "--prefix-caching", CLIENT_PREFIX_CACHE]  # idle but for the client (CLIENT_SERVERS)
    servers[CLIENT_SERVERS["float32"]] = client
    servers[CLIENT_SERVERS["int8"]] = [*client, "--weights", "int8"]  # the float32 model's codes: their client side
    return {"prompt_tokens": [len(p) for p in ids], "request_blocks": need, "policies": policies,
            "servers": servers, "ids": ids, "sweep": sweep}


def workload_identity(args: argparse.Namespace) -> dict[str, int]:
    """The fields of a trained section that say which workload it measured: its requests, their max_tokens and the
    seed of their arrivals (a section reused from another run must match them: benchmark.reused_trained)."""
    return {"requests": args.trained_requests, "max_tokens": args.trained_max_tokens, "seed": args.seed + SEED_OFFSET}


def run(args: argparse.Namespace, urls: dict[str, str], planned: dict[str, Any], measure: Any,
        kernel_ns: str | None = None) -> dict[str, Any]:
    """Every trained run, one fresh server each; ``measure(url, items)`` is the benchmark's; ``kernel_ns``, the
    kernel timings the servers were handed (the in-process int8 model is handed them too)."""
    requests, out = args.trained_requests, args.trained_max_tokens
    _, digest = real_prompts()

    def workload(rate: float) -> list[Any]:
        return real_workload(requests, rate, args.seed + SEED_OFFSET, out, planned["ids"])

    points = []
    for rate in args.trained_rates:
        bench.progress(f"trained model, {requests} real prompts at {rate:g}/s: byte budget")
        points.append({"rate": rate, **measure(urls[f"trained rate {rate:g}"], workload(rate))})
    highest = max(args.trained_rates)
    bench.progress(f"trained model, the same prompts at {highest:g}/s, one at a time")
    serial = {"rate": highest, **measure(urls["trained serial"], workload(highest))}
    batching = batching_rounds(args, urls[f"trained rate {highest:g}"], urls["trained serial"], planned["ids"])
    client = client_steps(args, {weights: urls[name] for weights, name in CLIENT_SERVERS.items() if name in urls},
                          kernel_ns)
    policies = []
    for name, label, options in planned["policies"]:
        bench.progress(f"trained model, admission {label}: at {highest:g}/s")
        policies.append({"name": name, "label": label, "options": options,
                         **measure(urls[f"trained {name}"], workload(highest))})
    return {"model_name": MODEL, "prompt_file": str(PROMPTS.relative_to(PROMPTS.parents[4])),
            "prompts_sha256": digest, **workload_identity(args),
            "prompt_tokens": planned["prompt_tokens"], "request_blocks": planned["request_blocks"],
            "sweep_blocks": args.trained_blocks, "admission_blocks": args.trained_admission_blocks,
            "points": points, "serial": serial, "batching_rounds": batching, "client_steps": client, "admission": {"policies": policies}}


def batching_rounds(args: argparse.Namespace, batched_url: str, serial_url: str, ids: list[list[int]]) -> dict[str, Any]:
    """Paired rounds of batched against one at a time (BATCHING_ROUNDS, in the comment above), on the two servers the
    sweep's highest rate and its serial run used, after those runs: each round one burst to each, the order
    alternating. Per round and side: the seconds from the first send to the last token, and the tokens written."""
    rounds = QUICK_BATCHING_ROUNDS if args.quick else BATCHING_ROUNDS
    requests, tokens = QUICK_BATCHING if args.quick else (BATCHING_REQUESTS, BATCHING_TOKENS)
    requests = min(requests, len(ids))
    tokens = min(tokens, args.trained_max_tokens)  # never longer than the sweep's own requests
    # all at once: the arrivals' times are the sweep's concern; a burst gives both servers the same queue
    items = [replace(item, arrival_s=0.0) for item in real_workload(requests, 1.0, 0, tokens, ids[:requests])]
    bench.progress(f"trained model, batched against one at a time: {rounds} paired rounds of {requests} prompts at "
                   f"once, {tokens} tokens each")
    sides: dict[str, dict[str, list[Any]]] = {side: {"seconds": [], "tokens": []} for side in ("batched", "serial")}
    for index in range(rounds):
        for side in bench.run_order(("batched", "serial"), index):
            run = asyncio.run(run_load(batched_url if side == "batched" else serial_url, items, MODEL,
                                       metrics_interval_s=3600.0))
            unfinished = [r for r in run.requests if r.outcome != "completed"]
            if unfinished:
                raise RuntimeError(f"batched against one at a time, round {index + 1}, {side}: request "
                                   f"{unfinished[0].index} ended {unfinished[0].outcome} "
                                   f"({unfinished[0].error or 'no error'})")
            sides[side]["seconds"].append(run.duration_s)
            sides[side]["tokens"].append(sum(r.tokens for r in run.requests))
    return {"rounds": rounds, "requests": requests, "max_tokens": tokens,
            "order_policy": "alternating: even rounds the batching server first, odd rounds the serial one first",
            **sides}


def gate(args: argparse.Namespace, planned: dict[str, Any], gate_fn: Any, timed: Any) -> dict[str, Any]:
    """The in-process gate on the trained model in the served dtype: the first prompts batched against alone; then
    one request's step at each context, timed by ``timed(step, repeats)`` (the benchmark's rule)."""
    chat = smollm2(getattr(torch, TRAINED_DTYPE))
    model = served(chat.model)
    bench.progress(f"trained model: equivalence in {TRAINED_DTYPE}, batched paged decode vs each request alone")
    result = gate_fn(model, model.layers, planned["ids"][:GATE_PROMPTS], GATE_STEPS, args.block_size, TRAINED_TOLERANCES)
    contexts = QUICK_SOLO_CONTEXTS if args.quick else SOLO_CONTEXTS
    counts = (args.threads,) if args.quick else tuple(dict.fromkeys((args.threads, *SOLO_THREADS)))
    tables, steps = [], []
    try:
        for threads in counts:
            bench.progress(f"trained model: one request's decode step at contexts {', '.join(map(str, contexts))}, "
                           f"{threads} thread{'s' if threads > 1 else ''}")
            torch.set_num_threads(threads)
            # the run's own count serves the model the gate checked, whose kernel table every server was handed;
            # another count steps the same weights by the same picks. NOTE: the decode steps take the one-call step,
            # which reads no table (llm_models.serving.llama); timing a table per count only bought prefill picks
            at = model if threads == args.threads else LlamaServingModel(chat.model, timings_of(model.kernels.rows))
            if threads == args.threads:
                tables.append(at.kernels.as_record())
            steps += solo_steps(at, args, contexts, timed, threads)
            del at
    finally:
        torch.set_num_threads(args.threads)
    return {"model": chat.model.config.as_record(), "tolerance": dict(TRAINED_TOLERANCES[TRAINED_DTYPE]),
            "equivalence": result, "kernels": tables, "solo_steps": steps, "decode_way": model.decode_way}


def solo_steps(model: Any, args: argparse.Namespace, contexts: tuple[int, ...], timed: Any,
               threads: int) -> list[dict[str, Any]]:
    """One request's decode step (batch 1, the served dtype) attending over ``contexts`` positions, at the
    ``threads`` in force: what a stream alone on the server waits for per token. Its cache holds zeros: a step's time
    depends on how many positions it reads, not on their values (both models' equivalence is proven before this on
    real prompts)."""
    return [{"threads": threads, "context": context, **timed(solo_step(model, context, args.block_size), args.repeats)}
            for context in contexts]


def client_steps(args: argparse.Namespace, urls: dict[str, str], kernel_ns: str | None = None) -> dict[str, Any]:
    """Paired rounds at each solo context (CLIENT_ROUNDS, in the comment above), for each weight format's
    one-at-a-time server in ``urls`` (weights -> url, idle): the served step in process at ``args.threads`` over
    the same weights, and one streamed completion to that server, whose gaps between tokens the client times. The
    prompt is the long text's first ``context - 1`` tokens, so the request's decode steps attend over the same
    positions as the in-process step (and a few more)."""
    chat = smollm2(getattr(torch, TRAINED_DTYPE))
    text = chat.encode(PYTHON_REFERENCE.read())
    contexts = QUICK_SOLO_CONTEXTS if args.quick else SOLO_CONTEXTS
    rounds = QUICK_CLIENT_ROUNDS if args.quick else CLIENT_ROUNDS
    if len(text) < max(contexts):
        raise ValueError(f"the long text holds {len(text)} tokens, fewer than the {max(contexts)} a context needs")
    torch.set_num_threads(args.threads)
    rows = []
    for weights, url in urls.items():
        # float32: the gate's model (a per-process cache, given the kernels the servers were handed)
        model = served(chat.model) if weights == "float32" else served(chat.model, kernel_ns, weights)
        for context in contexts:
            bench.progress(f"trained model, {weights} weights: what a client sees per token at context {context}, "
                           f"{rounds} rounds of {CLIENT_TOKENS - 1} in-process steps and one streamed request")
            rows.append({"weights": weights, **client_rounds(model, url, text, context, rounds, args.block_size,
                                                                  settle=not args.quick)})
    return {"rounds": rounds, "tokens": CLIENT_TOKENS, "threads": args.threads,
            "server": {weights: CLIENT_SERVERS[weights] for weights in urls}, "prefix_caching": CLIENT_PREFIX_CACHE,
            "prompt": PYTHON_REFERENCE.name,
            "order_policy": "alternating: even rounds in process first, odd rounds the client first", "rows": rows}


def solo_step(model: Any, context: int, block_size: int) -> Any:
    """One request's decode step at ``context`` positions over a pool of its own, as a no-argument callable: the
    step the solo and the client's rounds time. Its cache holds zeros (a step's time depends on how many positions
    it reads, not on their values)."""
    pool = LayeredPool(model.config, model.layers, blocks_for(context, block_size), block_size)
    table = pool.allocate(blocks_for(context, block_size))

    def step() -> None:
        model.decode(pool, [0], [context - 1], [table])

    return step


def client_rounds(model: Any, url: str, text: list[int], context: int, rounds: int, block_size: int,
                  settle: bool = True) -> dict[str, Any]:
    """One context's paired rounds against the server at ``url``: the in-process step and one streamed request.
    ``settle`` moves this process's memory onto 2 MiB pages first (labkit.huge_pages), as each server does at its
    start; the quick mode's servers run in this process's threads, so settling walks all of their memory too
    (14 s of a quick run's 86) for timings the quick mode never reads."""
    step = solo_step(model, context, block_size)
    if settle:
        huge_pages.settle()  # the in-process step's weights and pool on 2 MiB pages, as the server's are
    item = WorkItem(0, 0.0, text[: context - 1], CLIENT_TOKENS)
    in_process: list[list[int]] = []
    client: list[list[int]] = []
    first_token: list[int] = []
    step()  # warm, as the solo steps are
    # and the server's prefix cache: the rounds' requests find every full block of the prompt there
    warm = asyncio.run(run_load(url, [replace(item, max_tokens=1)], MODEL, metrics_interval_s=3600.0)).requests[0]
    if warm.outcome != "completed":
        raise RuntimeError(f"the client's warming request at context {context} ended {warm.outcome} "
                           f"({warm.error or 'no error'})")
    for index in range(rounds):
        for side in bench.run_order(("in process", "client"), index):
            if side == "in process":
                with torch.inference_mode():
                    in_process.append([bench.time_ns(step) for _ in range(CLIENT_TOKENS - 1)])
                continue
            # one /metrics read at the start, none during the stream: a poll would share the server's loop
            request = asyncio.run(run_load(url, [item], MODEL, metrics_interval_s=3600.0)).requests[0]
            if request.outcome != "completed" or len(request.itl_s) < 2 or request.ttft_s is None:
                raise RuntimeError(f"the client's request at context {context} ended {request.outcome} with "
                                   f"{request.tokens} tokens ({request.error or 'no error'}): no interval to time")
            client.append([round(gap * 1e9) for gap in request.itl_s])
            first_token.append(round(request.ttft_s * 1e9))
    return {"context": context, "prompt_tokens": context - 1, "in_process_ns": in_process,
            "client_gaps_ns": client, "client_ttft_ns": first_token}
