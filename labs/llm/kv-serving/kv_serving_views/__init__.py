"""The serving lab's views of its checked record, one module per section of docs/llm/kv-serving.md, and its
headline ratios.

Torch-free: every view is ``record -> site_hooks.blocks.Block``, reading the figures the build has checked
against kv_serving.figures.derive; what the record does not store (a run's mean blocks in use, each rate's
ratio to serial) comes from the one formula in kv_serving.formulas.
"""

from __future__ import annotations

from typing import Any

from kv_serving.formulas import mean_used, policy
from site_hooks.blocks import View

from .admission import admission_view
from .cancellation import cancellation_view
from .model import model_cost_view, pool_view
from .rates import rates_view
from .steps import step_view
from .targets import targets_view


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Ratios measured within one run: batching over serial, a wide batch's tokens/s over one, occupancy."""
    steps = record["step_times"]
    return [
        ("batched throughput at the best arrival rate over serial", record["rates"]["speedup_over_serial"]),
        (f"decode tokens/s, batch {steps[-1]['batch']} over batch {steps[0]['batch']}",
         steps[-1]["tokens_per_s"] / steps[0]["tokens_per_s"]),
        ("mean pool occupancy, byte admission over the safe count limit",
         mean_used(policy(record, "kv_budget_bytes")) / mean_used(policy(record, "count_safe"))),
    ]


VIEWS: dict[str, View] = {
    "pool": pool_view,
    "model-cost": model_cost_view,
    "steps": step_view,
    "admission": admission_view,
    "cancellation": cancellation_view,
    "rates": rates_view,
    "targets": targets_view,
}
