"""Small readers of the checked record that several sections share, and the words for an interval. Torch-free."""

from __future__ import annotations

from typing import Any

from kv_quant.figures import TOP1_BAND

Interval = dict[str, float]  # {"estimate", "low", "high"}, as kv_quant.figures stores a bootstrap interval


def longest(record: dict[str, Any]) -> str:
    """The longest measured context on the trained model, as the record's key."""
    return str(record["trained"]["contexts"][-1])


def trained(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per trained format label, its trained-model figures."""
    return {label: entry["trained"] for label, entry in record["formats"].items() if "trained" in entry}


def at_longest(record: dict[str, Any]) -> dict[str, dict[str, Interval]]:
    """Per trained format, its quality intervals at the longest context."""
    at = longest(record)
    return {label: t["quality"][at] for label, t in trained(record).items()}


def bits(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def signed(share: float) -> str:
    """A signed percentage with a true minus sign: '+0.3%', '−1.2%'."""
    return f"{share:+.1%}".replace("-", "−")


def ppl_change(found: Interval) -> str:
    """'+0.3% (−0.1% to +0.7%)': perplexity's change against float32's, with its interval."""
    return f"{signed(found['estimate'])} ({signed(found['low'])} to {signed(found['high'])})"


def agreement(found: Interval) -> str:
    """'98.8% (98.4–99.2%)'."""
    return f"{found['estimate']:.1%} ({found['low']:.1%}–{found['high']:.1%})"


def kl_text(found: Interval) -> str:
    """'1.20e-03 (1.02e-03–1.41e-03)'; a KL of exactly zero (the reference) as '0'."""
    if found["high"] == 0:
        return "0"
    return f"{found['estimate']:.2e} ({found['low']:.2e}–{found['high']:.2e})"


def misses(found: Interval) -> str:
    """The share of positions whose most likely token differs from float32's, from top-1 agreement: '1.2%
    (0.8–1.6%)'."""
    return f"{1 - found['estimate']:.1%} ({1 - found['high']:.1%}–{1 - found['low']:.1%})"


def hiding_rule() -> str:
    """When perplexity is said to hide damage (kv_quant.figures.hides_damage), in the words every view uses."""
    return (f"a perplexity indistinguishable from float32's while its top token changed at more than "
            f"{1 - TOP1_BAND:.0%} of positions across its whole interval")


def moved(found: Interval) -> str:
    """How perplexity moved against float32's, as its interval allows: 'rose', 'fell', or 'cannot be told apart'."""
    return "rose" if found["low"] > 0 else "fell" if found["high"] < 0 else "cannot be told apart from float32's"
