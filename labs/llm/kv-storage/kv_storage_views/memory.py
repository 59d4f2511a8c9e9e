"""The page's "Memory: what persists, and what passes through": peak against retained bytes per layout."""

from __future__ import annotations

from typing import Any

from kv_storage.figures import SMALL_TRANSIENT
from site_hooks.blocks import Block, Chart, Table
from site_hooks.chart import BarGroup, bar_chart
from site_hooks.formatting import format_number, join


def kib(value: float) -> str:
    return f"{value / 1024:,.1f} KiB"


def memory_view(record: dict[str, Any]) -> Block:
    memory = record["memory"]
    variants = memory["variants"]
    svg = bar_chart(
        [BarGroup(mode, [values["retained_bytes"] / 1024, values["peak_bytes"] / 1024])
         for mode, values in variants.items()],
        series=["retained after the loop", "peak during the loop"],
        title=f"Cache bytes retained vs peak allocation over a {memory['length']}-step decode loop, in KiB",
        x_label="KiB (1 KiB = 1,024 bytes; the table below gives exact bytes)",
        description="; ".join(f"{mode}: retained {kib(values['retained_bytes'])}, peak {kib(values['peak_bytes'])}"
                              for mode, values in variants.items()),
    )
    small = small_transients(variants)
    caption = ("Retained: cache bytes still held after the last step. Peak: the most bytes allocated at once "
               "during the loop, cache included."
               + (f" Peak and retained differ too little to tell the bars apart for {'; '.join(small)}." if small else ""))
    table = Table(
        headings=["Layout", "Retained after the loop", "Peak during the loop", "Peak ÷ retained", "Peak − retained",
                  "Allocated in total", "Allocations"],
        rows=[(mode, format_number(values["retained_bytes"]), format_number(values["peak_bytes"]),
               f"{values['peak_ratio']:.2f}×",
               format_number(values["transient_bytes"]), format_number(values["allocated_bytes"]),
               format_number(values["allocations"])) for mode, values in variants.items()],
    )
    method = (f"Bytes over a {memory['length']}-step decode loop from an empty cache; the formula gives "
              f"{format_number(memory['formula_bytes'])} for the final cache.")
    return Block(charts=[Chart(svg, caption)], tables=[table],
                 notes=[method, *comparison_sentences(memory)])


def comparison_sentences(memory: dict[str, Any]) -> list[str]:
    """How the layouts' peaks and totals compare (each layout's own figures are the table's rows)."""
    return memory_sentences(memory)[len(memory["variants"]):]


def small_transients(variants: dict[str, dict[str, Any]]) -> list[str]:
    """Layouts whose two bars look equal: 'prealloc (3,128 bytes, 2.4% of what it retains)'."""
    return [f"{mode} ({values['transient_bytes']:,} bytes, {values['transient_share']:.1%} of what it retains)"
            for mode, values in variants.items() if values["transient_share"] <= SMALL_TRANSIENT]


def memory_sentences(memory: dict[str, Any]) -> list[str]:
    """What the allocation profile shows, layout by layout, and how the layouts' peaks and totals compare."""
    variants = memory["variants"]
    sentences = []
    for mode, values in variants.items():
        sentences.append(
            f"{mode}: ends holding {values['retained_bytes']:,} bytes of cache; the peak during the loop was "
            f"{values['peak_bytes']:,} bytes (peak ÷ retained: {values['peak_ratio']:.2f}×), and the loop allocated "
            f"{values['allocated_bytes']:,} bytes in total over {values['allocations']:,} allocations."
        )
    if {"concat", "prealloc"} <= variants.keys():
        concat, prealloc = variants["concat"], variants["prealloc"]
        verdict = "higher" if concat["peak_bytes"] > prealloc["peak_bytes"] else "not higher"
        sentences.append(
            f"Concatenation's peak was {verdict} than preallocation's ({concat['peak_bytes']:,} vs "
            f"{prealloc['peak_bytes']:,} bytes; concat peak ÷ prealloc peak: "
            f"{memory['concat_vs_prealloc']['peak']:.2f}×), and it allocated "
            f"{memory['concat_vs_prealloc']['allocated']:.1f}× as many bytes over the loop."
        )
    if "paged" in variants and len(variants) > 1:
        sentences.append(paged_memory_sentence(memory))
    return sentences


def paged_memory_sentence(memory: dict[str, Any]) -> str:
    """Where paged storage stands among the layouts by peak and by bytes allocated, with a verdict."""
    variants = memory["variants"]
    paged = variants["paged"]
    others = {mode: values for mode, values in variants.items() if mode != "paged"}

    def against(field: str) -> str:
        parts = []
        for mode in others:
            difference = memory["paged_minus"][mode][field]
            parts.append(f"equal to {mode}'s" if difference == 0 else
                         f"{abs(difference):,} bytes {'above' if difference > 0 else 'below'} {mode}'s")
        return join(parts)

    def rank(field: str) -> str:
        if all(paged[field] > values[field] for values in others.values()):
            return "the highest of all layouts"
        if all(paged[field] < values[field] for values in others.values()):
            return "the lowest of all layouts"
        return "neither the highest nor the lowest"

    lower = [mode for mode, values in others.items() if values["peak_bytes"] < paged["peak_bytes"]]
    verdict = (f"Paging as implemented here, per-step gather included, did not give the lowest peak: "
               f"{join(lower)} peaked lower." if lower else
               "Paging as implemented here gave the lowest peak of all layouts.")
    return (f"Paged storage's peak was {paged['peak_bytes']:,} bytes, {rank('peak_bytes')} "
            f"({against('peak_bytes')}), and its loop allocated {paged['allocated_bytes']:,} bytes in total, "
            f"{rank('allocated_bytes')}. {verdict}")
