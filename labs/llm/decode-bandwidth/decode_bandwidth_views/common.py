"""Wording of the decode views that no other lab uses: rates, ranges of ratios, signed changes, counts.
The general helpers (plural, join, ms, ratios) are site_hooks.formatting's."""

from __future__ import annotations

from collections.abc import Sequence

from site_hooks.formatting import format_ratio, join, plural


def threads_text(count: int) -> str:
    return plural(count, "thread")


def gbs(value: float) -> str:
    return f"{value / 1e9:.1f} GB/s"


def ratio_range(values: Sequence[float]) -> str:
    """'0.71–0.75×', or one ratio when they round alike."""
    low, high = format_ratio(min(values)), format_ratio(max(values))
    return low if low == high else f"{low.removesuffix('×')}–{high}"


def percent_range(values: Sequence[float]) -> str:
    low, high = f"{min(values):.0%}", f"{max(values):.0%}"
    return low if low == high else f"{low.removesuffix('%')}–{high}"


def signed_percent(share: float) -> str:
    """+13% for 1.13, −4% for 0.96."""
    change = (share - 1) * 100
    return f"{'+' if change >= 0 else '−'}{abs(change):.0f}%"


def format_count(value: float) -> str:
    """A count, or a median of counts: '1,024' or '2.5'."""
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


STATES = {"below": "faster than", "above": "slower than", "within": "within this run's noise of"}


def parted_side(ratio: float, apart: bool) -> str:
    """A side (labkit.summary.side_of_one's words) from a ratio of medians and whether the two cells' repetitions
    parted: for comparisons timed as cells rather than as paired rounds."""
    return ("below" if ratio < 1 else "above") if apart else "within"


def against(ratios: Sequence[float], sides: Sequence[str], contexts: Sequence[int], them: str) -> str:
    """'faster than {them} (0.77–0.80×)', from the per-context ratios and their sides ('below', 'above' or 'within',
    as labkit.summary.side_of_one reads a paired ratio's middle half): a direction is named at a context only where
    its side says so, and each state carries the range of its own contexts' ratios, never the others'; contexts
    that differ are named, the first with ``them``, the rest with 'it' ('faster than transformers at contexts 128
    and 512 (0.77–0.80×), within this run's noise of it at 1,024 (0.85×)')."""
    states: dict[str, list[tuple[int, float]]] = {}
    for ratio, side, context in zip(ratios, sides, contexts, strict=True):
        states.setdefault(STATES[side], []).append((context, ratio))
    if len(states) == 1:
        state, found = next(iter(states.items()))
        return f"{state} {them} ({ratio_range([ratio for _, ratio in found])})"
    return ", ".join(f"{state} {them if index == 0 else 'it'} at context{'s' if len(found) > 1 else ''} "
                     f"{join([f'{c:,}' for c, _ in found])} ({ratio_range([ratio for _, ratio in found])})"
                     for index, (state, found) in enumerate(states.items()))
