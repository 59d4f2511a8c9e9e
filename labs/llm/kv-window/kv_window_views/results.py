"""The key results and the answers to the page's questions, worded from the checked record."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, answer
from site_hooks.formatting import format_bytes, format_percent, format_ratio, format_sci

from .common import VERDICT, band, coarse_note, level_verdict, policy, ranged, ratio, span, spread, yardstick


def key_results_view(record: dict[str, Any]) -> Block:
    config, memory = record["config"], record["memory"]
    full, window, sinks = policy(record, "full"), policy(record, "window"), policy(record, "sinks")
    recompute, comparisons = record["recompute"], record["comparisons"]
    drift, packing = record["drift"], record["packing"]
    recovered = comparisons["recovered_share"]
    bounded = [entry for entry in record["policies"].values() if entry["policy"]["name"] != "full"]
    flat = not any(entry["memory_grows"] for entry in bounded)
    items = [
        f"With a {config['slots']}-token window, perplexity over {span(record)} is "
        f"{window['after_eviction']['perplexity']['estimate']:.2f}, "
        f"{level_verdict(window['against_full'], window['full_resolution'])} "
        f"the full cache's {full['after_eviction']['perplexity']['estimate']:.2f} "
        f"({ratio(window['against_full']['perplexity_ratio'])}"
        f"{coarse_note(window['full_resolution'], window['against_full'])}).",
        f"Keeping the first {config['sinks']} tokens as sinks gives "
        f"{sinks['after_eviction']['perplexity']['estimate']:.2f}"
        + (f", {format_percent(recovered)} of the way back to the full cache" if recovered is not None and recovered > 0
           else ", no closer to the full cache")
        + f"; at the {recompute['at_samples']['positions']} sampled positions {sinks_against_recompute(record)}.",
        (f"Every bounded cache keeps {format_bytes(window['kept_bytes'][-1][1])} however long the text runs"
         if flat else f"The bounded caches keep up to {format_bytes(window['kept_bytes'][-1][1])}")
        + f"; the full cache grows to {format_bytes(full['kept_bytes'][-1][1])} at {config['positions']:,} tokens "
          f"({format_ratio(memory['full_over_window'])}), and recomputation pays "
          f"{format_ratio(memory['recompute_over_window_step'])} a ring step instead.",
        f"Keys kept rotated and turned back one position per shift drift in bfloat16: after "
        f"{drift['most_shifts']} shifts, the most this cache turns a key, the model's own keys are "
        f"{format_percent(drift['trained']['at_most_shifts']['bfloat16'])} off their exact rotation, against "
        f"{format_sci(drift['trained']['at_most_shifts']['float32'])} in float32.",
        f"Packing {len(packing['lengths'])} prompts into one row computes {packing['tokens']['packed']:,} positions "
        f"where padding computes {packing['tokens']['padded']:,}; the padded batch takes "
        f"{format_ratio(packing['padded_over_packed'])} the packed row's time, for the same logits.",
    ]
    return Block(css="lab-key-results", items=items)


def sinks_against_recompute(record: dict[str, Any]) -> str:
    """Sinks + window against recomputing each window from scratch, at the samples: higher or lower where the
    paired interval says so, within it where the interval resolves the finest gap between policies, too coarse
    to tell (by how much) where it does not."""
    sinks = policy(record, "sinks")
    against, found = sinks["against_recompute"], sinks["recompute_resolution"]
    if against["verdict"] != "level":
        return (f"it is {VERDICT[against['verdict']]} recomputing each window from scratch "
                f"({ratio(against['perplexity_ratio'])})")
    if found["resolves"]:
        # a ratio at the samples only: the full cache's gap, over every position, is another comparison
        return f"it is within {spread(against['perplexity_ratio'])} of recomputing each window from scratch"
    wide = (f", {found['width_over_band']:.1f} times as wide as the {band(record)} it would need to resolve "
            f"{yardstick(record)}" if found["width_over_band"] is not None else "")
    return (f"its comparison with recomputing each window from scratch is too coarse to tell: the interval is "
            f"{spread(against['perplexity_ratio'])}{wide}")


def answer_ring_view(record: dict[str, Any]) -> Block:
    slots, example = record["config"]["slots"], record["comparisons"]["ring_example"]
    return answer(
        f"Because the mask never looks at a slot's index. With {slots} slots, position {example['position']:,} is "
        f"written to slot {example['slot']}, and the slots around it hold positions up to {slots - 1} steps older; "
        f"each slot stores its position, and the query at {example['position']:,} sees exactly the slots whose "
        f"positions lie in {example['sees_from']:,}–{example['position']:,}. A mask built from the tensor's length "
        f"would assume slot i holds position i.")


def answer_sinks_view(record: dict[str, Any]) -> Block:
    config, comparisons = record["config"], record["comparisons"]
    window, sinks = policy(record, "window"), policy(record, "sinks")
    recovered = comparisons["recovered_share"]
    return answer(
        f"A trained model puts much of every softmax on the first tokens, whatever they say. Once the window "
        f"evicts them that weight lands on other keys, and perplexity over {span(record)} reads "
        f"{ranged(window['after_eviction']['perplexity'])}. Keeping just {config['sinks']} of them gives back the "
        f"place the weight was meant to go: {ranged(sinks['after_eviction']['perplexity'])}"
        + (f", {format_percent(recovered)} of the excess recovered." if recovered is not None and recovered > 0
           else ", which in this record recovers none of the excess."))


def answer_early_view(record: dict[str, Any]) -> Block:
    config = record["config"]
    window = policy(record, "window")
    first = window["buckets"][0]
    return answer(
        f"Until position {config['slots'] - 1} a {config['slots']}-slot window holds every token so far, so it "
        f"attends exactly as the full cache does: over positions 0–{config['slots'] - 1} its perplexity is "
        f"{ranged(first['perplexity'])}, the full cache's too, and the build refuses a record where any bounded "
        f"cache's KL from the full cache exceeds a rounding error there.")
