"""The storage lab's own views, one module per section of its page (docs/llm/kv-storage.md), and its
headline ratios. Torch-free: the record holds raw measurements only; views read the figures kv_storage.figures
(and labkit.summary.sweep_figures) derive from it when the build reads it; named by ``views`` in the lab's
lab.toml.

- grouped_query.py: "Grouped-query attention: fewer heads to store"
- decode_step.py: "Measuring a decode step" (its findings and equivalence, in place of the shared ones)
- memory.py: "Memory: what persists, and what passes through"
- paged_storage.py: "Paged storage in numbers: block size and sharing"
- pictures.py: the block table and the fork with copy-on-write, drawn from kv_storage.figures.TableModel
- results.py: the key results, the regime of each layout's step, the check-yourself answers
"""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import View

from .decode_step import equivalence_view, findings_view
from .grouped_query import gqa_view
from .memory import memory_view
from .paged_storage import paging_view, sharing_view
from .pictures import block_table_view, fork_view
from .results import (
    answer_paged_view,
    answer_peak_view,
    answer_sharing_view,
    key_results_view,
    regime_view,
    takeaway_memory_view,
    takeaway_step_view,
)

__all__ = ["VIEWS", "headline"]


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Per cached layout, the baseline's median step time over its own at the longest prefix; and concat's
    peak allocation over prealloc's in the memory loop. Each label names both sides and what is divided."""
    last = record["lengths"][-1]
    baseline = record["config"]["benchmark"]["baseline"]
    ratios = [(f"{baseline} ÷ {mode}, median step time at {last['length']} tokens", values["ratio_of_medians"])
              for mode, values in last["speedup"].items()]
    memory = record["memory"]
    ratios.append((f"concat ÷ prealloc, peak allocation in the {memory['length']}-step loop",
                   memory["concat_vs_prealloc"]["peak"]))
    return ratios


VIEWS: dict[str, View] = {"key-results": key_results_view, "regime": regime_view, "answer-sharing": answer_sharing_view,
         "answer-peak": answer_peak_view, "answer-paged": answer_paged_view,
         "takeaway-step": takeaway_step_view, "takeaway-memory": takeaway_memory_view,
         "block-table": block_table_view, "fork": fork_view, "gqa": gqa_view, "memory": memory_view, "paging": paging_view, "sharing": sharing_view,
         # in place of the shared findings and equivalence: ties, per-step gaps and repeated maxima (decode_step.py)
         "findings": findings_view, "equivalence": equivalence_view}
