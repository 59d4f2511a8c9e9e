"""The storage lab's part of the site: views of its memory, grouped-query, paging and sharing
sections, its own findings and equivalence sentences (timing.py), and its headline ratios. Torch-free;
named by ``views`` in the lab's lab.toml."""

from __future__ import annotations

from typing import Any

from .views import VIEWS

__all__ = ["VIEWS", "headline"]


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Per cached layout, the baseline's median step time over its own at the longest prefix; and concat's
    peak allocation over prealloc's in the memory loop. Each label names both sides and what is divided."""
    last = record["lengths"][-1]
    baseline = record["config"]["benchmark"]["baseline"]
    ratios = [(f"{baseline} ÷ {mode}, median step time at {last['length']} tokens", values["ratio_of_medians"])
              for mode, values in last["speedup"].items()]
    memory = record["memory"]
    variants = memory["variants"]
    ratios.append((f"concat ÷ prealloc, peak allocation in the {memory['length']}-step loop",
                   variants["concat"]["peak_bytes"] / variants["prealloc"]["peak_bytes"]))
    return ratios
