"""Time the full-prefix and the cached decode loops on CPU and write a JSON measurement record.

    labs/.venv/bin/python labs/llm/kv-cache/benchmark.py --output results/cache-results.json

Both modes consume the same teacher-forced ids. Before a length is timed,
both run once and their logits are compared at every step; a disagreement
beyond the lab's tolerance stops the run and writes nothing. The record is
written atomically at the very end, so an interrupted or failed run leaves
the previous record as it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "labs"))  # labkit, without installing the repository as a package

from kv_cache import (  # noqa: E402
    ATOL,
    RTOL,
    DecoderBlock,
    ModelConfig,
    cache_storage_bytes,
    cached_step_logits,
    compare_paths,
    full_prefix_step_logits,
    kv_cache_bytes,
)
from labkit.environment import capture_environment  # noqa: E402
from labkit.fingerprint import source_fingerprint  # noqa: E402
from labkit.manifest import load_lab  # noqa: E402
from labkit.records import atomic_write_json, load_json, validate_record  # noqa: E402
from labkit.summary import STATISTICS, as_number, speedup_frame, statistics_frame  # noqa: E402

SCHEMA_VERSION = 1
LAB = load_lab(Path(__file__).with_name("lab.toml"), ROOT)
MODES: dict[str, Callable[[DecoderBlock, torch.Tensor], torch.Tensor]] = {
    "full": full_prefix_step_logits,  # baseline: recompute the whole prefix every step
    "cached": cached_step_logits,
}
BASELINE = "full"
DEFAULT_LENGTHS = (16, 32, 64, 128, 256, 512)
QUICK = {"lengths": [4, 8], "repeats": 2, "warmup": 1}


class EquivalenceError(RuntimeError):
    """The two modes disagree: timing them would compare different computations."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True, help="record to write (JSON)")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS),
                        help="prefix lengths to decode, ascending (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repetitions per mode (default: 7)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per mode first (default: 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default: 1)")
    parser.add_argument("--batch", type=int, default=1, help="sequences decoded together (default: 1)")
    parser.add_argument("--seed", type=int, default=0, help="model weights and token ids (default: 0)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: lengths {QUICK['lengths']}, {QUICK['repeats']} repeats")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    check_args(parser, args)
    return args


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    capacity = ModelConfig().max_positions
    if args.lengths != sorted(set(args.lengths)) or args.lengths[0] < 1:
        parser.error(f"--lengths must be positive and strictly ascending, got {args.lengths}")
    if args.lengths[-1] > capacity:
        parser.error(f"--lengths {args.lengths[-1]} exceeds the model's {capacity} positions")
    for name, low in (("repeats", 1), ("warmup", 0), ("threads", 1), ("batch", 1)):
        if getattr(args, name) < low:
            parser.error(f"--{name} must be at least {low}, got {getattr(args, name)}")


def progress(message: str) -> None:
    print(f"benchmark: {message}", file=sys.stderr, flush=True)


