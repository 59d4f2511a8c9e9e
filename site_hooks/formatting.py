"""Numbers and lists into the words a page prints: the one copy every view uses.

Sizes in decimal units (kB, MB, GB: powers of 1000) unless a binary unit is asked for, with the exact byte
count kept for a title or a table cell beside it; durations in the unit that keeps three figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NUMBER_WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
DECIMAL = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")]
BINARY = [(2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")]
SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def plural(count: int, word: str, words: str | None = None) -> str:
    """'1 lab test', '2 lab tests', '1,024 blocks' (``words``: an irregular plural)."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def spelled(count: int) -> str:
    """A small count as prose writes it ('three'); larger ones as digits."""
    return NUMBER_WORDS[count] if 0 <= count < len(NUMBER_WORDS) else f"{count:,}"


def join(items: Sequence[str], word: str = "and") -> str:
    """'a', 'a and b', 'a, b and c'."""
    if not items:
        raise ValueError("join needs at least one item, got none")
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {word} " + items[-1]


def format_bytes(count: float, binary: bool = False) -> str:
    """12,288 -> '12.3 kB' (or '12.0 KiB' with ``binary``); below 1,000 the exact count in bytes."""
    for size, unit in BINARY if binary else DECIMAL:
        if abs(count) >= size:
            value = count / size
            return f"{value:.3g} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    return f"{count:,.0f} bytes" if count != 1 else "1 byte"


def format_seconds(seconds: float) -> str:
    """A duration in the unit that keeps it readable: '850 ns', '165 µs', '12.3 ms', '2.40 s'."""
    for size, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(seconds) >= size:
            value = seconds / size
            return f"{value:.3g} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def format_ms(nanoseconds: float, decimals: int | None = None) -> str:
    """Nanoseconds as milliseconds with three significant figures or more: '0.165', '12.30', '141.5'; with
    ``decimals``, that many decimals whatever the size ('12.49')."""
    milliseconds = nanoseconds / 1e6
    if decimals is not None:
        return f"{milliseconds:.{decimals}f}"
    return f"{milliseconds:.3f}" if milliseconds < 10 else f"{milliseconds:.2f}" if milliseconds < 100 else f"{milliseconds:.1f}"


def format_latency(seconds: float | None) -> str:
    """A latency as a client sees it: whole milliseconds below a second ('18 ms'), else seconds ('1.21 s');
    'n/a' where none was measured."""
    if seconds is None:
        return "n/a"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def format_number(value: float) -> str:
    return f"{value:,}"


def format_ratio(value: float) -> str:
    return f"{value:.2f}×"


def format_sci(value: float) -> str:
    return "0" if value == 0 else f"{value:.2e}"


def format_percent(share: float) -> str:
    return f"{share:.0%}"


def format_share(part: float, whole: float) -> str:
    """part / whole as a whole percentage; 'n/a' of nothing."""
    return format_percent(part / whole) if whole else "n/a"


def power_of_ten(value: float) -> str:
    """5.4e8 -> '5 × 10⁸', in text that needs no markup."""
    exponent = math.floor(math.log10(value))
    mantissa = round(value / 10**exponent)
    if mantissa == 10:
        mantissa, exponent = 1, exponent + 1
    return f"{mantissa} × 10{str(exponent).translate(SUPERSCRIPTS)}"
