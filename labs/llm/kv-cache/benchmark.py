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
import sys
from collections.abc import Callable
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
from labkit import bench  # noqa: E402
from labkit.manifest import load_lab  # noqa: E402
from labkit.records import load_json  # noqa: E402

LAB = load_lab(Path(__file__).with_name("lab.toml"), ROOT)
MODES: dict[str, Callable[[DecoderBlock, torch.Tensor], torch.Tensor]] = {
    "full": full_prefix_step_logits,  # baseline: recompute the whole prefix every step
    "cached": cached_step_logits,
}
BASELINE = "full"
DEFAULT_LENGTHS = (16, 32, 64, 128, 256, 512)
QUICK = {"lengths": [4, 8], "repeats": 2, "warmup": 1}


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


def teacher_forced_ids(config: ModelConfig, batch: int, length: int, seed: int) -> torch.Tensor:
    """Drawn once per length, so both modes decode exactly the same sequence."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + length)
    return torch.randint(0, config.vocab_size, (batch, length), generator=generator)


def time_loop(mode: str, model: DecoderBlock, ids: torch.Tensor) -> int:
    """Nanoseconds for one whole teacher-forced decode loop."""
    return bench.time_ns(lambda: MODES[mode](model, ids))


def check_equivalence(model: DecoderBlock, ids: torch.Tensor) -> dict[str, Any]:
    comparison = compare_paths(model, ids)
    if not comparison.within_tolerance:
        raise bench.EquivalenceError(
            f"length {ids.shape[1]}: cached and full logits differ by up to "
            f"{comparison.max_abs_diff:.3g}, beyond atol={ATOL}, rtol={RTOL}"
        )
    return {"cached": {
        "max_abs_diff": comparison.max_abs_diff,
        "max_abs_reference": comparison.max_abs_reference,
        "within_tolerance": comparison.within_tolerance,
        "argmax_agrees_every_step": comparison.argmax_agrees_every_step,
    }}


def measure_length(model: DecoderBlock, length: int, args: argparse.Namespace, index: str) -> dict[str, Any]:
    """Equivalence first, then warmup, then repetitions in rotating order."""
    config = model.config
    ids = teacher_forced_ids(config, args.batch, length, args.seed)
    bench.progress(f"{index} length {length}: checking cached against full logits at every step")
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
            this_order = bench.run_order(modes, repetition)
            bench.progress(f"{index} length {length}: repetition {repetition + 1}/{args.repeats}, "
                           f"{this_order[0]} first")
            for mode in this_order:
                durations[mode].append(time_loop(mode, model, ids))
            order.append(this_order)
    return {
        "length": length,
        "steps": length,  # one duration is the whole loop: one forward call per position
        "equivalence": equivalence,
        "cache_bytes": {
            "formula": kv_cache_bytes(args.batch, config.kv_heads, length, config.head_dim,
                                      config.bytes_per_element),
            "measured": cache_storage_bytes(cache),
        },
        "order": order,
        "modes": {mode: {"durations_ns": durations[mode]} for mode in modes},
    }


def precision_check(config: ModelConfig, args: argparse.Namespace, length: int) -> dict[str, Any]:
    """Same ids in float32 and float64: if the differences are rounding, float64 shrinks them."""
    bench.progress(f"precision check at length {length} in float32 and float64")
    ids = teacher_forced_ids(config, args.batch, length, args.seed)
    result: dict[str, Any] = {"length": length}
    for dtype in (torch.float32, torch.float64):
        comparison = compare_paths(DecoderBlock(dataclasses.replace(config, dtype=dtype)), ids)
        result[str(dtype).removeprefix("torch.")] = {
            "max_abs_diff": comparison.max_abs_diff,
            "argmax_agrees_every_step": comparison.argmax_agrees_every_step,
        }
    return result


def build_record(args: argparse.Namespace, argv: list[str] | None, model_class: type[DecoderBlock]) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    config = ModelConfig(seed=args.seed)
    model = model_class(config)
    lengths = [measure_length(model, length, args, f"[{number}/{len(args.lengths)}]")
               for number, length in enumerate(args.lengths, start=1)]
    bench.add_statistics(lengths, BASELINE)
    return {
        **bench.record_header(LAB, ROOT, __file__, argv, args.output),
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
                "order_policy": bench.ORDER_POLICY,
                "workload": "teacher-forced decode loop: one forward call per position, "
                            "last-position logits kept",
                "timer": "time.perf_counter_ns, torch.inference_mode, gc paused per loop",
            },
        },
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "precision": precision_check(config, args, args.lengths[-1]),
        "lengths": lengths,
    }


def main(argv: list[str] | None = None, model_class: type[DecoderBlock] = DecoderBlock) -> int:
    """Measure, validate against the schema, then replace the record in one rename."""
    args = parse_args(argv)
    code = bench.write_record(args.output, lambda: build_record(args, argv, model_class), ROOT / LAB.schema)
    if code == 0:
        record = load_json(args.output, "measurement record")
        for entry in record["lengths"]:
            medians = ", ".join(f"{m} {v['median_ns'] / 1e6:.2f} ms" for m, v in entry["modes"].items())
            speedup = entry["speedup"]["cached"]["ratio_of_medians"]
            bench.progress(f"length {entry['length']}: median {medians}; full/cached {speedup:.2f}x")
    return code


if __name__ == "__main__":
    sys.exit(main())