def teacher_forced_ids(config: ModelConfig, batch: int, length: int, seed: int) -> torch.Tensor:
    """Drawn once per length, so both modes decode exactly the same sequence."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + length)
    return torch.randint(0, config.vocab_size, (batch, length), generator=generator)


def time_loop(mode: str, model: DecoderBlock, ids: torch.Tensor) -> int:
    """Nanoseconds for one whole teacher-forced decode loop; garbage collection paused, as timeit does."""
    gc.disable()
    try:
        start = time.perf_counter_ns()
        MODES[mode](model, ids)
        return time.perf_counter_ns() - start
    finally:
        gc.enable()


def check_equivalence(model: DecoderBlock, ids: torch.Tensor) -> dict[str, Any]:
    comparison = compare_paths(model, ids)
    if not comparison.within_tolerance:
        raise EquivalenceError(
            f"length {ids.shape[1]}: cached and full logits differ by up to "
            f"{comparison.max_abs_diff:.3g}, beyond atol={ATOL}, rtol={RTOL}"
        )
    return {
        "max_abs_diff": comparison.max_abs_diff,
        "within_tolerance": comparison.within_tolerance,
        "argmax_agrees_every_step": comparison.argmax_agrees_every_step,
    }


def measure_length(model: DecoderBlock, length: int, args: argparse.Namespace, index: str) -> dict[str, Any]:
    """Equivalence first, then warmup, then repetitions with alternating order."""
    config = model.config
    ids = teacher_forced_ids(config, args.batch, length, args.seed)
    progress(f"{index} length {length}: checking cached against full logits at every step")
    equivalence = check_equivalence(model, ids)
    with torch.inference_mode():
        _, cache = model(ids)
    modes = list(MODES)
    durations: dict[str, list[int]] = {mode: [] for mode in modes}
    order = []
    with torch.inference_mode():
        for mode in modes:
            for _ in range(args.warmup):
                time_loop(mode, model, ids)
        for repetition in range(args.repeats):
            this_order = modes if repetition % 2 == 0 else modes[::-1]
            progress(f"{index} length {length}: repetition {repetition + 1}/{args.repeats}, "
                     f"{this_order[0]} first")
            for mode in this_order:
                durations[mode].append(time_loop(mode, model, ids))
            order.append(list(this_order))
    return {
        "length": length,
        "equivalence": equivalence,
        "cache_bytes": {
            "formula": kv_cache_bytes(args.batch, config.heads, length, config.head_dim,
                                      config.bytes_per_element),
            "measured": cache_storage_bytes(cache),
        },
        "order": order,
        "modes": {mode: {"durations_ns": durations[mode]} for mode in modes},
    }


def add_statistics(lengths: list[dict[str, Any]]) -> None:
    """Store min/median/max per mode and the speedups, computed by labkit.summary."""
    stats = statistics_frame(lengths)
    speedups = speedup_frame(lengths, BASELINE)
    for entry in lengths:
        for mode, values in entry["modes"].items():
            values.update({name: as_number(stats.loc[(entry["length"], mode), name]) for name in STATISTICS})
        entry["speedup"] = {
            mode: {name: float(row[name]) for name in ("ratio_of_medians", "median_of_paired_ratios")}
            for mode, row in speedups.loc[entry["length"]].iterrows()
        }


def precision_check(config: ModelConfig, args: argparse.Namespace, length: int) -> dict[str, Any]:
    """Same ids in float32 and float64: if the differences are rounding, float64 shrinks them."""
    ids = teacher_forced_ids(config, args.batch, length, args.seed)
    result: dict[str, Any] = {"length": length}
    for dtype in (torch.float32, torch.float64):
        comparison = compare_paths(DecoderBlock(dataclasses.replace(config, dtype=dtype)), ids)
        result[str(dtype).removeprefix("torch.")] = {
            "max_abs_diff": comparison.max_abs_diff,
            "argmax_agrees_every_step": comparison.argmax_agrees_every_step,
        }
    return result


def command_line(argv: list[str] | None) -> str:
    """The command as a reader would retype it from the repository root, with no local paths."""
    script = Path(__file__).resolve().relative_to(ROOT).as_posix()
    return shlex.join(["python", script, *(sys.argv[1:] if argv is None else argv)])


def build_record(args: argparse.Namespace, argv: list[str] | None, model_class: type[DecoderBlock]) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    config = ModelConfig(seed=args.seed)
    model = model_class(config)
    lengths = []
    for number, length in enumerate(args.lengths, start=1):
        lengths.append(measure_length(model, length, args, f"[{number}/{len(args.lengths)}]"))
    add_statistics(lengths)
    progress(f"precision check at length {args.lengths[-1]} in float32 and float64")
    output = args.output.resolve()
    ignore = (output.relative_to(ROOT).as_posix(),) if output.is_relative_to(ROOT) else ()
    return {
        "schema_version": SCHEMA_VERSION,
        "lab": LAB.name,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "command": command_line(argv),
        "environment": capture_environment(ROOT, ignore),
        "config": {
            "model": config.as_record(),
            "benchmark": {
                "batch": args.batch,
                "seed": args.seed,
                "lengths": args.lengths,
                "repeats": args.repeats,
                "warmup": args.warmup,
                "threads": args.threads,
                "modes": list(MODES),
                "baseline": BASELINE,
                "order_policy": "alternate: repetition 0 runs modes in listed order, "
                                "each later repetition reverses the previous order",
                "workload": "teacher-forced decode loop: one forward call per position, "
                            "last-position logits kept",
                "timer": "time.perf_counter_ns, torch.inference_mode, gc paused per loop",
            },
        },
        "fingerprint": source_fingerprint(ROOT, LAB.fingerprint),
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "precision": precision_check(config, args, args.lengths[-1]),
        "lengths": lengths,
    }


def main(argv: list[str] | None = None, model_class: type[DecoderBlock] = DecoderBlock) -> int:
    """Measure, validate against the schema, then replace the record in one rename."""
    args = parse_args(argv)
    untouched = f"{args.output} was not written" + (" and still holds the previous record"
                                                     if args.output.exists() else "")
    try:
        record = build_record(args, argv, model_class)
        validate_record(record, load_json(ROOT / LAB.schema, "record schema"), "new record")
        atomic_write_json(args.output, record)
    except EquivalenceError as error:
        progress(f"equivalence check failed, no timing taken: {error}; {untouched}")
        return 2
    except KeyboardInterrupt:
        progress(f"interrupted; {untouched}")
        return 130
    except Exception as error:  # one clear line instead of a traceback; the record is the thing to protect
        progress(f"failed: {type(error).__name__}: {error}; {untouched}")
        return 1
    progress(f"wrote {args.output}")
    for entry in record["lengths"]:
        medians = ", ".join(f"{m} {v['median_ns'] / 1e6:.2f} ms" for m, v in entry["modes"].items())
        speedup = entry["speedup"]["cached"]["ratio_of_medians"]
        progress(f"length {entry['length']}: median {medians}; full/cached {speedup:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
