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


def against(ratios: Sequence[float], parted: Sequence[bool], contexts: Sequence[int], them: str) -> str:
    """'faster than {them}', 'slower than {them}' or 'within this run's noise of {them}', from the per-context ratios
    of the medians and whether the two cells' repetitions parted at each context: a direction is named at a context
    only where the two parted there, and contexts that differ are named, the first with ``them``, the rest with 'it'
    ('faster than transformers at contexts 512 and 1,024, within this run's noise of it at 128')."""
    states: dict[str, list[int]] = {}
    for ratio, apart, context in zip(ratios, parted, contexts, strict=True):
        state = ("faster than" if ratio < 1 else "slower than") if apart else "within this run's noise of"
        states.setdefault(state, []).append(context)
    if len(states) == 1:
        return f"{next(iter(states))} {them}"
    return ", ".join(f"{state} {them if index == 0 else 'it'} at context{'s' if len(at) > 1 else ''} "
                     f"{join([f'{c:,}' for c in at])}" for index, (state, at) in enumerate(states.items()))
