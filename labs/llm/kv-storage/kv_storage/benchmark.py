"""Decode-step time and memory of full recompute and three KV layouts: concatenation, preallocated, paged.

    labs/.venv/bin/python labs/llm/kv-storage/benchmark.py --output results/storage-results.json

For each prefix length P, every cached layout first proves it gives the
full-prefix logits over a window of decode steps; then the window is timed,
with the modes' order rotating between repetitions. The record also holds the
peak and total allocation of a whole decode loop per layout (PyTorch
profiler); for each grouped-query variant, the cache bytes every layout holds
and its logits checked against full recompute at every position; the internal
fragmentation of paged storage against block size; and what prefix sharing
saves. Written atomically at the end; a failed run keeps the old record.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import torch

from labkit import bench, harness
from labkit.figures import Figures, check
from labkit.manifest import lab_for
from llm_models.kv_bytes import cache_storage_bytes
from llm_models.paged.pool import BlockPool
from llm_models.toy.config import ModelConfig
from llm_models.toy.decode import decode_step, prefill
from llm_models.toy.equivalence import ATOL, RTOL
from llm_models.toy.model import DecoderBlock

from .figures import BASELINE, CACHED, MODES, blocks, derive
from .paged import PagedSequence
from .peak import profile_allocations
from .preallocated import PreallocatedKVCache

LAB, ROOT = lab_for(__file__)
DEFAULT_LENGTHS = [16, 32, 64, 128, 256, 512, 1024]
QUICK = {"lengths": [8, 16], "repeats": 4, "warmup": 1, "window": 4, "memory_length": 32,
         "paging_requests": 8, "share_requests": 3, "share_prompt": 20, "share_tokens": 5}
GQA_KV_HEADS = (4, 2, 1)
PAGING_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
LIMIT = 4096  # longest prefix, window, loop or prompt the options accept (the position table grows to fit)

Store = tuple[torch.Tensor, torch.Tensor] | PreallocatedKVCache | PagedSequence | None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__)
    add = parser.add_argument
    add("--lengths", type=int, nargs="+", default=DEFAULT_LENGTHS, help="prefix lengths (default: %(default)s)")
    add("--window", type=int, default=16, help="decode steps timed after each prefix (default: 16)")
    add("--block-size", type=int, default=16, help="positions per paged block (default: 16)")
    add("--memory-length", type=int, default=512, help="decode loop length for the memory profile (default: 512)")
    add("--paging-requests", type=int, default=64, help="requests for the fragmentation table (default: 64)")
    add("--share-requests", type=int, default=8, help="requests sharing one prompt (default: 8)")
    add("--share-prompt", type=int, default=200, help="length of the shared prompt (default: 200)")
    add("--share-tokens", type=int, default=50, help="tokens each sharing request then decodes (default: 50)")
    bounds = {name: (1, LIMIT) for name in ("lengths", "window", "block_size", "memory_length", "paging_requests",
                                             "share_requests", "share_prompt", "share_tokens")}
    return harness.parse(parser, argv, QUICK, bounds)


def model_config(args: argparse.Namespace, kv_heads: int | None = None) -> ModelConfig:
    longest = max(args.lengths[-1] + args.window, args.memory_length, args.share_prompt + args.share_tokens)
    return ModelConfig(max_positions=longest, seed=args.seed, kv_heads=kv_heads)


def token_ids(config: ModelConfig, length: int, seed: int) -> torch.Tensor:
    return harness.token_ids(config.vocab_size, 1, length, seed)  # the storage lab decodes one request


def new_store(mode: str, config: ModelConfig, capacity: int, block_size: int) -> Store:
    """An empty cache of the given layout, sized for ``capacity`` positions."""
    if mode == "prealloc":
        return PreallocatedKVCache.for_model(config, batch=1, capacity=capacity)
    if mode == "paged":
        return PagedSequence(BlockPool.for_model(config, blocks(capacity, block_size), block_size))
    return None  # concat starts from nothing, like the first lab


def prefilled_state(model: DecoderBlock, mode: str, ids: torch.Tensor, prefix: int, block_size: int) -> Store:
    """The state a window starts from: a cache holding ``prefix`` positions (nothing for full)."""
    if mode == "full":
        return None
    return prefill(model, ids[:, :prefix], new_store(mode, model.config, ids.shape[1], block_size))[1]


def decode_window(model: DecoderBlock, mode: str, ids: torch.Tensor, prefix: int, state: Store) -> torch.Tensor:
    """Last-position logits of each step from ``prefix`` to the end of ``ids``: (1, window, vocab)."""
    steps = []
    for t in range(prefix, ids.shape[1]):
        if mode == "full":
            steps.append(model(ids[:, : t + 1])[0][:, -1])
        else:
            logits, state = decode_step(model, ids[:, t : t + 1], state)
            steps.append(logits)
    return torch.stack(steps, dim=1)


def check_equivalence(model: DecoderBlock, ids: torch.Tensor, prefix: int, block_size: int) -> dict[str, Any]:
    full = decode_window(model, "full", ids, prefix, None)
    return {mode: harness.compare(decode_window(model, mode, ids, prefix,
                                                prefilled_state(model, mode, ids, prefix, block_size)),
                                  full, ATOL, RTOL, f"prefix {prefix}: {mode} differs from full")
            for mode in CACHED}


def measure_length(model: DecoderBlock, prefix: int, args: argparse.Namespace, progress: harness.Progress,
                   label: str) -> dict[str, Any]:
    ids = token_ids(model.config, prefix + args.window, args.seed)
    progress.note(f"{label}: checking every layout against full logits over {args.window} steps")
    equivalence = check_equivalence(model, ids, prefix, args.block_size)

    def timed(mode: str) -> int:
        state = prefilled_state(model, mode, ids, prefix, args.block_size)  # untimed: only the window counts
        return bench.time_ns(lambda: decode_window(model, mode, ids, prefix, state))

    return harness.timed_entry(prefix, args.window, equivalence, list(MODES), timed, args, progress, label)


def retained_bytes(state: Store) -> int:
    """Bytes a finished loop's cache keeps alive: its tensors, its whole capacity, or its blocks."""
    if isinstance(state, PreallocatedKVCache):
        return state.allocated_bytes
    if isinstance(state, PagedSequence):
        return state.pool.blocks_in_use * state.pool.block_bytes
    if state is None:
        raise ValueError("a decode loop of at least one step leaves a cache")
    return cache_storage_bytes(state)


