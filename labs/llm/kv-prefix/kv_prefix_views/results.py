"""The key results and the check-yourself answers."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block
from site_hooks.formatting import format_percent

from . import side_channel
from .common import NAMES, run, summary, ttft_sentence


def key_results_view(record: dict[str, Any]) -> Block:
    items: list[str] = []
    for name in record["workloads"]:
        on, off = run(record, name, "hash")["figures"], run(record, name, "off")["figures"]
        said = ttft_sentence(record, name)
        if not items:  # the first verdict says what the same work is
            said = said.replace("did the same work", "did the same work (same pool, same tokens found and prefilled)", 1)
        items.append(f"{NAMES[name].capitalize()}: {said}; "
                     f"{format_percent(on['hit_rate'])} of prompt tokens found cached (the prefix rule allows at most "
                     f"{format_percent(summary(record, name)['predicted_hit_rate'])}), {on['prefilled_tokens']:,} "
                     f"tokens prefilled instead of {off['prefilled_tokens']:,}.")
    unequal = [f"{NAMES[name]} ({key.removesuffix('_outputs_equal')})" for name, workload in record["workloads"].items()
               for key, value in workload["figures"].items() if key.endswith("_outputs_equal") and not value]
    items.append("Every request generated the same tokens with the cache as without, in every run." if not unequal
                 else f"Some requests generated other tokens with the cache than without, in: {'; '.join(unequal)}.")
    items.append(side_channel.key_result(record))
    return Block(items=items)


def answer_eviction_view(record: dict[str, Any]) -> Block:
    """What the small pool's evictions cost the shared-system workload: nothing where every lookup found what it found
    with room for everything (then no evicted block was asked for again), else the hit rate lost."""
    workload = record["workloads"]["shared_system"]
    holds, evicts = (run(record, "shared_system", "hash", pool=pool)["figures"] for pool in ("holds", "evicts"))
    said = (f"In the pool of {workload['pools']['evicts']} blocks the shared-system workload evicted "
            f"{evicts['evictions']:,} blocks and found {format_percent(evicts['hit_rate'])} of its prompt tokens "
            f"cached, against {format_percent(holds['hit_rate'])} with room for everything.")
    if evicts["cached_tokens"] == holds["cached_tokens"]:
        said += (" Every request found as many tokens cached as in the large pool, so no evicted block was ever asked "
                 "for again: the blocks that went were ones no later prompt started with.")
    else:
        said += (f" It prefilled {evicts['prefilled_tokens']:,} tokens against {holds['prefilled_tokens']:,}: some "
                 f"blocks a later request would have found were gone.")
    return Block(paragraphs=[said])
