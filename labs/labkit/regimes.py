"""Which regime a per-step time is in, from a sweep's per-step medians: flat (per-call overhead) or growing.

In labkit, not in the site's renderers, so that a figures module derives a regime in one place when the record
is read (labkit.summary.sweep_figures derives one per mode of a timing sweep, at ``regimes``); views word it.

Horace He's three regimes are compute, memory bandwidth and overhead. A CPU timing sweep can name one of
them by itself: where the time per step stays flat while the work per step grows several-fold, the
step is paying a fixed cost per call (interpreter, dispatch, small-kernel setup), not for its work. Where
it grows, the record alone cannot say whether arithmetic or memory traffic is the limit; a page says so
and points at a measurement that can (a floor measured in the same run, as the decode lab does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

FLAT_BAND = 0.10  # per-step medians within 10% of the shortest length's count as flat
OVERHEAD_GROWTH = 4  # flat across at least a fourfold growth of the prefix: a fixed per-call cost dominates


@dataclass(frozen=True)
class Regime:
    flat_until: int  # the longest length up to which every step stayed within FLAT_BAND of the first
    flat_growth: float  # how many times the work per step grew across the flat span (the ratio of its lengths)
    overhead_bound: bool  # flat across at least OVERHEAD_GROWTH-fold growth of the prefix
    step_growth: float  # the longest length's per-step time over the shortest's

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def regime(per_step: Mapping[int, float], band: float = FLAT_BAND) -> Regime:
    """The regime of one mode from its per-step medians, by ascending length (any unit of time)."""
    lengths = list(per_step)
    first, base = lengths[0], per_step[lengths[0]]
    flat_until = first
    for length in lengths[1:]:
        if abs(per_step[length] / base - 1) > band:
            break
        flat_until = length
    growth = flat_until / first
    return Regime(flat_until=flat_until, flat_growth=growth, overhead_bound=growth >= OVERHEAD_GROWTH,
                  step_growth=per_step[lengths[-1]] / base)
