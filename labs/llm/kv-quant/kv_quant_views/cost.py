"""Cost: the decode step per format and, timed apart from it, the dequantization, and the peak of attention's
temporaries with the cache dequantized all at once against block by block."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_bytes, format_ms, format_ratio

from .common import trained


def timing_view(record: dict[str, Any]) -> Block:
    t = trained(record)
    timing = record["trained"]["timing"]
    rows = [[label, format_ms(v["timing"]["median_step_ns"], 1), format_ms(v["timing"]["median_dequantize_ns"], 1)]
            for label, v in t.items()]
    return Block(tables=[Table(
        ["format", "decode step (ms)", "dequantizing the cache, timed apart (ms)"], rows,
        lead=f"Median of {timing['repeats']} decode steps after {timing['context']} cached tokens on SmolLM2-135M, "
             f"{record['config']['threads']} thread. After each step the cache was read back once more, as the step "
             f"reads it, and timed apart: not a part of the step's time.")],
        notes=["These formats are written in PyTorch operations, not fused kernels: the times say what "
               "dequantizing in Python costs here, not what a serving engine's kernel would."])


def memory_view(record: dict[str, Any]) -> Block:
    memory = record["attention_memory"]
    rows = [[label, format_bytes(v["cache_bytes"]), format_bytes(v["all_at_once"]["peak_bytes"]),
             format_bytes(v["blockwise"]["peak_bytes"]), format_ratio(v["peak_ratio"]),
             format_ratio(v["peak_over_cache"])]
            for label, v in memory["formats"].items() if not label.startswith("fp8-head")]
    return Block(tables=[Table(
        ["format", "cache", "peak, all at once", f"peak, blocks of {memory['block_tokens']}", "ratio",
         "all-at-once peak over cache"], rows,
        lead=f"Temporaries of one decode query's attention over {memory['tokens']:,} cached positions of one "
             f"SmolLM2 layer.")],
        notes=["float32's all-at-once path reads its storage directly, so it creates almost nothing; the "
               "blockwise path's running sums are its whole peak."])
