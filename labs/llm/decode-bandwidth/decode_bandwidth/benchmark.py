"""Decode steps of a GPT-2-size model against the memory floor and against transformers, in one process.

    labs/.venv/bin/python labs/llm/decode-bandwidth/benchmark.py --output results/decode-results.json

First, every mode proves on a real prefix that it gives the full-sequence
logits (float32). Then the machine's sustained read bandwidth and matmul
throughput are measured at each thread count used, and the time of one
decode step is taken per mode over batch x context, with the modes' order
rotating between repetitions. Beside the grid, the trained SmolLM2-135M on
the project's Llama decoder and on transformers' Llama, batch 1, float32,
checked against each other at every context before its steps are timed. Then
a profile of one step per model, and a client's greedy generation with each.
Written atomically at the end; a failed run keeps the old record.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from decode_bandwidth import figures, llama
from decode_bandwidth.bandwidth import ReadProbe, last_level_cache_bytes, matmul_throughput, stream_buffer_bytes
from decode_bandwidth.compiled import CompiledDecoder, cold_inductor_cache
from decode_bandwidth.config import PRESETS, preset
from decode_bandwidth.equivalence import check_modes
from decode_bandwidth.figures import formulas
from decode_bandwidth.figures.formulas import WALL_TIME_TARGET_S
from decode_bandwidth.floors import MATMUL_SIZES, MIN_BANDWIDTH_PASSES, READ_KERNELS, STEP_SIZED_ROUNDS
from decode_bandwidth.grid import ATOL, BASELINE, MODES, RTOL, Group, headline_key
from decode_bandwidth.grid import grid as timed_groups
from decode_bandwidth.hf import hf_model
from decode_bandwidth.layout import measure_layouts
from decode_bandwidth.llama_modes import LLAMA_DTYPE, LLAMA_PRESETS, LLAMA_ROUNDS
from decode_bandwidth.model import Decoder
from decode_bandwidth.profile import minor_faults, profile_step
from decode_bandwidth.workloads import client_run, step_runners
from labkit import bench, harness, huge_pages
from labkit.manifest import lab_for
from labkit.summary import MIN_PARTED, median
from llm_models.kv_bytes import BYTES_PER_ELEMENT
from llm_models.llama.traffic import llama_step_bytes

LAB, ROOT = lab_for(__file__)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TIMER = ("time.perf_counter_ns around one decode step under torch.inference_mode, garbage collector paused; "
         "the step's outputs are kept until the clock has stopped, then freed, and the cache is rewound to "
         "T - 1 positions, untimed")
COMPILED_KERNEL = ("torch.compile (inductor, C++ for the CPU, static shapes) of (x * W).sum(-1) + b over an "
                   "(out, in) copy of each matrix, for every multiply of one row; more rows take ours-prealloc's "
                   "BLAS calls")
QUICK = {"preset": "tiny", "batches": [1, 2], "contexts": [16, 32], "variant_batches": [1], "repeats": 2,
         "warmup": 1, "equivalence_prefix": 8, "equivalence_steps": 2, "prompt": 8, "new_tokens": 4,
         "client_runs": 1, "bandwidth_passes": MIN_BANDWIDTH_PASSES, "profile_steps": 1,
         "llama_preset": "tiny", "compile_cache": "reuse", "llama_rounds": MIN_PARTED}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__)
    parser.print_usage = lambda file=None: None  # type: ignore[method-assign]  # an error is one line; --help has the rest
    parser.set_defaults(repeats=5, warmup=1)  # 5: each of the 5 modes leads once
    add = parser.add_argument
    add("--preset", default="gpt2-small", help=f"model: {', '.join(sorted(PRESETS))} (default: %(default)s)")
    add("--device", default="cpu", help="cpu or cuda (default: %(default)s)")
    add("--dtype", default="float32", help=f"headline grid dtype: {', '.join(DTYPES)} (default: %(default)s)")
    # 1 and 8 only: batch 8 at context 1,024 already reads more cache than weights, and every batch between costs the
    # grid its cells (the batch-16 cells took 62 s of the benchmark's five minutes on a 2-core AMD EPYC, batch 4's
    # 22 s on a 2-core Xeon; the seven benchmarks must fit 20 minutes together)
    add("--batches", type=int, nargs="+", default=[1, 8], help="batch sizes (default: %(default)s)")
    add("--contexts", type=int, nargs="+", default=[128, 512, 1024],
        help="positions a step attends over, the new token included (default: %(default)s)")
    add("--variant-threads", type=int, default=2, help="second thread count, timed at --variant-batches; "
        "0 for none (default: %(default)s)")
    add("--variant-dtype", default="bfloat16", help="second dtype, timed at --variant-batches; none for none "
        "(default: %(default)s)")
    add("--variant-batches", type=int, nargs="+", default=[1], help="batches of the variants (default: [1])")
    add("--equivalence-prefix", type=int, default=120, help="real prefix prefilled before the check (default: 120)")
    add("--equivalence-steps", type=int, default=8, help="decode steps checked after it (default: 8)")
    add("--prompt", type=int, default=128, help="client workload: prompt tokens (default: 128)")
    add("--new-tokens", type=int, default=32, help="client workload: tokens generated (default: 32)")
    add("--client-runs", type=int, default=2, help="client workload: runs per model (default: 2)")
    add("--bandwidth-passes", type=int, default=12, help="read-bandwidth passes, half before the timed steps and half "
        f"after, best kept; at least {MIN_BANDWIDTH_PASSES} (default: 12)")
    add("--profile-steps", type=int, default=5, help="decode steps profiled, median kept (default: 5)")
    add("--compile-cache", choices=("cold", "reuse"), default="cold", help="cold: ours-compiled's kernels compile "
        "into an empty inductor cache, so the recorded compile times are a fresh machine's; reuse: inductor's usual "
        "cache, faster for smoke runs (default: %(default)s)")
    add("--llama-preset", default="smollm2", help=f"the Llama model timed beside the grid at batch 1, float32, over "
        f"--contexts at --threads and --variant-threads: {', '.join(LLAMA_PRESETS)} (default: %(default)s)")
    add("--llama-rounds", type=int, default=LLAMA_ROUNDS, help="paired rounds per trained-model group: each round one "
        "pass of the floor's fastest read kernel and one step of every mode, rotated; every ratio is per round "
        "(default: %(default)s)")
    bounds = {"llama_rounds": (MIN_PARTED, 1000), "batches": (1, 256), "contexts": (1, 1 << 20), "variant_threads": (0, 256),
              "variant_batches": (1, 256), "equivalence_prefix": (1, 1 << 20), "equivalence_steps": (1, 1024),
              "prompt": (1, 1 << 20), "new_tokens": (1, 4096), "client_runs": (1, 100),
              "bandwidth_passes": (MIN_BANDWIDTH_PASSES, 1000), "profile_steps": (1, 100)}
    args = harness.parse(parser, argv, QUICK, bounds)
    check_inputs(parser, args)
    return args


def check_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Everything that would fail later, refused now in one line, before any model is built."""
    if args.preset not in PRESETS:
        parser.error(f"--preset {args.preset!r} is unknown; choose one of {', '.join(sorted(PRESETS))}")
    if args.llama_preset not in LLAMA_PRESETS:
        parser.error(f"--llama-preset {args.llama_preset!r} is unknown; choose one of {', '.join(LLAMA_PRESETS)}")
    positions = PRESETS[args.preset].max_positions
    for name, needed in (("contexts", max(args.contexts)),
                         ("equivalence-prefix + --equivalence-steps", args.equivalence_prefix + args.equivalence_steps),
                         ("prompt + --new-tokens", args.prompt + args.new_tokens)):
        if needed > positions:
            parser.error(f"--{name} needs {needed} positions, beyond the {positions} of preset {args.preset}")
    llama_positions = llama.max_positions(args.llama_preset)
    if max(args.contexts) > llama_positions:
        parser.error(f"--contexts needs {max(args.contexts)} positions, beyond the {llama_positions} of "
                     f"--llama-preset {args.llama_preset}")
    for name in ("batches", "contexts", "variant_batches"):
        values = getattr(args, name)
        if values != sorted(set(values)):
            parser.error(f"--{name.replace('_', '-')} must be strictly ascending, got {values}")
    if args.device not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda, got {args.device!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available to this PyTorch build")
    if args.variant_dtype == "none":
        args.variant_dtype = None
    for name, dtype in (("dtype", args.dtype), ("variant-dtype", args.variant_dtype)):
        if dtype is None:
            continue
        if dtype not in DTYPES:
            parser.error(f"--{name} {dtype!r} is not one of {', '.join(DTYPES)}")
        try:  # a multiply and a softmax in that dtype: the step's kinds of kernels
            probe = torch.ones(4, 4, dtype=DTYPES[dtype], device=args.device)
            (probe @ probe).softmax(-1)
        except (RuntimeError, TypeError) as error:
            parser.error(f"--{name} {dtype} cannot run on {args.device}: {str(error).splitlines()[0]}")
    if args.variant_dtype == args.dtype:
        args.variant_dtype = None  # the headline grid already covers it
    if args.variant_threads in (0, args.threads):
        args.variant_threads = None


def grid(args: argparse.Namespace) -> list[Group]:
    """(dtype, threads, batch, context) of every timed group: the headline grid, then the variants."""
    return timed_groups(vars(args))


def settle_pages(what: str) -> dict[str, Any]:
    """Everything allocated so far moved onto 2 MiB pages before it is timed (labkit.huge_pages says why), and
    the share that sits there, for the record."""
    settled = huge_pages.settle()
    after = settled.after
    state = settled.unavailable or ("coverage unreadable" if after is None else
                                    f"{after.huge_bytes / 2**20:,.0f} of {after.anonymous_bytes / 2**20:,.0f} MiB of "
                                    "anonymous memory on 2 MiB pages"
                                    + (f", {settled.refused:,} huge pages refused" if settled.refused else ""))
    bench.progress(f"pages: {what} settled in {settled.seconds:.1f} s; {state}")
    return settled.as_record()


def read_probe(args: argparse.Namespace) -> tuple[ReadProbe, int | None, str]:
    """The floor's read kernels over a buffer of at least four times the last-level cache, and that cache's size
    and where it was read."""
    llc, source = last_level_cache_bytes()
    return ReadProbe(stream_buffer_bytes(llc, args.quick), args.device), llc, source


def measure_hardware(args: argparse.Namespace, probe: tuple[ReadProbe, int | None, str], thread_counts: list[int],
                     dtypes: list[str], passes: int) -> dict[str, Any]:
    reader, llc, source = probe
    buffer = reader.read
    bandwidth, arithmetic = {}, {}
    for threads in thread_counts:
        torch.set_num_threads(threads)
        bench.progress(f"floor: read bandwidth over {buffer / 2**20:.0f} MiB at {threads} thread(s), {passes} passes "
                       f"of {len(READ_KERNELS)} read kernels")
        bandwidth[str(threads)] = reader.passes(passes)
        for dtype in dtypes:
            arithmetic[f"{dtype}/{threads}"] = matmul_throughput(DTYPES[dtype], 3, args.device,
                                                                 MATMUL_SIZES.get(dtype, 1024))
    torch.set_num_threads(args.threads)
    return {"last_level_cache_bytes": llc, "last_level_cache_source": source, "buffer_bytes": buffer,
            "bandwidth": bandwidth, "matmul": arithmetic}


def step_sized_reads(large: ReadProbe, step_bytes: int, threads: list[int], rounds: int,
                     device: str) -> dict[str, Any]:
    """The floor read over a buffer the size of the trained model's float32 step (its weights and KV at the longest
    context) beside the same kernels over the large buffer, in paired rounds at each thread count: where the
    step-sized read runs faster, part of a step's bytes can come from cache, and the large buffer's floor does not
    bound it. The step-sized buffer is freed when this returns."""
    small = ReadProbe(stream_buffer_bytes(None, quick=False, least=step_bytes), device)
    huge_pages.settle()  # on 2 MiB pages like the large buffer, or the two reads would differ by their pages
    entries: dict[str, Any] = {}
    for count in threads:
        torch.set_num_threads(count)
        bench.progress(f"floor: {rounds} paired rounds of the read kernels over {small.read / 2**20:.0f} MiB (the "
                       f"trained step's bytes) and {large.read / 2**20:.0f} MiB at {count} thread(s)")
        passes: dict[str, dict[str, list[int]]] = {"step": {}, "large": {}}
        for _ in range(rounds):
            for name, probe in (("step", small), ("large", large)):
                for kernel, durations in probe.durations(1).items():
                    passes[name].setdefault(kernel, []).extend(durations)
        entries[str(count)] = {"rounds": rounds, "step_ns": passes["step"], "large_ns": passes["large"]}
    del small
    return {"step_bytes": step_bytes, "threads": entries}


def merge_hardware(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Half the passes ran before the timed steps and half after: the best of all of them counts, so one busy
    moment on a shared machine cannot set the floor for the whole run. The passes only: ``derive`` adds
    the best of them and the rate it gives."""
    merged = {**before, "bandwidth": {}, "matmul": {}}
    for key, first in before["bandwidth"].items():
        kernels = {name: {"bytes": entry["bytes"],
                          "durations_ns": entry["durations_ns"] + after["bandwidth"][key]["kernels"][name]["durations_ns"]}
                   for name, entry in first["kernels"].items()}
        merged["bandwidth"][key] = {"buffer_bytes": first["buffer_bytes"],
                                    "passes": first["passes"] + after["bandwidth"][key]["passes"], "kernels": kernels}
    for key, first in before["matmul"].items():
        durations = first["durations_ns"] + after["matmul"][key]["durations_ns"]
        merged["matmul"][key] = {"size": first["size"], "passes": len(durations), "durations_ns": durations}
    return merged


def time_group(runners: dict[str, Any], args: argparse.Namespace, progress: harness.Progress,
               label: str) -> tuple[list[list[str]], dict[str, list[int]], dict[str, list[int]]]:
    """One group's rotated repetitions and each repetition's minor page faults; its caches are freed when
    this returns, before the next group's exist.

    Only the step is inside the clock: each mode's reset (rewind the cache, free the step's outputs) runs
    after the clock has stopped.
    """
    faults: dict[str, list[int]] = {mode: [] for mode in MODES}

    def run(mode: str) -> int:
        step, reset = runners[mode]
        before = minor_faults()
        elapsed = bench.time_ns(step)
        faults[mode].append(minor_faults() - before)
        reset()
        return elapsed

    with torch.inference_mode():
        order, durations = harness.time_rotated(MODES, run, args.repeats, args.warmup, progress, label)
    return order, durations, {mode: counts[-args.repeats:] for mode, counts in faults.items()}  # warm-ups came first


Models = tuple[Decoder, CompiledDecoder, Any]  # the eager decoder, its compiled twin, transformers' GPT-2


def compiled_twin(model: Decoder, threads: list[int], compile_s: dict[str, float]) -> CompiledDecoder:
    """The CompiledDecoder of ``model``, its one-row kernels compiled at every thread count before anything is
    timed or checked; the seconds each compile took go into ``compile_s``. The thread count in force is restored."""
    dtype = str(model.config.dtype).removeprefix("torch.")
    twin, in_force = CompiledDecoder.of(model), torch.get_num_threads()
    for count in threads:
        torch.set_num_threads(count)
        bench.progress(f"compile: ours-compiled's one-row kernels in {dtype} at {count} thread(s)")
        compile_s[f"{dtype}/{count}"] = twin.warm()
    torch.set_num_threads(in_force)
    return twin


def beside_floor(reader: ReadProbe) -> dict[str, int]:
    """One pass of each read kernel at the thread count in force, just before a group's steps: the floor that
    group's ratios use (a machine whose memory is shared with neighbours it cannot see reads differently through a
    run, and a floor measured once would price every group by one moment)."""
    return {name: durations[0] for name, durations in reader.durations(1).items()}


def time_groups(args: argparse.Namespace, models: dict[str, Models], reader: ReadProbe,
                progress: harness.Progress) -> list[dict[str, Any]]:
    """Every (dtype, threads, batch, context) group: the floor read beside it, then rotated repetitions of one step
    per mode."""
    groups = []
    generator = torch.Generator().manual_seed(args.seed + 1)
    for dtype, threads, batch, context in grid(args):
        torch.set_num_threads(threads)
        model, compiled, reference = models[dtype]
        label = f"{dtype} {threads}t batch {batch} context {context}"
        floor = beside_floor(reader)
        order, durations, faults = time_group(step_runners(model, compiled, reference, batch, context, generator), args,
                                              progress, label)
        groups.append({"dtype": dtype, "threads": threads, "batch": batch, "context": context, "order": order,
                       "durations": durations, "faults": faults, "floor_ns": floor})
        progress.note(f"{label}: median " + ", ".join(f"{m} {median(d) / 1e6:.1f} ms"
                                                      for m, d in durations.items()))
    torch.set_num_threads(args.threads)
    return groups


def groups_and_cells(timed: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The record's groups and cells, raw: ``derive`` adds each group's bytes and floors and each cell's
    statistics and ratio to its floor."""
    groups, cells = [], []
    for entry in timed:
        key = {name: entry[name] for name in ("dtype", "threads", "batch", "context")}
        groups.append({**key, "order": entry["order"], "floor_ns": entry["floor_ns"]})
        cells += [{"mode": mode, **key, "durations_ns": entry["durations"][mode], "minor_faults": entry["faults"][mode]}
                  for mode in MODES]
    return groups, cells


