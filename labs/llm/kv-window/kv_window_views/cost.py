"""What each policy keeps and costs: bytes over the text (flat against growing), the decode step, SnapKV's
grouped heads against an expanding port, and packed against padded prefill."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Chart, Table
from site_hooks.chart import Series, line_chart
from site_hooks.formatting import format_bytes, format_ms, format_percent, format_ratio, format_sci

from .common import NAMES, policy


def memory_chart_view(record: dict[str, Any]) -> Block:
    edges = set(record["config"]["buckets"])
    series = []
    for entry in record["policies"].values():
        points = [(tokens, stored) for tokens, stored in entry["kept_bytes"] if tokens in edges]
        series.append(Series(NAMES[entry["policy"]["name"]], [t for t, _ in points], [b / 1e6 for _, b in points],
                             [b / 1e6 for _, b in points], [b / 1e6 for _, b in points]))
    svg = line_chart(series, "Bytes each cache keeps as the text grows", "tokens seen (log scale)",
                     "MB kept, every layer (log scale)",
                     "Keys, values and slot metadata each policy's cache holds between steps, counted from its "
                     "tensors, against the tokens seen so far.")
    return Block(charts=[Chart(svg, f"{record['model']['name']}'s {record['model']['layers']} layers; every count "
                                    f"equals its policy's formula (kv_window.figures.kept_bytes).")])


def steps(entry: dict[str, Any]) -> str:
    """'101.7–125.7 ms': a policy's fastest and slowest timed steps."""
    found = entry["step_range_ns"]
    if found["low"] == found["high"]:
        return f"{format_ms(found['low'], 1)} ms"
    return f"{format_ms(found['low'], 1)}–{format_ms(found['high'], 1)} ms"


def step_order(record: dict[str, Any]) -> str:
    """The full cache's step against the ring buffer's, ordered only where their timed steps do not overlap."""
    memory, config = record["memory"], record["config"]
    full, window = policy(record, "full"), policy(record, "window")
    order = memory["full_vs_window_step"]
    if order == "level":
        return (f"At {config['positions']:,} tokens the full cache's timed steps ({steps(full)}) and the ring "
                f"buffer's ({steps(window)}) do not separate: the run cannot tell which is faster")
    word = "slower than" if order == "above" else "faster than"
    return (f"At {config['positions']:,} tokens the full cache's step is {word} the ring buffer's "
            f"({format_ratio(memory['full_over_window_step'])}), at every timed step")


def same_bytes(record: dict[str, Any]) -> str:
    """The caches that keep the same bytes: their steps ordered only where they do not overlap, and, where they
    differ, said plainly that the bytes do not decide it and the run does not say what does."""
    same = record["memory"]["same_bytes_steps"]
    if len(same["policies"]) < 2:
        return ""
    slow, fast = record["policies"][same["slowest"]], record["policies"][same["fastest"]]
    slow_name, fast_name = NAMES[slow["policy"]["name"]], NAMES[fast["policy"]["name"]]
    held = f" in {same['slots']:,} slots each" if same["slots"] is not None else ""
    kept = (f" {fast_name[0].upper()}{fast_name[1:]} and {slow_name} keep the same "
            f"{format_bytes(fast['kept_bytes'][-1][1])}{held}")
    if same["verdict"] == "above":
        return (f"{kept}, yet {slow_name} is slower at every timed step ({steps(slow)} against {steps(fast)}): "
                f"the bytes do not decide a step here, and the run, timing whole steps only, does not say what does.")
    return (f"{kept}, and their timed steps do not separate ({steps(slow)} against {steps(fast)}): the run cannot "
            f"order them.")


def memory_view(record: dict[str, Any]) -> Block:
    rows = []
    for entry in record["policies"].values():
        rows.append([NAMES[entry["policy"]["name"]], format_bytes(entry["kept_bytes"][-1][1]),
                     "grows with the text" if entry["memory_grows"] else "flat",
                     format_percent(entry["kept_over_full"]), format_ms(entry["median_step_ns"], 1)])
    recompute = record["recompute"]
    rows.append(["window + recompute", "—", "flat, but recomputes", "—", format_ms(recompute["median_step_ns"], 1)])
    memory, config = record["memory"], record["config"]
    return Block(
        tables=[Table(["policy", f"kept after {config['positions']:,} tokens", "over the text", "of the full cache",
                       "decode step (ms)"], rows,
                      lead=f"Median of {config['repeats']} decode steps after the text, {config['threads']} thread.")],
        paragraphs=[f"{step_order(record)}; recomputing the window costs "
                    f"{format_ratio(memory['recompute_over_window_step'])} a ring step, since every step runs the "
                    f"whole window again." + same_bytes(record)])


def grouped_view(record: dict[str, Any]) -> Block:
    snap, model, memory = policy(record, "snapkv"), record["model"], record["memory"]
    return Block(paragraphs=[
        f"The SnapKV cache holds {model['kv_heads']} key/value heads per layer, {format_bytes(snap['kept_bytes'][-1][1])} "
        f"in all; a port that expands them to the {model['heads']} query heads before caching keeps "
        f"{format_bytes(memory['snapkv_expanded_bytes'])} for the same choice of slots, "
        f"{format_ratio(memory['snapkv_expanded_over_kept'])} as much."])


def packing_view(record: dict[str, Any]) -> Block:
    packing = record["packing"]
    tokens, medians = packing["tokens"], packing["median_ns"]
    rows = [["packed, one row", f"{tokens['packed']:,}", format_ms(medians["packed"], 1),
             format_sci(packing["max_abs_diff"]["packed"])],
            ["padded to the longest", f"{tokens['padded']:,}", format_ms(medians["padded"], 1),
             format_sci(packing["max_abs_diff"]["padded"])],
            ["one pass per prompt", f"{tokens['alone']:,}", format_ms(medians["alone"], 1), "the reference"]]
    lengths = ", ".join(map(str, packing["lengths"]))
    return Block(
        tables=[Table(["prefill", "positions computed", "median (ms)", "max |logit difference|"], rows,
                      lead=f"{len(packing['lengths'])} prompts of {lengths} tokens from the text, "
                           f"{record['model']['name']}, median of {record['config']['pack_repeats']} runs each.")],
        paragraphs=[f"Padding makes {format_percent(packing['padded_waste'])} of the computed positions padding; the "
                    f"padded batch takes {format_ratio(packing['padded_over_packed'])} the packed row's time, and one "
                    f"pass per prompt {format_ratio(packing['alone_over_packed'])}. Every prompt's logits agree with "
                    f"its own pass in both layouts, within the record's tolerance."])

