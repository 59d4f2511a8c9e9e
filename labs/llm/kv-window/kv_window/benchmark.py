"""When tokens leave the cache, measured on SmolLM2-135M-Instruct over a long text no one here wrote.

    labs/.venv/bin/python labs/llm/kv-window/benchmark.py --output results/window-results.json

Per policy (full cache, sliding window as a ring buffer, sinks + window, SnapKV-style eviction), in lockstep
over the text's first --positions positions: each position's next-token NLL, its KL divergence from the full
cache's distribution and whether the top token agrees, and the bytes each cache keeps; then one decode step
timed per policy. Window with recomputation at --samples sampled positions. The sinks cache's two position
rules in float32 and bfloat16 over the first --rule-positions positions, and the drift of re-rotated keys on
random and on the model's own keys. Packed against padded prefill of prompts of mixed lengths: tokens, time,
and every prompt's logits against its own pass. Written atomically at the end.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import torch

from labkit import bench, harness
from labkit.manifest import lab_for

from .config import Policy
from .drift import probe_frequencies, random_keys, rerotation_drift
from .figures import (
    PACKING_TOLERANCE,
    RANDOM_PROBE,
    RECOMPUTE_BATCH,
    WALL_TIME_LIMIT_S,
    bucket_edges,
    derive,
    drift_shifts,
    sample_positions,
)
from .packing import alone_logits, packed_logits, padded_logits
from .rules import most_shifts
from .trained import Run, evaluate, recompute, recompute_step_ns, step_timing

LAB, ROOT = lab_for(__file__)
# 2,048 text positions, eight times a bounded cache's 256 slots: 4,096 took 113 s of the benchmark's five minutes on a
# 2-core AMD EPYC, and the seven benchmarks must fit 20 minutes together (the quantization lab reads the same 2,048).
DEFAULTS = {"positions": 2048, "slots": 256, "sinks": 4, "block": 256, "rule_positions": 512, "samples": 32,
            "repeats": 5, "pack_repeats": 3, "quality_threads": 2}
QUICK = {"positions": 128, "slots": 32, "block": 32, "rule_positions": 64, "samples": 2, "repeats": 1,
         "pack_repeats": 1}
PROMPTS = {"full": [8, 16, 24, 40, 64, 96], "quick": [4, 8, 12]}  # mixed lengths, as a batch of requests has
# Tokens per call, at most a block: SnapKV evicts after each chunk; re-rotation builds a key table per chunk, whose
# size grows with the chunk's square. Fewer tokens per call would mostly re-read the weights.
CHUNKS = {"snapkv": 64, "rerotate": 32}
OBSERVATION = 32  # SnapKV's observation window (its default), at most half the slots in a quick run's small cache
TRAINED_KEYS_STRIDE = 48  # every 48th kept slot of every layer and head: a few hundred of the model's own keys


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__)
    add = parser.add_argument
    add("--positions", type=int, default=DEFAULTS["positions"], help="text positions evaluated (default: %(default)s)")
    add("--slots", type=int, default=DEFAULTS["slots"], help="slots each bounded cache keeps (default: %(default)s)")
    add("--sinks", type=int, default=DEFAULTS["sinks"], help="StreamingLLM's sink positions (default: %(default)s)")
    add("--block", type=int, default=DEFAULTS["block"], help="positions per lockstep block (default: %(default)s)")
    add("--rule-positions", type=int, default=DEFAULTS["rule_positions"],
        help="positions of the position-rule comparisons (default: %(default)s)")
    add("--samples", type=int, default=DEFAULTS["samples"],
        help="positions scored by window with recomputation (default: %(default)s)")
    add("--pack-repeats", type=int, default=DEFAULTS["pack_repeats"],
        help="timed repetitions of each prefill layout (default: %(default)s)")
    add("--quality-threads", type=int, default=DEFAULTS["quality_threads"],
        help="PyTorch threads for the quality passes, which time nothing (default: %(default)s; every timed step "
             "and prefill uses --threads)")
    parser.set_defaults(repeats=DEFAULTS["repeats"])
    bounds = {"positions": (64, 8000), "slots": (16, 2048), "sinks": (0, 64), "block": (16, 1024),
              "rule_positions": (16, 8000), "samples": (1, 512), "pack_repeats": (1, 50),
              "quality_threads": (1, 256)}
    args = harness.parse(parser, argv, QUICK, bounds)
    if args.positions % args.block or args.rule_positions % args.block or args.rule_positions > args.positions:
        parser.error(f"--positions ({args.positions}) and --rule-positions ({args.rule_positions}, at most "
                     f"--positions) must be multiples of --block ({args.block})")
    if any(args.block % chunk(args, name) for name in CHUNKS) or args.slots * 4 > args.positions or args.sinks >= args.slots:
        chunks = ", ".join(f"{chunk(args, name)} for {name}" for name in CHUNKS)
        parser.error(f"--block ({args.block}) must be a multiple of its chunks ({chunks}), --slots ({args.slots}) "
                     f"at most a quarter of --positions ({args.positions}) and above --sinks ({args.sinks})")
    if args.rule_positions <= args.slots:
        parser.error(f"--rule-positions ({args.rule_positions}) must run past the first eviction at --slots "
                     f"({args.slots})")
    return args


def chunk(args: argparse.Namespace, name: str) -> int:
    return min(CHUNKS[name], args.block)


def policies(args: argparse.Namespace) -> tuple[Run, list[Run], list[Run]]:
    """The reference, the policies over the whole text, and the position-rule comparisons."""
    block, slots, sinks = args.block, args.slots, args.sinks
    main = [Run(Policy("window", slots=slots), block, args.positions),
            Run(Policy("sinks", slots=slots, sinks=sinks), block, args.positions),
            Run(Policy("snapkv", slots=slots, observation=min(OBSERVATION, slots // 2)), chunk(args, "snapkv"),
                args.positions)]
    rules = [Run(Policy("sinks", slots=slots, sinks=sinks, dtype="bfloat16"), block, args.rule_positions),
             Run(Policy("sinks", slots=slots, sinks=sinks, rule="rerotate", dtype="bfloat16"),
                 chunk(args, "rerotate"), args.rule_positions),
             Run(Policy("sinks", slots=slots, sinks=sinks, rule="rerotate"), chunk(args, "rerotate"),
                 args.rule_positions)]
    return Run(Policy("full"), block, args.positions), main, rules


def drift_section(args: argparse.Namespace, sinks_run: Run, inverse: torch.Tensor) -> dict[str, Any]:
    """Re-rotation drift on random keys (RANDOM_PROBE's shape) and on keys the model cached, unrotated."""
    variants = {"float32": (torch.float32, torch.float32), "bfloat16-storage": (torch.bfloat16, torch.float32),
                "bfloat16": (torch.bfloat16, torch.bfloat16)}
    probe = RANDOM_PROBE
    keys = random_keys(probe["keys"], probe["head_dim"], args.seed)
    shifts = drift_shifts(args.slots, args.sinks)
    random = {**probe, "start": max(shifts) + 1, "shifts": shifts}
    random["errors"] = {name: rerotation_drift(keys, probe_frequencies(probe["head_dim"], probe["theta"]),
                                               random["start"], shifts, *dtypes) for name, dtypes in variants.items()}
    stored = torch.cat([store.kept.keys[0, :, ::TRAINED_KEYS_STRIDE] for store in sinks_run.cache.layers])
    own = stored.reshape(-1, stored.shape[-1])  # (N, D): unrotated, as the read rule caches them
    trained = {"keys": own.shape[0], "head_dim": own.shape[1], "start": args.slots - 1, "shifts": shifts,
               "errors": {name: rerotation_drift(own, inverse, args.slots - 1, shifts, *dtypes)
                          for name, dtypes in variants.items()}}
    return {"random": random, "trained": trained, "most_shifts": most_shifts(args.sinks, args.slots),
            "method": "||stored - exact|| / ||exact|| over all probe keys (Frobenius), exact = the rotation at "
                      "start - shifts in float64; variants: storage dtype and the dtype of the turn's cos, sin "
                      "and products"}


def packing_section(args: argparse.Namespace, model: Any, ids: list[int]) -> dict[str, Any]:
    lengths = PROMPTS["quick" if args.quick else "full"]
    start = len(ids) // 2
    prompts, offset = [], start
    for length in lengths:
        prompts.append(ids[offset:offset + length])
        offset += length
    layouts = {"packed": lambda: packed_logits(model, prompts), "padded": lambda: padded_logits(model, prompts, 0),
               "alone": lambda: alone_logits(model, prompts)}
    with torch.inference_mode():
        first = {mode: run() for mode, run in layouts.items()}  # untimed: the equality check, and a warmup
        reference = first["alone"]
        diffs = {mode: max(float((a - b).abs().max()) for a, b in zip(first[mode], reference))
                 for mode in ("packed", "padded")}
        agrees = {mode: all(bool((a.argmax(-1) == b.argmax(-1)).all()) for a, b in zip(first[mode], reference))
                  for mode in ("packed", "padded")}
        durations: dict[str, list[int]] = {mode: [] for mode in layouts}
        order = []
        for repetition in range(args.pack_repeats):
            modes = bench.run_order(list(layouts), repetition)
            bench.progress(f"packing: repetition {repetition + 1}/{args.pack_repeats}, {modes[0]} first")
            for mode in modes:
                durations[mode].append(bench.time_ns(layouts[mode]))
            order.append(modes)
    return {"lengths": lengths, "offset": start, "pad_id": 0, "order": order,
            "modes": {mode: {"durations_ns": values} for mode, values in durations.items()},
            "max_abs_diff": diffs, "argmax_agrees": agrees,
            "max_abs_reference": max(float(logits.abs().max()) for logits in reference),
            "tolerance": PACKING_TOLERANCE}


def sections(args: argparse.Namespace) -> dict[str, Any]:
    from llm_models.llama.generate import smollm2
    from llm_models.llama.weights import GGUF_NAME, trained
    from llm_models.texts import PYTHON_REFERENCE

    started = time.perf_counter()
    harness.seed_and_threads(args)
    chat = smollm2(torch.float32)
    model, config = chat.model, chat.model.config
    text_ids = chat.encode(PYTHON_REFERENCE.read())
    needed = args.positions + args.repeats + 2
    if len(text_ids) < needed:
        raise ValueError(f"{PYTHON_REFERENCE.path}: {len(text_ids)} tokens; --positions {args.positions} and "
                         f"--repeats {args.repeats} need {needed}")
    ids = torch.tensor([text_ids[:needed]])
    edges = bucket_edges(args.slots, args.positions)
    samples = sample_positions(edges, args.samples)
    reference, main, rules = policies(args)
    bench.progress(f"{len(main) + 1} policies over {args.positions} positions, {len(rules)} rule variants over "
                   f"{args.rule_positions}, in blocks of {args.block}")
    torch.set_num_threads(args.quality_threads)  # the quality passes time nothing
    truth = evaluate(model, ids, reference, [*main, *rules], args.block, samples)
    torch.set_num_threads(args.threads)
    for run in (reference, *main):
        bench.progress(f"decode steps: {run.policy.label}")
        step_timing(model, ids, run, args.repeats)
    bench.progress(f"window with recomputation at {len(samples)} positions")
    torch.set_num_threads(args.quality_threads)
    recomputed = recompute(model, ids, samples, args.slots, truth, RECOMPUTE_BATCH)
    torch.set_num_threads(args.threads)
    recomputed_steps = recompute_step_ns(model, ids, args.slots, args.repeats)
    bench.progress("re-rotation drift")
    with torch.inference_mode():
        drift = drift_section(args, main[1], model.inverse_frequencies)
    bench.progress("packed against padded prefill")
    packing = packing_section(args, model, text_ids)
    return {
        "config": {"seed": args.seed, "threads": args.threads, "repeats": args.repeats, "quick": bool(args.quick),
                   "positions": args.positions, "slots": args.slots, "sinks": args.sinks, "block": args.block,
                   "rule_positions": args.rule_positions, "samples": args.samples, "pack_repeats": args.pack_repeats,
                   "quality_threads": args.quality_threads,
                   "recompute_batch": RECOMPUTE_BATCH, "buckets": edges},
        "model": {"name": "SmolLM2-135M-Instruct", "weights": GGUF_NAME, "weights_sha256": trained().digest,
                  "dtype": "float32", "layers": config.layers, "heads": config.heads, "kv_heads": config.kv_heads,
                  "head_dim": config.head_dim, "rope_theta": config.rope_theta},
        "text": {"name": PYTHON_REFERENCE.name, "sha256": PYTHON_REFERENCE.sha256, "source": PYTHON_REFERENCE.source,
                 "url": PYTHON_REFERENCE.url, "tokens": len(text_ids), "used": needed},
        "policies": {run.policy.label: run.as_record(run is reference) for run in (reference, *main)},
        "rules": {run.policy.label: run.as_record(False) for run in rules},
        "recompute": {"window": args.slots, "positions": samples,
                      "nll": [round(v, 5) for v in recomputed["nll"]],
                      "kl": [float(f"{v:.5g}") for v in recomputed["kl"]], "agree": recomputed["agree"],
                      "step_ns": recomputed_steps},
        "drift": drift,
        "packing": packing,
        "wall_time_s": time.perf_counter() - started,
    }


def summary(record: dict[str, Any]) -> list[str]:
    lines = [f"whole run {record['wall_time_s']:.0f} s, {'within' if record['wall_time_met'] else 'over'} the "
             f"{WALL_TIME_LIMIT_S:.0f} s limit"]
    for label, entry in record["policies"].items():
        after = entry["after_eviction"]
        lines.append(f"{label}: perplexity after the first eviction {after['perplexity']['estimate']:.2f}, "
                     f"kept {entry['kept_bytes'][-1][1]:,} bytes, step {entry['median_step_ns'] / 1e6:.1f} ms")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, validate against the schema, then replace the record in one rename."""
    args = parse_args(argv)
    return harness.run(LAB, ROOT, args, argv, lambda: sections(args), summary, derive)
