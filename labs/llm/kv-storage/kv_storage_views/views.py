"""Views of the storage record's memory sections: peak vs retained bytes, grouped-query heads, paging, sharing."""

from __future__ import annotations

from typing import Any

from site_hooks.chart import BarGroup, bar_chart
from site_hooks.orchestrate import Evidence
from site_hooks.templating import format_number, lab_renderer

render = lab_renderer(__file__)


def kib(value: float) -> str:
    return f"{value / 1024:,.1f} KiB"


def memory_view(evidence: Evidence) -> str:
    memory = evidence.record["memory"]
    variants = memory["variants"]
    rows = [{"mode": mode, **values, "transient": values["peak_bytes"] - values["retained_bytes"]}
            for mode, values in variants.items()]
    chart = bar_chart(
        [BarGroup(row["mode"], [row["retained_bytes"] / 1024, row["peak_bytes"] / 1024]) for row in rows],
        series=["retained after the loop", "peak during the loop"],
        title=f"Cache bytes retained vs peak allocation over a {memory['length']}-step decode loop",
        x_label="KiB",
        description="; ".join(f"{r['mode']}: retained {kib(r['retained_bytes'])}, peak {kib(r['peak_bytes'])}"
                              for r in rows),
    )
    return render("memory.html.j2", rows=rows, chart=chart, sentences=memory_sentences(memory),
                  length=memory["length"], formula=memory["formula_bytes"], method=memory["method"])


def gqa_view(evidence: Evidence) -> str:
    rows = evidence.record["gqa"]
    full = next((r for r in rows if r["kv_heads"] == r["heads"]), rows[0])
    sentences = [
        f"At {r['length']} positions, {r['kv_heads']} key/value heads for {r['heads']} query heads keep "
        f"{format_number(r['concat_bytes'])} bytes of concatenated cache, "
        f"{r['concat_bytes'] / full['concat_bytes']:.0%} of full multi-head; preallocated and paged storage "
        f"hold {format_number(r['prealloc_bytes'])} and {format_number(r['paged_bytes'])} bytes."
        for r in rows if r is not full
    ]
    return render("gqa.html.j2", rows=rows, sentences=sentences, tolerance=evidence.record["tolerance"])


def paging_view(evidence: Evidence) -> str:
    paging = evidence.record["paging"]
    return render("paging.html.j2", paging=paging, sentences=paging_sentences(paging))


def sharing_view(evidence: Evidence) -> str:
    sharing = evidence.record["sharing"]
    return render("sharing.html.j2", s=sharing, sentence=sharing_sentence(sharing))


def memory_sentences(memory: dict[str, Any]) -> list[str]:
    """What the allocation profile shows, layout by layout, in terms of the cache it ends with."""
    variants = memory["variants"]
    sentences = []
    for mode, values in variants.items():
        ratio = values["peak_bytes"] / values["retained_bytes"]
        sentences.append(
            f"{mode}: ends holding {values['retained_bytes']:,} bytes of cache; the peak during the loop was "
            f"{values['peak_bytes']:,} bytes ({ratio:.2f}× that), and the loop allocated "
            f"{values['allocated_bytes']:,} bytes in total over {values['allocations']:,} allocations."
        )
    if {"concat", "prealloc"} <= variants.keys():
        concat, prealloc = variants["concat"], variants["prealloc"]
        verdict = "higher" if concat["peak_bytes"] > prealloc["peak_bytes"] else "not higher"
        sentences.append(
            f"Concatenation's peak was {verdict} than preallocation's ({concat['peak_bytes']:,} vs "
            f"{prealloc['peak_bytes']:,} bytes), and it allocated "
            f"{concat['allocated_bytes'] / prealloc['allocated_bytes']:.1f}× as many bytes over the loop."
        )
    return sentences


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


VIEWS = {"memory": memory_view, "gqa": gqa_view, "paging": paging_view, "sharing": sharing_view}