def client_section(args: argparse.Namespace, model: Decoder, reference: Any) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(args.seed + 2)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=generator).to(model.device)
    runs: dict[str, list[list[int]]] = {"ours": [], "transformers": []}
    tokens = {}
    with torch.inference_mode():
        for run in range(args.client_runs):
            for mode in bench.run_order(list(runs), run):
                bench.progress(f"client: {mode} generate, run {run + 1}/{args.client_runs}")
                stamps, chosen = client_run(mode, model, reference, prompt, args.new_tokens)
                runs[mode].append(stamps)
                tokens[mode] = chosen.cpu().tolist()
    return {"batch": 1, "prompt": args.prompt, "new_tokens": args.new_tokens, "greedy": True,
            "same_tokens": tokens["ours"] == tokens["transformers"],
            "modes": {mode: {"token_times_ns": stamps} for mode, stamps in runs.items()}}


def sections(args: argparse.Namespace, kernel_ns: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    started = time.perf_counter_ns()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    base = preset(args.preset, seed=args.seed)
    dtypes = [args.dtype] + ([args.variant_dtype] if args.variant_dtype else [])
    threads = [args.threads] + ([args.variant_threads] if args.variant_threads else [])

    bench.progress(f"building {args.preset} (float32) and transformers' GPT-2 with the same weights")
    model32 = Decoder(base, device)
    reference32 = hf_model(model32)
    compile_s: dict[str, float] = {}
    compiled32 = compiled_twin(model32, threads, compile_s)
    bench.progress(f"equivalence: prefill {args.equivalence_prefix} real tokens, then "
                   f"{args.equivalence_steps} decode steps, batch 2, every mode against one full pass")
    equivalence = check_modes(model32, compiled32, reference32, args.equivalence_prefix, args.equivalence_steps, args.seed)
    prepared = llama.prepare(args, threads, kernel_ns)
    torch.set_num_threads(args.threads)

    half = args.bandwidth_passes // 2
    probe = read_probe(args)
    pages = {"floor": settle_pages("the models and the floor's buffer")}
    before = measure_hardware(args, probe, threads, dtypes, half)
    step_total = llama_step_bytes(prepared["model"].config.as_record(), BYTES_PER_ELEMENT[LLAMA_DTYPE], 1,
                                           args.contexts[-1])["total"]
    step_sized = step_sized_reads(probe[0], step_total, threads, STEP_SIZED_ROUNDS, args.device)
    torch.set_num_threads(args.threads)
    bench.progress("layout: each matrix kind at batch 1: (in, out) addmm, (out, in) F.linear, oneDNN, compiled")
    with torch.inference_mode():
        layout = measure_layouts(model32, 5, compiled=compiled32.kernel)
        larger = [batch for batch in args.batches if batch > 1]
        bench.progress(f"layout: the same at batch {', '.join(map(str, larger))}" if larger else "layout: done")
        layout_batches = [measure_layouts(model32, 5, batch) for batch in larger]

    models: dict[str, Models] = {}
    other_layouts = {}  # the layout measurement in every other timed dtype: the stored layout was chosen in float32
    other_batches = {}  # and at the grid's larger batches: how the weight multiplies scale with batch per dtype
    for dtype in dtypes:
        if dtype == "float32":
            models[dtype] = (model32, compiled32, reference32)
        else:
            bench.progress(f"building the {dtype} copies of both models (the same weights, rounded)")
            model = Decoder(base.with_dtype(DTYPES[dtype]), device)
            # The variant dtype is timed at the headline thread count only (decode_bandwidth.grid).
            models[dtype] = (model, compiled_twin(model, [args.threads], compile_s), hf_model(model))
            bench.progress(f"layout: each matrix kind at batch 1 in {dtype}")
            with torch.inference_mode():
                other_layouts[dtype] = measure_layouts(model, 5, compiled=models[dtype][1].kernel)
                if larger:
                    bench.progress(f"layout: the same in {dtype} at batch {', '.join(map(str, larger))}")
                # 3 passes, not 5: emulated bfloat16 products at the larger batches take up to a second each on a
                # CPU without bfloat16 units, and these rows only show how each kind scales with batch.
                other_batches[dtype] = [measure_layouts(model, 3, batch) for batch in larger]
    pages["grid"] = settle_pages("the grid's models")
    progress = harness.Progress(len(grid(args)) * args.repeats)
    try:
        timed = time_groups(args, models, probe[0], progress)
    finally:
        progress.close()
    pages["trained"] = settle_pages("the trained model's modes")
    trained = llama.section(args, threads, prepared, probe[0], functools.partial(beside_floor, probe[0]))
    del prepared
    hardware = merge_hardware(before, measure_hardware(args, probe, threads, dtypes, args.bandwidth_passes - half))
    hardware["huge_pages"] = pages
    hardware["step_sized"] = {**step_sized, "buffer_bytes": stream_buffer_bytes(None, quick=False, least=step_total)}
    groups, cells = groups_and_cells(timed)

    model, compiled, reference = models[args.dtype]
    longest = args.contexts[-1]
    profiles = {}
    with torch.inference_mode():
        runners = step_runners(model, compiled, reference, 1, longest, torch.Generator().manual_seed(args.seed + 3))
        for mode in ("ours-prealloc", "hf-dynamic"):
            bench.progress(f"profile: {args.profile_steps} {mode} step(s), batch 1, context {longest}")
            profiles[mode] = profile_step(*runners[mode], model.config, args.profile_steps, device.type)
        del runners
    client = client_section(args, model, reference)

    return {
        "config": {
            "model": {**base.as_record(), "preset": args.preset},
            "benchmark": {
                "device": str(device), "dtype": args.dtype, "threads": args.threads, "seed": args.seed,
                "batches": args.batches, "contexts": args.contexts, "variant_threads": args.variant_threads,
                "variant_dtype": args.variant_dtype, "variant_batches": args.variant_batches,
                "repeats": args.repeats, "warmup": args.warmup, "modes": MODES, "baseline": BASELINE,
                "order_policy": bench.ORDER_POLICY, "quick": bool(args.quick),
                "cache_contents": "random keys and values of the exact shape, T - 1 positions per layer; "
                                  "the step adds the T-th; equivalence is proven on real prefixes before timing",
                "timer": TIMER,
            },
        },
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "equivalence": equivalence,
        "hardware": hardware,
        "compiled": {"kernel": COMPILED_KERNEL, "cold_cache": args.compile_cache == "cold", "compile_s": compile_s},
        "layout": layout,
        "layout_other_dtypes": other_layouts,
        "layout_batches": layout_batches,
        "layout_batches_other_dtypes": other_batches,
        "groups": groups,
        "cells": cells,
        "profile": {"batch": 1, "context": longest, "dtype": args.dtype, "threads": args.threads, "modes": profiles},
        "client": client,
        "llama": trained,
        "wall_time_s": (time.perf_counter_ns() - started) / 1e9,
    }


def summary(record: dict[str, Any]) -> list[str]:
    lines = []
    dtype, threads = headline_key(record)
    cells, groups = formulas.cell_table(record), formulas.group_table(record)
    for context in record["config"]["benchmark"]["contexts"]:
        key = (dtype, threads, 1, context)
        best, hf = formulas.best_cell(record, key), cells[(*key, BASELINE)]
        lines.append(f"batch 1, context {context}: {best['mode']} {best['median_ns_per_step'] / 1e6:.1f} ms, "
                     f"{BASELINE} {hf['median_ns_per_step'] / 1e6:.1f} ms "
                     f"({groups[key]['best_over_hf_dynamic']:.2f}x), "
                     f"floor {best['floor_ns_per_step'] / 1e6:.1f} ms ({best['step_over_floor']:.2f}x)")
    llama = record["llama"]
    for group in llama["groups"]:
        cells = {c["mode"]: c for c in llama["cells"] if (c["threads"], c["context"]) == (group["threads"], group["context"])}
        lines.append(f"{llama['preset']}, {group['threads']}t, context {group['context']}: " + ", ".join(
            f"{mode} {cell['median_ns_per_step'] / 1e6:.1f} ms ({cell['step_over_floor']:.2f}x floor)"
            for mode, cell in cells.items()) + f"; ours / transformers {group['ours_over_transformers']:.2f}x")
    verdict = "within" if record["wall_time_s"] <= WALL_TIME_TARGET_S else "beyond"
    lines.append(f"whole run {record['wall_time_s']:.0f} s, {verdict} the {WALL_TIME_TARGET_S} s target")
    return lines


def main(argv: Sequence[str] | None = None, kernel_ns: Mapping[str, Mapping[str, float]] | None = None) -> int:
    """Measure, validate against the schema, then replace the record in one rename. ``kernel_ns`` stands in for
    the Llama kernel table's timings (llama.kernel_table): tests only, never the command line."""
    args = parse_args(argv)
    with cold_inductor_cache() if args.compile_cache == "cold" else contextlib.nullcontext():
        return harness.run(LAB, ROOT, args, argv, lambda: sections(args, kernel_ns), summary, derive=figures.derive)
