"""Small wording helpers shared by the decode views: numbers into the words a sentence needs."""

from __future__ import annotations

from site_hooks.formatting import format_ratio


def threads_text(count: int) -> str:
    return f"{count} thread" + ("" if count == 1 else "s")


def join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def gbs(value: float) -> str:
    return f"{value / 1e9:.1f} GB/s"


def ratio_range(values: list[float]) -> str:
    """'0.71–0.75×', or one ratio when they round alike."""
    low, high = format_ratio(min(values)), format_ratio(max(values))
    return low if low == high else f"{low.removesuffix('×')}–{high}"


def signed_percent(share: float) -> str:
    """+13% for 1.13, −4% for 0.96."""
    change = (share - 1) * 100
    return f"{'+' if change >= 0 else '−'}{abs(change):.0f}%"
