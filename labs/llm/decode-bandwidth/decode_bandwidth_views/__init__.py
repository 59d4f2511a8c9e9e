"""The decode-bandwidth lab's views: one module per section of its page (docs/llm/decode-bandwidth.md), each a
function of the checked record returning a site_hooks.blocks.Block, and the headline ratios for comparing
machines. Torch-free; the record holds raw measurements only, the figures they read are derived from it by
decode_bandwidth.figures.derive when the build reads it, and the constants come from
decode_bandwidth.figures.formulas."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import cell_table
from decode_bandwidth.grid import group_key, headline_key
from site_hooks.blocks import View

from .accelerator import accelerator_lessons_view, accelerator_takeaway_view, accelerator_view
from .batch_one import batch_one_view
from .batches import batches_view
from .client import client_view
from .comparison import comparison_view
from .compiled import compiled_summary_view, compiled_view
from .equivalence import equivalence_view
from .floor import floor_drift_view, floor_view
from .layout import kernel_chart_view, layout_view
from .model import model_view
from .pictures import regime_grid_view, roofline_picture_view, step_bytes_view
from .profile import profile_view
from .results import answer_bound_view, answer_crossover_view, answer_gap_view, key_results_view
from .roofline import roofline_view
from .trained import (
    trained_answers_view,
    trained_attention_view,
    trained_bytes_view,
    trained_contrast_view,
    trained_kernels_view,
    trained_ladder_view,
    trained_paired_view,
    trained_quality_view,
    trained_served_view,
    trained_verdict_view,
    trained_view,
)
from .variants import variants_view

VIEWS: dict[str, View] = {
    "model": model_view, "floor": floor_view, "floor-drift": floor_drift_view, "layout": layout_view, "decode-equivalence": equivalence_view,
    "roofline": roofline_view, "roofline-picture": roofline_picture_view, "comparison": comparison_view, "batches": batches_view, "batch-one": batch_one_view,
    "variants": variants_view, "profile": profile_view, "client": client_view, "key-results": key_results_view,
    "step-bytes": step_bytes_view, "regimes": regime_grid_view, "answer-gap": answer_gap_view,
    "answer-bound": answer_bound_view, "answer-crossover": answer_crossover_view,
    "compiled": compiled_view, "compiled-summary": compiled_summary_view, "kernels": kernel_chart_view,
    "trained": trained_view, "trained-bytes": trained_bytes_view, "trained-verdict": trained_verdict_view,
    "trained-ladder": trained_ladder_view, "trained-paired": trained_paired_view, "trained-served": trained_served_view, "trained-quality": trained_quality_view,
    "trained-answers": trained_answers_view, "trained-contrast": trained_contrast_view,
    "trained-kernels": trained_kernels_view, "trained-attention": trained_attention_view, "accelerator": accelerator_view,
    "accelerator-lessons": accelerator_lessons_view, "accelerator-takeaway": accelerator_takeaway_view,
}


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Ratios within one run, comparable across machines: ours against transformers and against the floor."""
    bench = record["config"]["benchmark"]
    dtype, threads = headline_key(record)
    groups = {group_key(g): g for g in record["groups"]}
    cells = cell_table(record)
    short, long = bench["contexts"][0], bench["contexts"][-1]
    batch = bench["batches"][-1]
    best_short = groups[(dtype, threads, 1, short)]["best_ours"]
    return [
        (f"ours best / hf-dynamic, batch 1, context {long}", groups[(dtype, threads, 1, long)]["best_over_hf_dynamic"]),
        (f"ours best / memory floor, batch 1, context {short}",
         cells[(dtype, threads, 1, short, best_short)]["step_over_floor"]),
        (f"hf-dynamic / memory floor, batch 1, context {short}",
         cells[(dtype, threads, 1, short, "hf-dynamic")]["step_over_floor"]),
        (f"ours-concat / ours-prealloc, batch {batch}, context {long}",
         groups[(dtype, threads, batch, long)]["concat_over_prealloc"]),
        ("client tokens/s, ours / transformers", record["client"]["ours_over_transformers"]),
    ]
