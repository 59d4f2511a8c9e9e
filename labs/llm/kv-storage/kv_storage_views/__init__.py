"""The storage lab's part of the site: checks and views of its memory, grouped-query, paging and sharing
sections, and its headline ratios. Torch-free; named by ``views`` in the lab's lab.toml."""

from __future__ import annotations

from typing import Any

from .checks import check_record
from .views import VIEWS

__all__ = ["VIEWS", "check_record", "headline"]


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Per cached layout, full recompute against it at the longest prefix; and concat's peak over prealloc's."""
    last = record["lengths"][-1]
    ratios = [(f"full / {mode} per step at {last['length']} tokens", values["ratio_of_medians"])
              for mode, values in last["speedup"].items()]
    variants = record["memory"]["variants"]
    ratios.append(("concat peak / prealloc peak", variants["concat"]["peak_bytes"] / variants["prealloc"]["peak_bytes"]))
    return ratios
