"""The one rule by which a kernel is chosen from a table of timings: the least time, the first listed on a tie.

Torch-free: the decode lab's record check repeats its kernel table's choice at build time with it, and the serving
core's kernel table chooses with it when a model is arranged for serving.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def fastest(ns: Mapping[str, float], among: Sequence[str] | None = None) -> str:
    """The kernel of ``ns`` (kernel -> ns) with the least time, among ``among`` where given; on a tie the first in
    ``ns``'s order. ValueError when none is left to choose from."""
    names = [name for name in ns if among is None or name in among]
    if not names:
        raise ValueError(f"no kernel to choose: timed {sorted(ns)}, allowed {None if among is None else list(among)}")
    return min(names, key=lambda name: ns[name])
