"""Views of the storage record's memory sections: peak vs retained bytes, grouped-query heads, paging, sharing."""

from __future__ import annotations

from typing import Any

from site_hooks.chart import BarGroup, bar_chart
from site_hooks.formatting import format_number, format_sci, join, plural
from site_hooks.templating import lab_renderer

from .timing import equivalence_view, findings_view

render = lab_renderer(__file__)


SMALL_TRANSIENT = 0.05  # a peak within this share of the retained bytes draws as two bars of one length


def kib(value: float) -> str:
    return f"{value / 1024:,.1f} KiB"


def memory_view(record: dict[str, Any]) -> str:
    memory = record["memory"]
    variants = memory["variants"]
    rows = [{"mode": mode, **values, "transient": values["peak_bytes"] - values["retained_bytes"]}
            for mode, values in variants.items()]
    chart = bar_chart(
        [BarGroup(row["mode"], [row["retained_bytes"] / 1024, row["peak_bytes"] / 1024]) for row in rows],
        series=["retained after the loop", "peak during the loop"],
        title=f"Cache bytes retained vs peak allocation over a {memory['length']}-step decode loop, in KiB",
        x_label="KiB (1 KiB = 1,024 bytes; the table below gives exact bytes)",
        description="; ".join(f"{r['mode']}: retained {kib(r['retained_bytes'])}, peak {kib(r['peak_bytes'])}"
                              for r in rows),
    )
    return render("memory.html.j2", rows=rows, chart=chart, sentences=memory_sentences(memory),
                  small=small_transients(rows), length=memory["length"], formula=memory["formula_bytes"],
                  method=memory["method"])


def small_transients(rows: list[dict[str, Any]]) -> list[str]:
    """Layouts whose two bars look equal: 'prealloc (3,128 bytes, 2.4% of what it retains)'."""
    return [f"{row['mode']} ({row['transient']:,} bytes, {row['transient'] / row['retained_bytes']:.1%} of what it "
            f"retains)" for row in rows if row["transient"] <= SMALL_TRANSIENT * row["retained_bytes"]]


def gqa_view(record: dict[str, Any]) -> str:
    rows = record["gqa"]
    modes = list(rows[0]["layouts"])
    return render("gqa.html.j2", rows=rows, modes=modes, sentences=gqa_sentences(rows),
                  tolerance=record["tolerance"], baseline=record["config"]["benchmark"]["baseline"],
                  lengths=sorted({r["length"] for r in rows}), compared=sorted({r["positions_compared"] for r in rows}))


def gqa_sentences(rows: list[dict[str, Any]]) -> list[str]:
    """Per grouped-query variant, its cache against full multi-head attention's; then the equivalence."""
    full = next((r for r in rows if r["kv_heads"] == r["heads"]), rows[0])
    sentences = []
    for row in (r for r in rows if r is not full):
        held = {mode: values["bytes"] for mode, values in row["layouts"].items()}
        concat = held.pop("concat")
        if set(held.values()) == {concat}:
            others = f"{' and '.join(held)} storage hold exactly the same"
        elif len(set(held.values())) == 1:
            others = f"{' and '.join(held)} storage hold {format_number(next(iter(held.values())))} bytes each"
        else:
            others = "; ".join(f"{mode} storage holds {format_number(value)} bytes" for mode, value in held.items())
        sentences.append(
            f"With {plural(row['kv_heads'], 'key/value head')} for {row['heads']} query heads, the concatenated "
            f"cache of {row['length']} positions takes {format_number(concat)} bytes, "
            f"{concat / full['layouts']['concat']['bytes']:.0%} of the {full['kv_heads']}-head model's; {others}."
        )
    worst = max(((r, mode) for r in rows for mode in r["layouts"]),
                key=lambda pair: pair[0]["layouts"][pair[1]]["max_abs_diff"])
    row, mode = worst
    agree = all(v["argmax_agrees_every_step"] for r in rows for v in r["layouts"].values())
    sentences.append(
        f"Every layout of every variant matched full recompute at each of its {positions(rows)} positions; "
        f"the largest absolute difference was {format_sci(row['layouts'][mode]['max_abs_diff'])} "
        f"({mode}, {plural(row['kv_heads'], 'key/value head')}). "
        + ("The greedy (argmax) token was the same at every position." if agree else
           "The greedy (argmax) token differed somewhere: a near-tie that rounding tipped, within tolerance.")
    )
    return sentences


