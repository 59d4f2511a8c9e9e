"""Resident memory while the trained model prefills prompts of ever-new lengths: the benchmark's memory section, as
a step chart of growth against prompt number and a sentence its figures choose (flat or growing beyond its noise)."""

from __future__ import annotations

from typing import Any

from kv_serving.figures.formulas import GROWS, MEMORY_FLOOR_BYTES, NOISE_JUMPS
from site_hooks.blocks import Block, Chart
from site_hooks.formatting import format_bytes, format_seconds, plural
from site_hooks.timeline_chart import timeline

MB = 1_000_000  # the chart's unit, as format_bytes writes it


def memory_view(record: dict[str, Any]) -> Block:
    section = record.get("memory")
    if section is None:
        return Block(paragraphs=["This record holds no reading of resident memory over prompts of new lengths: it was "
                                 "made before the benchmark took one, or on a system without /proc/self/status to "
                                 "read it from."])
    bound, packed, start = section["packed_rows"], section["packed_prompts"], section["window_start"]
    mb = [growth / MB for growth in section["growth_bytes"]]
    lines = [(f"prompts of at most {bound} rows (the table's kernel)", list(enumerate(mb[:packed + 1]))),
             ("prompts of more rows (a BLAS kernel), the longest first", list(enumerate(mb[packed:], start=packed)))]
    limits = [(section["grows_above_bytes"] / MB, f"growth beyond noise: above {format_bytes(section['grows_above_bytes'])}"),
              (section["peak_growth_bytes"] / MB, f"highest: {format_bytes(section['peak_growth_bytes'])}")]
    svg = timeline(lines, limits, "Resident memory against prompts of new lengths",
                   f"The benchmark process's resident memory over its lowest reading, before the first of "
                   f"{len(section['lengths'])} prompts, each of a length not prefilled before, after each prompt",
                   x_label="prompts prefilled, one at a time", y_label="MB above the lowest reading")
    return Block(paragraphs=[lead(section), verdict(section)],
                 charts=[Chart(svg, f"Each prompt prefilled alone by the trained model, as the scheduler prefills a "
                                    f"request; the window opens after prompt {start}.")],
                 notes=[f"Resident memory is the process's VmRSS, read before the first prompt and after each. "
                        f"{section['tokens']:,} prompt tokens in {format_seconds(section['seconds'])} at "
                        f"{plural(section['threads'], 'thread')}. Growth counts as growth beyond the larger of "
                        f"{NOISE_JUMPS} times the window's largest move from one prompt to the next (what the "
                        f"allocator's own heap can do at once) and {format_bytes(MEMORY_FLOOR_BYTES)}."])


def lead(section: dict[str, Any]) -> str:
    bound, packed = section["packed_rows"], section["packed_prompts"]
    moved = section["packed_growth_bytes"]
    change = (f"added {format_bytes(moved)}" if moved is not None and moved >= 0 else
              f"left it {format_bytes(-moved)} lower (a fall, which no state kept per length can cause)")
    first = (f"the first {plural(packed, 'prompt')}, of at most {bound} rows (the table's kernel), {change}; then "
             if packed else "")
    return (f"Memory is read once one prompt of {section['warmup_length']} tokens has been prefilled (its first pass "
            f"touches the pool and sets up buffers once); {first}{plural(section['settle'], 'prompt')} of more rows, "
            f"the longest first, let the allocator settle, and the window of "
            f"{plural(section['window_prompts'], 'prompt')} follows, each a length the process had not prefilled "
            f"before.")


def verdict(section: dict[str, Any]) -> str:
    """The window's growth, worded as growing only where it exceeds the record's own noise (figures' verdict)."""
    growth, per = format_bytes(section["window_growth_bytes"]), format_bytes(section["per_length_bytes"])
    low, high = (format_bytes(value) for value in section["step_middle_half_bytes"])
    noise, window = format_bytes(section["noise_bytes"]), plural(section["window_prompts"], "new length")
    if section["verdict"] == GROWS:
        return (f"Resident memory grew with the new lengths: {growth} over the window's {window}, {per} per prompt "
                f"(the middle half of the prompts moved it by {low} to {high} each), beyond the {noise} its noise "
                f"allows.")
    return (f"Resident memory stayed flat: over the window's {window} it moved by {growth} in all ({per} per prompt), "
            f"within the {noise} its noise allows.")
