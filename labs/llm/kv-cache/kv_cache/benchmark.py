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
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from labkit import bench, harness
from labkit.manifest import lab_for
from llm_models.kv_bytes import cache_storage_bytes
from llm_models.toy.config import ModelConfig
from llm_models.toy.equivalence import ATOL, RTOL
from llm_models.toy.model import DecoderBlock

from . import trained
from .decode import cached_step_logits, full_prefix_step_logits
from .equivalence import compare_paths
from .figures import BASELINE, derive

LAB, ROOT = lab_for(__file__)
MODES: dict[str, Callable[[DecoderBlock, torch.Tensor], torch.Tensor]] = {
    "full": full_prefix_step_logits,  # baseline: recompute the whole prefix every step
    "cached": cached_step_logits,
}
DEFAULT_LENGTHS = [16, 32, 64, 128, 256, 512]
QUICK = {"lengths": [4, 8], "repeats": 2, "warmup": 1}
MAX_BATCH = 64  # beyond this the full-prefix loop at 512 tokens needs more memory than a laptop has


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=DEFAULT_LENGTHS,
                        help="prefix lengths to decode, ascending (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=1, help="sequences decoded together (default: 1)")
    capacity = ModelConfig().max_positions
    return harness.parse(parser, argv, QUICK, {"lengths": (1, capacity), "batch": (1, MAX_BATCH)})


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
    fields = ("max_abs_diff", "max_abs_reference", "within_tolerance", "argmax_agrees_every_step")
    return {"cached": {name: getattr(comparison, name) for name in fields}}


def measure_length(model: DecoderBlock, length: int, args: argparse.Namespace, progress: harness.Progress,
                   label: str) -> dict[str, Any]:
    """Equivalence first, then warmup, then repetitions in rotating order."""
    config = model.config
    ids = harness.token_ids(config.vocab_size, args.batch, length, args.seed)
    progress.note(f"{label}: checking cached against full logits at every step")
    equivalence = check_equivalence(model, ids)
    with torch.inference_mode():
        _, cache = model(ids)
        entry = harness.timed_entry(length, length, equivalence, list(MODES),  # one call per position
                                    lambda mode: time_loop(mode, model, ids), args, progress, label)
    entry["cache_bytes"] = {"measured": cache_storage_bytes(cache)}  # the formula's count: figures.derive
    return entry


def trained_model(args: argparse.Namespace) -> dict[str, Any]:
    """The cache on SmolLM2-135M: cached and full answers in float32, the cached one in bfloat16."""
    tokens = trained.QUICK_NEW_TOKENS if args.quick else trained.NEW_TOKENS
    bench.progress(f"trained model: {tokens} greedy tokens with and without the cache, float32 and bfloat16")
    return trained.measure(tokens)


def precision_check(config: ModelConfig, args: argparse.Namespace, length: int) -> dict[str, Any]:
    """Same ids in float32 and float64: if the differences are rounding, float64 shrinks them."""
    bench.progress(f"precision check at length {length} in float32 and float64")
    ids = harness.token_ids(config.vocab_size, args.batch, length, args.seed)
    result: dict[str, Any] = {"length": length}
    for dtype in (torch.float32, torch.float64):
        comparison = compare_paths(DecoderBlock(dataclasses.replace(config, dtype=dtype)), ids)
        result[str(dtype).removeprefix("torch.")] = {
            "max_abs_diff": comparison.max_abs_diff,
            "argmax_agrees_every_step": comparison.argmax_agrees_every_step,
        }
    return result


def sections(args: argparse.Namespace, model_class: type[DecoderBlock]) -> dict[str, Any]:
    started = time.perf_counter()
    harness.seed_and_threads(args)
    config = ModelConfig(seed=args.seed)
    model = model_class(config)
    lengths = harness.sweep(args, lambda length, progress, label: measure_length(model, length, args, progress, label))
    workload = "teacher-forced decode loop: one forward call per position, last-position logits kept"
    return {
        "config": {
            "model": config.as_record(),
            "benchmark": harness.sweep_config(args, list(MODES), BASELINE, workload,
                                              "time.perf_counter_ns, torch.inference_mode, gc paused per loop",
                                              batch=args.batch),
        },
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "precision": precision_check(config, args, args.lengths[-1]),
        "trained": trained_model(args),
        "lengths": lengths,
        "wall_time_s": time.perf_counter() - started,  # every section, the trained model's loading included
    }


def main(argv: Sequence[str] | None = None, model_class: type[DecoderBlock] = DecoderBlock) -> int:
    """Measure, validate against the schema, then replace the record in one rename."""
    args = parse_args(argv)
    return harness.run(LAB, ROOT, args, argv, lambda: sections(args, model_class), harness.sweep_summary, derive)
