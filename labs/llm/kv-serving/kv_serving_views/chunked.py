"""Chunked prefill against whole, on the trained model: the streams' longest gap between tokens and the long
prompt's own first token, at a server that prefills every prompt whole and at one that cuts prompts into chunks.
The wording follows where each paired ratio's middle half lies against 1 (labkit.summary.side_of_one)."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ratio, plural

NONE = "This record holds no run of chunked prefill: it was made before the benchmark measured one."
GAP = {
    "below": "the running streams' longest pause between tokens fell to {ratio} of the whole prefill's",
    "within": "the running streams' longest pause between tokens did not shrink beyond the rounds' noise: {ratio} of "
              "the whole prefill's",
    "above": "the running streams' longest pause between tokens grew to {ratio} of the whole prefill's",
}
# the long prompt's own first token, worded by its side of 1 and by whether the streams gained (their gap's side)
TTFT = {
    ("below", "above"): "while the long prompt's own first token took {ratio} its time prefilled whole: the trade "
                        "chunking makes",
    ("below", "within"): "and the long prompt's own first token came no later beyond the rounds' noise: {ratio} its "
                         "time prefilled whole",
    ("below", "below"): "and the long prompt's own first token came sooner as well, {ratio} its time prefilled whole",
    ("other", "above"): "and the long prompt's own first token took {ratio} its time prefilled whole: on this run "
                        "chunking bought nothing",
    ("other", "within"): "and the long prompt's own first token took {ratio} its time prefilled whole, within the "
                         "rounds' noise",
    ("other", "below"): "while the long prompt's own first token came sooner, {ratio} its time prefilled whole",
}


def ratio_text(paired: dict[str, Any]) -> str:
    """'0.31× (middle half 0.29–0.33)': the median of per-round ratios and their middle half."""
    return f"{format_ratio(paired['median'])} (middle half {paired['low']:.2f}–{paired['high']:.2f})"


def verdict(section: dict[str, Any]) -> str:
    """One sentence: what chunks did to the streams' longest gap and to the long prompt's first token, each worded
    by its rounds; none where the streams did not decode across the long prompt's prefill in every round."""
    lead = (f"Over {plural(len(section['rounds']), 'paired round')}, with the {section['long_prompt_tokens']:,}-token "
            f"prompt prefilled in chunks of {section['chunk']} tokens, each in one pass with the streams' decode rows")
    if not section["all_spanned"]:
        return (f"{lead}, the streams did not decode across the whole of its prefill in every round (a stream ended "
                "first, or started after it), so their gaps do not show what the prefill held them up: the table "
                "keeps what this run measured, and draws no comparison.")
    gap = GAP[section["gap_side"]].format(ratio=ratio_text(section["gap_paired"]))
    gained = "below" if section["gap_side"] == "below" else "other"
    ttft = TTFT[gained, section["ttft_side"]].format(ratio=ratio_text(section["ttft_paired"]))
    return f"{lead}, {gap}, {ttft}."


def chunked_verdict_view(record: dict[str, Any]) -> Block:
    """The page's words on chunked prefill outside its fold: the verdict, and the whole prefill's stall."""
    section = record["trained"].get("chunked_prefill")
    if section is None:
        return Block(paragraphs=[NONE])
    stall = (f" Prefilled whole, the long prompt held the streams for {format_ratio(section['whole_stall_over_gap'])} "
             "their median gap between tokens." if section["all_spanned"] else "")
    return Block(paragraphs=[f"{verdict(section)}{stall}"])


def chunked_view(record: dict[str, Any]) -> Block:
    """The method and this run's medians, in the fold."""
    section = record["trained"].get("chunked_prefill")
    if section is None:
        return Block(paragraphs=[NONE])
    labels = {"whole": "whole prompts", "chunked": f"chunks of {section['chunk']} tokens"}
    medians = section["medians"]
    table = Table(["Prefill", "Streams' longest gap (s)", "Streams' median gap (s)", "Long prompt's first token (s)"],
                  [(labels[name], f"{medians['longest_gap_s'][name]:.2f}", f"{medians['median_gap_s'][name]:.3f}",
                    f"{medians['long_ttft_s'][name]:.2f}") for name in ("whole", "chunked")],
                  caption=f"This run's medians over its rounds: {section['streams']} streams of up to "
                          f"{section['stream_tokens']} tokens, the long prompt sent {section['long_after_s']:g} s "
                          "after the last stream's first token, as a client timed each")
    method = (f"Each round, {section['streams']} text continuations from the prompt file start together at a server "
              f"that prefills every prompt whole and at one started with --prefill-chunk {section['chunk']}, in turns; "
              f"{section['long_after_s']:g} s after the last of them has its first token, a completion of the first {section['long_tokens']:,} tokens of "
              f"{section['text']} arrives (the server counted {section['long_prompt_tokens']:,}), asking "
              f"{plural(section['long_max_tokens'], 'token')}. The client times every gap between a stream's tokens "
              "and the long prompt's first token; a stream's longest gap is the longest that overlaps the long "
              "prompt's wait for its first token; each ratio is taken inside one "
              "round. A chunk computes its positions over the keys the chunks before it stored, as a prefix-cache hit "
              "does, so the long prompt's logits are a whole prefill's (the suite checks it on both models).")
    return Block(paragraphs=[method], tables=[table])
