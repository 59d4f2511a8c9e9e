"""Wording of the decode views that no other lab uses: rates, ranges of ratios, signed changes, counts.
The general helpers (plural, join, ms, ratios) are site_hooks.formatting's."""

from __future__ import annotations

from collections.abc import Sequence

from site_hooks.formatting import format_ratio, plural


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


def against(ratios: Sequence[float], parted: Sequence[bool]) -> str:
    """'faster than', 'slower than' or 'within this run's noise of' another mode, from the per-context ratios of the
    medians and whether the two cells' repetitions parted at each context: a direction is named only where every
    context parted and agreed on it."""
    if all(parted) and max(ratios) < 1:
        return "faster than"
    if all(parted) and min(ratios) > 1:
        return "slower than"
    return "within this run's noise of"
