"""The serving lab's views of its checked record, one module per section of docs/llm/kv-serving.md, and its
headline ratios.

Torch-free: every view is ``record -> site_hooks.blocks.Block``; the record holds raw measurements only, and a
view reads the figures kv_serving.figures.derive derives from it when the build reads it; the constants and the
pictures' replay come from kv_serving.figures.formulas.
"""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import View

from .accelerator import accelerator_lessons_view, accelerator_takeaway_view, accelerator_view
from .admission import admission_detail_view, admission_outcome_view, admission_view
from .cancellation import cancellation_detail_view, cancellation_view
from .checks import checks_view
from .chunked import chunked_verdict_view, chunked_view
from .client import client_verdict_view, client_view
from .kernels import kernels_view
from .memory import memory_view
from .model import model_cost_view, pool_view
from .pictures import iteration_view, iterations_view, stall_view
from .rates import rates_detail_view, rates_view
from .results import answer_fit_view, answer_stall_view, key_results_view
from .solo import solo_view
from .steps import step_view, steps_detail_view
from .trained import answer_concurrent_view, trained_admission_view, trained_view


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Ratios measured within one run: batching over serial, a wide batch's tokens/s over one, occupancy."""
    steps = record["step_times"]
    return [
        ("trained model: batched throughput at the highest arrival rate over one at a time",
         record["trained"]["speedup_over_serial"]),
        ("batched throughput at the best arrival rate over serial", record["rates"]["speedup_over_serial"]),
        (f"decode tokens/s, batch {steps[-1]['batch']} over batch {steps[0]['batch']}",
         record["step_scaling"]["tokens_per_s_ratio"]),
        ("mean pool occupancy, byte admission over the safe count limit",
         record["admission"]["occupancy_bytes_over_safe"]),
    ]


VIEWS: dict[str, View] = {
    "key-results": key_results_view,
    "accelerator": accelerator_view,
    "accelerator-lessons": accelerator_lessons_view,
    "accelerator-takeaway": accelerator_takeaway_view,
    "trained": trained_view,
    "trained-admission": trained_admission_view,
    "answer-concurrent": answer_concurrent_view,
    "iteration": iteration_view,
    "iterations": iterations_view,
    "prefill-stall": stall_view,
    "chunked-verdict": chunked_verdict_view,
    "chunked-prefill": chunked_view,
    "answer-fit": answer_fit_view,
    "answer-stall": answer_stall_view,
    "pool": pool_view,
    "model-cost": model_cost_view,
    "steps": step_view,
    "solo-steps": solo_view,
    "client-steps": client_view,
    "client-verdict": client_verdict_view,
    "kernels": kernels_view,
    "prefill-memory": memory_view,
    "admission": admission_view,
    "admission-outcome": admission_outcome_view,
    "cancellation": cancellation_view,
    "rates": rates_view,
    "checks": checks_view,
    "steps-detail": steps_detail_view,
    "admission-detail": admission_detail_view,
    "cancellation-detail": cancellation_detail_view,
    "rates-detail": rates_detail_view,
}
