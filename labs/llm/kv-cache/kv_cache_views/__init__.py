"""The KV-cache lab's own views: key results, pictures, the cache's bytes, real models, and the headline ratios.

Torch-free: the record holds raw measurements only; views read the figures kv_cache.figures.derive (and
labkit.summary.sweep_figures) derive from it when the build reads it; the shared views (tests, environment,
timing sweep, ...) come from site_hooks.
"""

from __future__ import annotations

from typing import Any

from kv_cache.figures import WORKED_EXAMPLE
from site_hooks.blocks import Block, Table, View
from site_hooks.formatting import format_number

from .capacity import calculator_view, model_configs_view, models_view
from .pictures import cache_growth_view, mask_view, work_view
from .results import (
    answer_capacity_view,
    answer_mask_view,
    answer_step_view,
    grouping_view,
    key_results_view,
    read_view,
    regime_view,
    takeaway_bytes_view,
    takeaway_limits_view,
    takeaway_result_view,
    takeaway_trained_view,
)
from .trained import trained_answer_view, trained_view


def cache_bytes_view(record: dict[str, Any]) -> Block:
    """Bytes per position from the config, then the formula beside the count from the tensors, per length."""
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    per_position = record["cache_formula"]["per_position_bytes"]
    rows = [e["cache_bytes"] | {"length": e["length"]} for e in record["lengths"]]
    last = rows[-1]
    example = record["cache_formula"]["worked_example_bytes"]
    measured = any(row["length"] == WORKED_EXAMPLE for row in rows)
    example_source = ("the benchmark counted the same from the tensors" if measured else
                      "a length this record did not measure, so it comes from the formula alone")
    sentence = (
        f"With batch {batch}, {model['kv_heads']} key/value heads of width {model['head_dim']} and "
        f"{model['dtype']} ({model['bytes_per_element']} bytes per element), every retained position adds "
        f"2 × {batch} × {model['kv_heads']} × {model['head_dim']} × {model['bytes_per_element']} = "
        f"{per_position:,} bytes to this one-layer cache. At {WORKED_EXAMPLE} positions, the worked example, "
        f"that is {example:,} bytes ({example_source}); at {last['length']} positions, the longest measured, "
        f"the key and value tensors hold {last['formula']:,} bytes. At every measured length the bytes of the "
        f"real cache tensors equal the formula."
    )
    table = Table(headings=["Retained positions T", f"Formula: {per_position:,} × T bytes", "Counted from the cache tensors"],
                  rows=[(row["length"], format_number(row["formula"]), format_number(row["measured"])) for row in rows])
    return Block(css="lab-cache-bytes", paragraphs=[sentence], tables=[table])


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Cached against full at the shortest and the longest length: ratios measured within one run."""
    first, last = record["lengths"][0], record["lengths"][-1]
    return [(f"full / cached at {entry['length']} tokens", entry["speedup"]["cached"]["ratio_of_medians"])
            for entry in (first, last)]


VIEWS: dict[str, View] = {
    "key-results": key_results_view,
    "trained": trained_view,
    "trained-answer": trained_answer_view,
    "cache-bytes": cache_bytes_view,
    "cache-growth": cache_growth_view,
    "work": work_view,
    "mask": mask_view,
    "regime": regime_view,
    "read": read_view,
    "models": models_view,
    "model-configs": model_configs_view,
    "grouping": grouping_view,
    "calculator": calculator_view,
    "answer-step": answer_step_view,
    "answer-capacity": answer_capacity_view,
    "answer-mask": answer_mask_view,
    "takeaway-bytes": takeaway_bytes_view,
    "takeaway-result": takeaway_result_view,
    "takeaway-trained": takeaway_trained_view,
    "takeaway-limits": takeaway_limits_view,
}
