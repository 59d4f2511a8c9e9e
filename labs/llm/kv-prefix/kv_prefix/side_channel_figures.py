"""The side-channel experiment's figures and invariants (torch-free; kv_prefix.side_channel measures it).

Per condition: the guessed probe's time to first token over the decoy's, paired by round (median and middle half),
and which side of 1 that middle half lies; how many rounds a prober would have called right by the simplest rule
that needs no knowledge of the server (the guess came back sooner than every decoy of the condition); the tokens each
probe found cached.
"""

from __future__ import annotations

from typing import Any

from labkit.figures import Figures, refuse
from labkit.summary import median, paired, side_of_one


def condition_figures(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    guessed = [r["guessed_ttft_s"] for r in rounds]
    decoy = [r["decoy_ttft_s"] for r in rounds]
    ratio = paired(guessed, decoy)
    fastest_decoy = min(decoy)
    return {"guessed_over_decoy": ratio, "side": side_of_one(ratio),
            "found": sum(time < fastest_decoy for time in guessed),
            "guessed_ttft_p50_s": median(guessed), "decoy_ttft_p50_s": median(decoy),
            "guessed_cached_min": min(r["guessed_cached_tokens"] for r in rounds),
            "guessed_cached_max": max(r["guessed_cached_tokens"] for r in rounds),
            "decoy_cached_max": max(r["decoy_cached_tokens"] for r in rounds)}


def side_channel_figures(record: dict[str, Any], figures: Figures) -> None:
    for name, entry in record["side_channel"]["conditions"].items():
        figures.add_each(("side_channel", "conditions", name, "figures"), condition_figures(entry["rounds"]),
                         "its rounds' times to first token and cached tokens")


def check_side_channel(record: dict[str, Any], source: str) -> None:
    """What the salt promises, held on the record: a prober whose salt differs from the victim's finds none of the
    victim's tokens, a decoy nobody sent is found nowhere, and without salts the guess finds the victim's blocks."""
    entry = record["side_channel"]
    for name, condition in entry["conditions"].items():
        salted = condition["victim_salt"] != condition["prober_salt"]
        for number, row in enumerate(condition["rounds"]):
            where = ("side_channel", "conditions", name, "rounds", number)
            if row["decoy_cached_tokens"]:
                refuse(source, (*where, "decoy_cached_tokens"),
                       f"is {row['decoy_cached_tokens']}: nobody sent the decoy, so nothing of it can be cached")
            if salted and row["guessed_cached_tokens"]:
                refuse(source, (*where, "guessed_cached_tokens"),
                       f"is {row['guessed_cached_tokens']}: the prober's salt differs from the victim's, so it must "
                       "find none of the victim's blocks")
            if not salted and row["guessed_cached_tokens"] == 0:
                refuse(source, (*where, "guessed_cached_tokens"),
                       "is 0: with one salt (or none) for both, the guess must find the victim's blocks")
