"""Which regime a per-step time is in, read from a sweep's stored medians: flat (per-call overhead) or growing.

In labkit, not in the site's renderers, so that a lab's figures module can derive a regime once and store it.

Horace He's three regimes are compute, memory bandwidth and overhead. A CPU timing sweep can name one of
them by itself: where the time per step stays flat while the work per step grows several-fold, the
step is paying a fixed cost per call (interpreter, dispatch, small-kernel setup), not for its work. Where
it grows, the record alone cannot say whether arithmetic or memory traffic is the limit; a page says so
and points at a measurement that can (a floor measured in the same run, as the decode lab does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLAT_BAND = 0.10  # per-step medians within 10% of the shortest length's count as flat


@dataclass(frozen=True)
class Regime:
    mode: str
    per_step_us: dict[int, float]  # length -> median µs per decode step
    flat_until: int  # the longest length up to which every step stayed within FLAT_BAND of the first

    @property
    def first(self) -> int:
        return next(iter(self.per_step_us))

    @property
    def growth(self) -> float:
        """How many times the work per step grew across the flat span (the ratio of its lengths)."""
        return self.flat_until / self.first

    @property
    def overhead_bound(self) -> bool:
        """Flat across at least a fourfold growth of the prefix: a fixed per-call cost dominates there."""
        return self.growth >= 4


def per_step(record: dict[str, Any], mode: str) -> dict[int, float]:
    return {e["length"]: e["modes"][mode]["median_ns"] / e["steps"] / 1e3 for e in record["lengths"]}


def regime(record: dict[str, Any], mode: str, band: float = FLAT_BAND) -> Regime:
    steps = per_step(record, mode)
    lengths = list(steps)
    base = steps[lengths[0]]
    flat_until = lengths[0]
    for length in lengths[1:]:
        if abs(steps[length] / base - 1) > band:
            break
        flat_until = length
    return Regime(mode=mode, per_step_us=steps, flat_until=flat_until)
