"""The prefix-caching lab's views, one module per part of its page (docs/llm/kv-prefix.md). Torch-free: the record
holds raw measurements only; views read the figures kv_prefix.figures derives from it when the build reads it.

- pictures.py: the hash chain over three prompts' blocks and the radix tree they build, drawn by the engine's indexes
- tables.py: the workloads, warm against cold, each workload's runs, the uncached prefill against the arrivals, the
  two indexes (and how they evicted), the two orders and what the cache-aware one costs the requests it ranks last
- results.py: the key results and the check-yourself answers
- side_channel.py: what a prober learns from its time to first token, without salts and with them
- accelerator.py: what one hit saves on a published model and an H100 (arithmetic)
- reproduce.py: the record's settings for the Reproduce appendix
"""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import View

from .accelerator import accelerator_view
from .pictures import hash_chain_view, tree_view
from .reproduce import config_view
from .results import answer_eviction_view, key_results_view
from .side_channel import side_channel_view
from .tables import (
    block_cost_view,
    equivalence_view,
    few_shot_view,
    indexes_view,
    order_price_view,
    order_view,
    partial_view,
    queue_view,
    runs_view,
    unshared_view,
    workloads_view,
)

__all__ = ["VIEWS", "headline"]


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Within one run: the shared-system workload's median TTFT cached over uncached."""
    return [("cached ÷ uncached, median TTFT, shared system prompt",
             record["workloads"]["shared_system"]["figures"]["hash-fcfs-holds_ttft_p50_over_off"])]


VIEWS: dict[str, View] = {
    "key-results": key_results_view, "workloads": workloads_view, "hash-chain": hash_chain_view,
    "block-cost": block_cost_view, "radix-tree": tree_view, "indexes": indexes_view, "equivalence": equivalence_view,
    "shared-system": runs_view("shared_system", legend=True), "answer-eviction": answer_eviction_view,
    "queue": queue_view, "multi-turn": runs_view("multi_turn"), "order": order_view, "order-price": order_price_view,
    "few-shot": few_shot_view, "few-shot-runs": runs_view("few_shot"), "unshared": unshared_view, "partial": partial_view,
    "accelerator": accelerator_view, "side-channel": side_channel_view,
    # in place of the shared config table, which reads a timing sweep's config (reproduce.py)
    "config": config_view,
}