def positions(rows: list[dict[str, Any]]) -> str:
    counts = sorted({r["positions_compared"] for r in rows})
    return " or ".join(map(str, counts))


def paging_view(record: dict[str, Any]) -> str:
    paging = record["paging"]
    return render("paging.html.j2", paging=paging, sentences=paging_sentences(paging))


def sharing_view(record: dict[str, Any]) -> str:
    sharing = record["sharing"]
    return render("sharing.html.j2", s=sharing, sentence=sharing_sentence(sharing))


def memory_sentences(memory: dict[str, Any]) -> list[str]:
    """What the allocation profile shows, layout by layout, and how the layouts' peaks and totals compare."""
    variants = memory["variants"]
    sentences = []
    for mode, values in variants.items():
        ratio = values["peak_bytes"] / values["retained_bytes"]
        sentences.append(
            f"{mode}: ends holding {values['retained_bytes']:,} bytes of cache; the peak during the loop was "
            f"{values['peak_bytes']:,} bytes (peak ÷ retained: {ratio:.2f}×), and the loop allocated "
            f"{values['allocated_bytes']:,} bytes in total over {values['allocations']:,} allocations."
        )
    if {"concat", "prealloc"} <= variants.keys():
        concat, prealloc = variants["concat"], variants["prealloc"]
        verdict = "higher" if concat["peak_bytes"] > prealloc["peak_bytes"] else "not higher"
        sentences.append(
            f"Concatenation's peak was {verdict} than preallocation's ({concat['peak_bytes']:,} vs "
            f"{prealloc['peak_bytes']:,} bytes; concat peak ÷ prealloc peak: "
            f"{concat['peak_bytes'] / prealloc['peak_bytes']:.2f}×), and it allocated "
            f"{concat['allocated_bytes'] / prealloc['allocated_bytes']:.1f}× as many bytes over the loop."
        )
    if "paged" in variants and len(variants) > 1:
        sentences.append(paged_memory_sentence(variants))
    return sentences


def paged_memory_sentence(variants: dict[str, dict[str, Any]]) -> str:
    """Where paged storage stands among the layouts by peak and by bytes allocated, with a verdict."""
    paged = variants["paged"]
    others = {mode: values for mode, values in variants.items() if mode != "paged"}

    def against(field: str) -> str:
        parts = []
        for mode, values in others.items():
            difference = paged[field] - values[field]
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


def paging_sentences(paging: dict[str, Any]) -> list[str]:
    rows = paging["rows"]
    first, last = rows[0], rows[-1]
    return [
        f"{paging['requests']} requests with lengths drawn uniformly from {paging['length_range'][0]} to "
        f"{paging['length_range'][1]} positions use {paging['used_slots']:,} slots in all.",
        f"With blocks of {first['block_size']}, {first['wasted_slots']:,} slots ({first['waste_share']:.1%}) are "
        f"allocated but unused and the block tables hold {first['table_entries']:,} entries; with blocks of "
        f"{last['block_size']}, {last['wasted_slots']:,} slots ({last['waste_share']:.1%}) are wasted and the "
        f"tables hold {last['table_entries']:,} entries.",
    ]


def sharing_sentence(sharing: dict[str, Any]) -> str:
    saved = sharing["saved_bytes"]
    without = sharing["without"]["bytes"]
    copies = (
        f"The prompt's last block was partly filled, so {sharing['with']['copied_blocks']} of the requests "
        f"copied it before their first write."
        if sharing["prompt"] % sharing["block_size"] else
        "The prompt filled its last block exactly, so no block had to be copied."
    )
    return (
        f"{sharing['requests']} requests that share a {sharing['prompt']}-token prompt and then decode "
        f"{sharing['tokens']} tokens each took {sharing['without']['blocks']} blocks of {sharing['block_size']} "
        f"positions when each kept its own copy, and {sharing['with']['blocks']} when they shared the prompt's "
        f"blocks: {saved:,} bytes ({saved / without:.0%}) saved. {copies}"
    )


VIEWS = {"memory": memory_view, "gqa": gqa_view, "paging": paging_view, "sharing": sharing_view,
         # the shared findings and equivalence views, with ties, per-step gaps and repeated maxima (timing.py)
         "findings": findings_view, "equivalence": equivalence_view}