def memory_profile(model: DecoderBlock, args: argparse.Namespace) -> dict[str, Any]:
    """Peak and total allocation of a whole decode loop from an empty cache, per cached layout."""
    config, length = model.config, args.memory_length
    ids = token_ids(config, length, args.seed)
    variants = {}
    for mode in CACHED:
        bench.progress(f"memory: profiling a {length}-step decode loop with {mode} storage")
        kept: dict[str, Store] = {}

        def loop(mode: str = mode, kept: dict[str, Store] = kept) -> None:
            state = new_store(mode, config, length, args.block_size)  # allocated inside the profiled window
            for t in range(length):
                _, state = model(ids[:, t : t + 1], state)
            kept["state"] = state

        allocation = profile_allocations(loop)
        variants[mode] = {"peak_bytes": allocation.peak_bytes, "allocated_bytes": allocation.allocated_bytes,
                          "allocations": allocation.allocations, "retained_bytes": retained_bytes(kept.pop("state"))}
    return {"length": length, "block_size": args.block_size, "variants": variants,  # formula_bytes: derive
            "method": "torch.profiler profile_memory: peak = max 'Total Allocated' over the loop's memory events, "
                      "allocated = sum of allocation sizes; the cache is created inside the profiled loop"}


def gqa_bytes(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per key/value head count, for every layout: the bytes it holds after a decode loop
    and how far its logits came, at every position of that loop, from full recompute of the same tokens."""
    rows = []
    length = args.memory_length
    for kv_heads in GQA_KV_HEADS:
        config = model_config(args, kv_heads)
        model = DecoderBlock(config)
        ids = token_ids(config, length, args.seed)
        full = decode_window(model, BASELINE, ids, 0, None)  # (1, length, vocab): each position from its whole prefix
        layouts = {}
        for mode in CACHED:
            state = new_store(mode, config, length, args.block_size)
            steps = []
            for t in range(length):
                logits, state = model(ids[:, t : t + 1], state)
                steps.append(logits)
            layouts[mode] = {"bytes": retained_bytes(state),
                             **harness.compare(torch.cat(steps, dim=1), full, ATOL, RTOL,
                                               f"kv_heads={kv_heads}: {mode} differs from {BASELINE}")}
        rows.append({"kv_heads": kv_heads, "heads": config.heads, "length": length, "positions_compared": length,
                     "layouts": layouts})  # formula_bytes: derive
    return rows


def paging_table(config: ModelConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Blocks, table entries and wasted slots for the same set of requests at each block size, read from
    the pool and the requests (slots allocated, waste share and the totals: derive)."""
    generator = torch.Generator().manual_seed(args.seed)
    limit = config.max_positions
    lengths = torch.randint(1, limit + 1, (args.paging_requests,), generator=generator).tolist()
    rows = []
    for block_size in PAGING_BLOCK_SIZES:
        pool = BlockPool.for_model(config, sum(blocks(n, block_size) for n in lengths), block_size)
        requests = [PagedSequence(pool) for _ in lengths]
        for request, length in zip(requests, lengths):
            entries = torch.zeros(1, config.kv_heads, length, config.head_dim, dtype=config.dtype)
            request.update(entries, entries)
        rows.append({"block_size": block_size, "blocks_in_use": pool.blocks_in_use,
                     "wasted_slots": sum(request.wasted_slots for request in requests),
                     "table_entries": sum(len(request.table) for request in requests)})
        for request in requests:
            request.release()
    return {"length_range": [1, limit], "request_lengths": lengths, "rows": rows}


def sharing(model: DecoderBlock, args: argparse.Namespace) -> dict[str, Any]:
    """N requests with one prompt: blocks without sharing vs with forks and copy-on-write, counted in the
    pools (their bytes and the saving: derive)."""
    config, n, size = model.config, args.share_requests, args.block_size
    prompt = token_ids(config, args.share_prompt, args.seed)
    tails = [token_ids(config, args.share_tokens, args.seed + 1 + i) for i in range(n)]
    blocks_per_request = blocks(args.share_prompt + args.share_tokens, size)

    def decode(request: PagedSequence, tail: torch.Tensor) -> None:
        for t in range(tail.shape[1]):
            model(tail[:, t : t + 1], request)

    separate_pool = BlockPool.for_model(config, n * blocks_per_request, size)
    for tail in tails:
        request = PagedSequence(separate_pool)
        model(prompt, request)
        decode(request, tail)
    shared_pool = BlockPool.for_model(config, n * blocks_per_request, size)
    parent = PagedSequence(shared_pool)
    model(prompt, parent)
    prompt_table = list(parent.table)
    children = [parent.fork() for _ in tails]
    parent.release()
    for child, tail in zip(children, tails):
        decode(child, tail)
    # A child that wrote into the shared, partly filled last prompt block got its own copy of it.
    copies = sum(child.table[len(prompt_table) - 1] != prompt_table[-1] for child in children)
    still_shared = sum(all(child.table[i] == block for child in children) for i, block in enumerate(prompt_table))
    return {"requests": n, "prompt": args.share_prompt, "tokens": args.share_tokens, "block_size": size,
            "block_bytes": shared_pool.block_bytes,
            "without": {"blocks": separate_pool.blocks_in_use},
            "with": {"blocks": shared_pool.blocks_in_use, "prompt_blocks": len(prompt_table),
                     "shared_blocks": int(still_shared), "copied_blocks": int(copies)}}


def sections(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    harness.seed_and_threads(args)
    config = model_config(args)
    model = DecoderBlock(config)
    with torch.inference_mode():
        lengths = harness.sweep(args, lambda prefix, progress, label: measure_length(model, prefix, args, progress, label),
                                noun="prefix")
        memory = memory_profile(model, args)
        bench.progress("grouped-query heads, paging and sharing")
        gqa, paging, shared = gqa_bytes(args), paging_table(config, args), sharing(model, args)
    workload = (f"prefill P tokens (untimed), then time {args.window} teacher-forced decode steps "
                f"from position P; full recomputes the whole prefix at each step")
    return {
        "config": {
            "model": config.as_record(),
            "benchmark": harness.sweep_config(
                args, MODES, BASELINE, workload, "time.perf_counter_ns, torch.inference_mode, gc paused per window",
                batch=1, window=args.window, block_size=args.block_size,
                capacity="prealloc and paged are sized for exactly P + window positions"),
        },
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "lengths": lengths,
        "memory": memory,
        "gqa": gqa,
        "paging": paging,
        "sharing": shared,
        "wall_time_s": time.perf_counter() - started,  # every section
    }


def summary(record: dict[str, Any]) -> list[str]:
    peaks = ", ".join(f"{m} {v['peak_bytes']:,} B" for m, v in record["memory"]["variants"].items())
    return [*harness.sweep_summary(record), f"peak allocation over a {record['memory']['length']}-step loop: {peaks}"]


def measured_then_derived(record: dict[str, Any]) -> Figures:
    """``derive``'s figures, after every count this run took from its caches and pools is held to them: a
    layout or pool that holds other than its formula fails the run, instead of the formula hiding it."""
    figures = derive(record)
    counted = Figures()
    for figure in figures:
        if present(record, figure.path):
            counted.add(figure.path, figure.value, figure.how)
    check(record, counted, "this run's own counts")
    return figures


def present(record: dict[str, Any], path: tuple[str | int, ...]) -> bool:
    value: Any = record
    for key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, validate against the schema, then replace the record in one rename."""
    args = parse_args(argv)
    return harness.run(LAB, ROOT, args, argv, lambda: sections(args), summary, measured_then_derived)
