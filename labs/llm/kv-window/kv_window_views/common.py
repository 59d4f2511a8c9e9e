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


def spread(value: dict[str, float]) -> str:
    """'0.96–1.10×': a ratio's interval alone."""
    return f"{value['low']:.2f}–{value['high']:.2f}×"


def share(value: dict[str, float]) -> str:
    return f"{value['estimate']:.1%} ({value['low']:.1%}–{value['high']:.1%})"


def nats(value: dict[str, float]) -> str:
    return f"{value['estimate']:+.3f} ({value['low']:+.3f} to {value['high']:+.3f}) nats"


def span(record: dict[str, Any]) -> str:
    """The positions from the first eviction to the end of the text, as the page names them."""
    config = record["config"]
    return f"positions {config['slots']:,}–{config['positions'] - 1:,}"


def yardstick(record: dict[str, Any]) -> str:
    """'the 1.15× that separates SnapKV eviction from the full cache': the smallest gap between a bounded cache
    and the full cache, the finest a comparison against recomputation must resolve (kv_window.figures.resolution);
    its policy named only where its interval parts from the next one's."""
    gap = record["comparisons"]["recompute_yardstick"]
    if gap["parted"]:
        return f"the {gap['ratio']:.2f}× that separates {closest(record)} from the full cache"
    return f"the {gap['ratio']:.2f}× gap of the bounded caches closest to the full cache"


def closest(record: dict[str, Any], key: str = "label") -> str:
    """The name of the bounded cache closest to the full cache over the whole text (``key`` 'runner_up': the
    next closest)."""
    return NAMES[record["policies"][record["comparisons"]["recompute_yardstick"][key]]["policy"]["name"]]


def closest_sentence(record: dict[str, Any]) -> str:
    """Which bounded cache is closest to the full cache after the first eviction: named where its perplexity
    ratio's interval parts from the next one's, else the two named with the record unable to order them."""
    gap = record["comparisons"]["recompute_yardstick"]
    if gap["runner_up"] is None:
        return (f"Over {span(record)}, {closest(record)} is the only bounded cache, {gap['ratio']:.2f}× from the full "
                f"cache.")
    first, second = (record["policies"][gap[key]]["against_full"]["perplexity_ratio"] for key in ("label", "runner_up"))
    if gap["parted"]:
        return (f"Over {span(record)}, {closest(record)} is the bounded cache closest to the full cache, "
                f"{ratio(first)} from it, apart from the next, {closest(record, 'runner_up')}, at {ratio(second)}.")
    return (f"Over {span(record)}, {closest(record)}, {ratio(first)}, and {closest(record, 'runner_up')}, "
            f"{ratio(second)}, are the bounded caches closest to the full cache, and this record cannot tell which "
            f"is the closer: their intervals overlap.")


def recompute_verdict(record: dict[str, Any], entry: dict[str, Any]) -> str:
    """A policy against recomputation at the samples, as a table cell: higher or lower where the paired
    interval leaves out 1×; within the yardstick where it lies inside the band that resolves it; otherwise too
    coarse to tell, with its width over that band's."""
    against, found = entry["against_recompute"], entry["recompute_resolution"]
    if against["verdict"] != "level":
        return f"{VERDICT[against['verdict']]} recomputation"
    if found["resolves"]:
        return f"within {record['comparisons']['recompute_yardstick']['ratio']:.2f}× of recomputation"
    return "too coarse" + (f": {found['width_over_band']:.1f}× the band" if found["width_over_band"] is not None
                           else " to tell")


def level_verdict(against: dict[str, Any], found: dict[str, Any]) -> str:
    """'higher than', 'lower than' where the paired interval leaves out 0; 'indistinguishable from' only where it
    also resolves the yardstick (kv_window.figures.resolution); otherwise 'measured too coarse to tell from'."""
    if against["verdict"] != "level" or found["resolves"]:
        return VERDICT[against["verdict"]]
    return "measured too coarse to tell from"


def coarse_note(found: dict[str, Any], against: dict[str, Any]) -> str:
    """For a level interval too coarse to resolve the closest other bounded cache's gap to the full cache:
    '; the interval is 3.1 times as wide as that gap's band', else ''."""
    if against["verdict"] != "level" or found["resolves"]:
        return ""
    return (f"; the interval is {found['width_over_band']:.1f} times as wide as the band of the closest other bounded "
            f"cache's gap" if found["width_over_band"] is not None else "; no other bounded cache sets a gap")


def band(record: dict[str, Any]) -> str:
    """'0.87–1.15×': the interval a ratio against recomputation must lie inside to resolve the yardstick."""
    return spread(record["comparisons"]["recompute_yardstick"]["band"])
