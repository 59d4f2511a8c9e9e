"""What each policy keeps and costs: bytes over the text (flat against growing), the decode step, SnapKV's
grouped heads against an expanding port, and packed against padded prefill."""

from __future__ import annotations

from typing import Any

from kv_window.figures import STEP_BAND
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


def memory_view(record: dict[str, Any]) -> Block:
    rows = []
    for entry in record["policies"].values():
        rows.append([NAMES[entry["policy"]["name"]], format_bytes(entry["kept_bytes"][-1][1]),
                     "grows with the text" if entry["memory_grows"] else "flat",
                     format_percent(entry["kept_over_full"]), format_ms(entry["median_step_ns"], 1)])
    recompute = record["recompute"]
    rows.append(["window + recompute", "—", "flat, but recomputes", "—", format_ms(recompute["median_step_ns"], 1)])
    memory, config = record["memory"], record["config"]
    step = memory["full_over_window_step"]
    word = ("slower than" if step > 1 + STEP_BAND else "faster than" if step < 1 - STEP_BAND else "about as fast as")
    return Block(
        tables=[Table(["policy", f"kept after {config['positions']:,} tokens", "over the text", "of the full cache",
                       "decode step (ms)"], rows,
                      lead=f"Median of {config['repeats']} decode steps after the text, {config['threads']} thread.")],
        paragraphs=[f"At {config['positions']:,} tokens the full cache's step is {word} the ring buffer's "
                    f"({format_ratio(step)}); recomputing the window costs {format_ratio(memory['recompute_over_window_step'])} "
                    f"a ring step, since every step runs the whole window again."])


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

