"""Views of a record's memory sections: peak vs retained bytes, grouped-query heads, paging, sharing."""

from __future__ import annotations

from typing import Any

from . import prose
from .chart import BarGroup, bar_chart
from .errors import SiteBuildError
from .orchestrate import Evidence
from .templating import format_number, render


def section(evidence: Evidence, name: str) -> Any:
    """A record section a view needs; its absence is a clear error, not a KeyError."""
    if name not in evidence.record:
        raise SiteBuildError(f"{evidence.lab.record}: has no field {name!r}, which this view renders")
    return evidence.record[name]


def kib(value: float) -> str:
    return f"{value / 1024:,.1f} KiB"


def memory_view(evidence: Evidence) -> str:
    memory = section(evidence, "memory")
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
    return render("memory.html.j2", rows=rows, chart=chart, sentences=prose.memory_sentences(memory),
                  length=memory["length"], formula=memory["formula_bytes"], method=memory["method"])


def gqa_view(evidence: Evidence) -> str:
    rows = section(evidence, "gqa")
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
    paging = section(evidence, "paging")
    return render("paging.html.j2", paging=paging, sentences=prose.paging_sentences(paging))


def sharing_view(evidence: Evidence) -> str:
    sharing = section(evidence, "sharing")
    return render("sharing.html.j2", s=sharing, sentence=prose.sharing_sentence(sharing))
