"""Small readers of the checked record that several sections share. Torch-free."""

from __future__ import annotations

from typing import Any

from kv_quant.figures import REFERENCE


def longest(record: dict[str, Any]) -> str:
    """The longest measured context on the trained model, as the record's key."""
    return str(record["trained"]["contexts"][-1])


def trained(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per trained format label, its trained-model figures."""
    return {label: entry["trained"] for label, entry in record["formats"].items() if "trained" in entry}


def bits(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def ppl_change(change: float) -> str:
    return f"{change:+.1%}"


def agreement(share: float) -> str:
    return f"{share:.1%}"


def reference_perplexity(record: dict[str, Any]) -> float:
    return record["formats"][REFERENCE]["trained"]["perplexity"][longest(record)]
