"""Every cell, all five modes: the medians against the floor, how far repetitions spread, page faults per step."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import cell_table
from decode_bandwidth.grid import MODES, OURS, group_key, headline_key
from site_hooks.blocks import Block, Strong, Table
from site_hooks.formatting import format_ms, format_ratio, join
from site_hooks.prose import NOISY_SPREAD

from .common import format_count, threads_text


def comparison_view(record: dict[str, Any]) -> Block:
    cells = cell_table(record)
    sections: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    for group in record["groups"]:
        key = group_key(group)
        best, hf = cells[(*key, group["best_ours"])], cells[(*key, "hf-dynamic")]
        medians = [cells[(*key, m)]["median_ns_per_step"] for m in MODES]
        sections.setdefault((group["dtype"], group["threads"]), []).append((
            group["batch"], group["context"],
            *(Strong(format_ms(ns)) if mode == best["mode"] else format_ms(ns) for mode, ns in zip(MODES, medians)),
            format_ms(group["floor_ns_per_step"]), format_ratio(group["best_over_hf_dynamic"]),
            format_ratio(best["step_over_floor"]), format_ratio(hf["step_over_floor"])))
    headings = ["Batch", "Context", *MODES, "Memory floor", "Fastest of ours ÷ hf-dynamic", "Fastest of ours ÷ floor",
                "hf-dynamic ÷ floor"]
    headline = headline_key(record)
    tables = [Table(headings=headings, rows=rows,
                    caption=f"{dtype}, {threads_text(threads)}" + (" (the headline grid)" if (dtype, threads) == headline else ""))
              for (dtype, threads), rows in sections.items()]
    bench = record["config"]["benchmark"]
    warmup = bench["warmup"]
    legend = (f"Median milliseconds per decode step over {bench['repeats']} timed steps per mode, after {warmup} untimed "
              f"warm-up step{'' if warmup == 1 else 's'}, the {len(MODES)} modes in rotating order; the fastest of this lab's "
              f"{len(OURS)} modes is in bold. Cache: {bench['cache_contents']}. Timer: {bench['timer']}.")
    return Block(tables=tables,
                 notes=[legend, *noise_sentences(record), *faults_sentences(record)])


def noise_sentences(record: dict[str, Any]) -> list[str]:
    """How far the repetitions of a cell spread, and whether the first timed one ran slowest (too little warm-up)."""
    cells, noise = record["cells"], record["noise"]
    noisy = [c for c in cells if c["spread"] > NOISY_SPREAD]
    cell = max(cells, key=lambda c: c["spread"])
    repeats = record["config"]["benchmark"]["repeats"]
    return [
        f"{len(noisy)} of {len(cells)} cells spread more than {NOISY_SPREAD:.0%} of their median from fastest to "
        f"slowest repetition; the widest, {cell['mode']} at batch {cell['batch']}, context {cell['context']} "
        f"({cell['dtype']}, {threads_text(cell['threads'])}), ran from {format_ms(cell['min_ns_per_step'])} to "
        f"{format_ms(cell['max_ns_per_step'])} ms around a median of {format_ms(cell['median_ns_per_step'])} ms. "
        "A ratio of two medians closer to 1 than such spreads is a tie, not a ranking.",
        f"In {noise['first_slowest_cells']} of {len(cells)} cells the first timed repetition was the slowest; if the "
        f"warm-up were enough, that would happen in about 1 in {repeats}, {noise['first_slowest_expected']:.1f} cells.",
    ]


def faults_sentences(record: dict[str, Any]) -> list[str]:
    """Minor page faults per step: the first touches of freshly mapped memory, which a step that allocates pays."""
    dtype, threads = headline_key(record)
    by_mode: dict[str, list[float]] = {}
    for cell in record["cells"]:
        if (cell["dtype"], cell["threads"]) == (dtype, threads):
            by_mode.setdefault(cell["mode"], []).append(cell["minor_faults_median"])
    parts = [f"{mode} {format_count(min(values))}" + ("" if min(values) == max(values) else f"–{format_count(max(values))}")
             for mode, values in by_mode.items()]
    return [f"Minor page faults per timed step (median per cell, over the headline grid): {join(parts)}. A fault "
            "is the kernel mapping a fresh page on its first touch; a step that allocates new memory for its cache "
            "faults on every page of it, a step that writes into memory it already holds pays none."]
