"""Small readers and wordings of the checked record that several sections share. Torch-free."""

from __future__ import annotations

from typing import Any

from kv_window.figures import policy_label

NAMES = {"full": "full cache", "window": "window only", "sinks": "sinks + window", "snapkv": "SnapKV eviction"}
VERDICT = {"above": "higher than", "below": "lower than", "level": "indistinguishable from"}


def label(record: dict[str, Any], name: str) -> str:
    return policy_label(record["policies"], name)


def policy(record: dict[str, Any], name: str) -> dict[str, Any]:
    return record["policies"][label(record, name)]


def ranged(value: dict[str, float], digits: int = 2) -> str:
    """'12.70 (11.93–13.52)': an estimate and its 95% interval."""
    return f"{value['estimate']:.{digits}f} ({value['low']:.{digits}f}–{value['high']:.{digits}f})"


def ratio(value: dict[str, float]) -> str:
    """'2.01× (1.90–2.12×)'."""
    return f"{value['estimate']:.2f}× ({value['low']:.2f}–{value['high']:.2f}×)"


def share(value: dict[str, float]) -> str:
    return f"{value['estimate']:.1%} ({value['low']:.1%}–{value['high']:.1%})"


def nats(value: dict[str, float]) -> str:
    return f"{value['estimate']:+.3f} ({value['low']:+.3f} to {value['high']:+.3f}) nats"


def span(record: dict[str, Any]) -> str:
    """The positions from the first eviction to the end of the text, as the page names them."""
    config = record["config"]
    return f"positions {config['slots']:,}–{config['positions'] - 1:,}"
