"""The cache-window lab's views, one module per part of its page (docs/llm/kv-window.md). Torch-free: the record
holds raw measurements only; views read the figures kv_window.figures derives from it when the build reads it.

- pictures.py: a ring buffer's slots, the sinks + window mask, a packed row's mask, drawn from kv_window.rules
- quality.py: perplexity by position bucket, each policy after the first eviction, against recomputation
- rules.py: re-rotation drift and the two position rules on the model
- cost.py: bytes kept over the text, the decode step, grouped heads, packed against padded prefill
- results.py: the key results and the check-yourself answers
- reproduce.py: the record's settings for the Reproduce appendix
"""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import View

from .cost import grouped_view, memory_chart_view, memory_view, packing_view
from .pictures import packed_view, ring_view, sinks_view
from .quality import buckets_view, collapse_view, divergence_view, quality_chart_view, recompute_view
from .reproduce import config_view
from .results import answer_early_view, answer_ring_view, answer_sinks_view, key_results_view
from .rules import drift_view, rules_view

__all__ = ["VIEWS", "headline"]


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Ratios within one run: the full cache's decode step over the ring buffer's at the end of the text, and
    the padded prefill's time over the packed one's."""
    return [("full ÷ ring buffer, decode step at the end of the text", record["memory"]["full_over_window_step"]),
            ("padded ÷ packed, prefill time", record["packing"]["padded_over_packed"])]


VIEWS: dict[str, View] = {
    "key-results": key_results_view, "ring-slots": ring_view, "sinks-mask": sinks_view, "packed-mask": packed_view,
    "quality-chart": quality_chart_view, "buckets": buckets_view, "divergence": divergence_view,
    "collapse": collapse_view, "recompute": recompute_view, "drift": drift_view, "rules": rules_view,
    "memory-chart": memory_chart_view, "memory": memory_view, "grouped": grouped_view, "packing": packing_view,
    "answer-ring": answer_ring_view, "answer-sinks": answer_sinks_view, "answer-early": answer_early_view,
    # in place of the shared config table, which reads a timing sweep's config (reproduce.py)
    "config": config_view,
}
