"""What a prober learns from its own time to first token, without salts and with one per tenant."""

from __future__ import annotations

from typing import Any

from labkit.summary import MIN_PARTED
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ratio

from .common import one_time

CONDITION_NAMES = {"shared": "one cache for every client", "salted": "a cache_salt per tenant"}


def ratio_text(ratio: dict[str, Any]) -> str:
    """A paired ratio as the page writes it: its median, then its middle half in brackets."""
    return f"{format_ratio(ratio['median'])} [{format_ratio(ratio['low'])}–{format_ratio(ratio['high'])}]"


def verdict(figures: dict[str, Any], rounds: int) -> str:
    """The sentence for one condition, chosen by the middle half of its paired ratios (labkit.summary.side_of_one)."""
    ratio = figures["guessed_over_decoy"]
    spread = ratio_text(ratio)
    if figures["side"] == "below":
        return (f"the guess came back sooner than the decoy in most rounds ({spread} of the decoy's time), and "
                f"sooner than every decoy in {figures['found']} of {rounds}: a prober can tell the prefix was sent")
    if figures["side"] == "above":
        return (f"the guess came back later than the decoy in most rounds ({spread}); nothing in that says the "
                f"prefix was sent, and it came back sooner than every decoy in {figures['found']} of {rounds}")
    why = "too few rounds to part them" if ratio["rounds"] < MIN_PARTED else "a middle half that holds 1"
    return (f"the rounds do not part the guess from the decoy ({spread}, {why}), and the guess came back sooner than "
            f"every decoy in {figures['found']} of {rounds}")


def side_channel_view(record: dict[str, Any]) -> Block:
    entry = record["side_channel"]
    conditions = entry["conditions"]
    shared, salted = (conditions[name]["figures"] for name in ("shared", "salted"))
    rows = []
    for name, condition in conditions.items():
        f = condition["figures"]
        rows.append((CONDITION_NAMES[name], one_time(f["guessed_ttft_p50_s"]), one_time(f["decoy_ttft_p50_s"]),
                     ratio_text(f["guessed_over_decoy"]), f"{f['found']} of {entry['rounds']}",
                     f"{f['guessed_cached_min']:,}" if f["guessed_cached_min"] == f["guessed_cached_max"]
                     else f"{f['guessed_cached_min']:,}–{f['guessed_cached_max']:,}"))
    return Block(paragraphs=[
        f"Guessing a {entry['prefix_tokens']}-token prefix, with {CONDITION_NAMES['shared']}, "
        f"{verdict(shared, entry['rounds'])}. With {CONDITION_NAMES['salted']}, {verdict(salted, entry['rounds'])}."],
        tables=[Table(["cache", "guessed prefix, median TTFT", "decoy, median TTFT", "guessed ÷ decoy, per round",
                       "guess sooner than every decoy", "tokens the guess found cached"], rows,
                      caption=f"{entry['rounds']} paired rounds per row, each on a fresh prefix; the ratio is the "
                              "median of the rounds' ratios [their middle half].")])


def key_result(record: dict[str, Any]) -> str:
    """The experiment in one bullet: the guess's time over the decoy's, without salts and with them."""
    entry = record["side_channel"]
    shared, salted = (entry["conditions"][name]["figures"] for name in ("shared", "salted"))
    told = {"below": "a prober can tell it was sent", "above": "the guess came back later",
            "within": "the rounds do not part it from a decoy"}
    return (f"A guessed {entry['prefix_tokens']}-token prefix another client sent came back in "
            f"{format_ratio(shared['guessed_over_decoy']['median'])} a decoy's time to first token without salts "
            f"({told[shared['side']]}), and in {format_ratio(salted['guessed_over_decoy']['median'])} with a "
            f"cache_salt per tenant ({told[salted['side']]}).")
