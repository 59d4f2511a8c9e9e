"""Where the time goes: the per-operation profile beside the bytes each kind must read, its totals against
the timed steps, and the page faults of the profiled steps."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import cell_table
from decode_bandwidth.traffic import MATRICES
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_number, format_ratio

from .common import format_count, gbs, threads_text

MANY_FAULTS = 1000  # extra faults per step worth naming: megabytes freshly mapped, milliseconds of kernel work


def profile_view(record: dict[str, Any]) -> Block:
    profile = record["profile"]
    ours, theirs = profile["modes"]["ours-prealloc"], profile["modes"]["hf-dynamic"]
    matrices = [r for r in ours["rows"] if r["kind"] in MATRICES]
    worst = max(matrices, key=lambda r: r["ratio_to_floor"])
    best = min(matrices, key=lambda r: r["ratio_to_floor"])
    excess = max(ours["rows"], key=lambda r: r["above_floor_ns"])
    sentences = [
        f"Of the weight matrices, {worst['kind']} is farthest from its own floor ({format_ratio(worst['ratio_to_floor'])}) "
        f"and {best['kind']} closest ({format_ratio(best['ratio_to_floor'])}); the most time above a floor is spent in "
        f"{excess['kind']} ({format_ms(excess['above_floor_ns'])} ms per step).",
        *(text.strip() for text in (streaming_sentence(record["layout"], worst["kind"]), per_call_sentence(record, worst))
          if text),
    ]
    cells = cell_table(record)
    key = (profile["dtype"], profile["threads"], profile["batch"], profile["context"])
    for mode, entry in (("ours-prealloc", ours), ("hf-dynamic", theirs)):
        if (*key, mode) in cells:
            sentences.append(total_sentence(mode, entry, cells[(*key, mode)]["median_ns_per_step"]))
    sentences.extend(profile_faults_sentences(record))
    table = Table(headings=["Kind of operation", "Bytes it must read", "Its floor (ms)", "ours-prealloc (ms)", "÷ floor",
                            "hf-dynamic (ms)", "÷ floor"],
                  rows=[(a["kind"], format_number(a["bytes"]), format_ms(a["floor_ns"]), format_ms(a["ns_per_step"]),
                         format_ratio(a["ratio_to_floor"]), format_ms(b["ns_per_step"]), format_ratio(b["ratio_to_floor"]))
                        for a, b in zip(ours["rows"], theirs["rows"])])
    legend = (f"torch.profiler self time per step (per kind, the median of {ours['steps']} separately profiled steps), "
              f"batch {profile['batch']}, context {profile['context']}, {profile['dtype']}, "
              f"{threads_text(profile['threads'])}. Matrix multiplies are told apart by their weight's shape; "
              "\"attention\" is the fused attention kernel over the cache; \"other\" is everything else (norms, GELU, "
              "residual adds, embedding lookups, views), whose own bytes are tiny, so its ratio mostly measures "
              "per-operation overhead.")
    return Block(tables=[table], notes=[legend, *sentences])


def total_sentence(mode: str, entry: dict[str, Any], timed: float) -> str:
    """One profiled step's operator time against the same cell's timed median."""
    total, more = entry["total_ns_per_step"], entry["total_minus_timed_ns"]
    if total > timed:
        return (f"Profiled, one {mode} step's operator self times add up to {format_ms(total)} ms, "
                f"{format_ms(more)} ms ({format_ratio(entry['total_over_timed'])}) more than its timed median of "
                f"{format_ms(timed)} ms: the profiled steps ran slower than the timed ones, so the rows are shares "
                f"of a profiled step, not timings of an unprofiled one.")
    return (f"Profiled, one {mode} step's operator self times add up to {format_ms(total)} ms, "
            f"{format_ms(-more)} ms less than its timed median of {format_ms(timed)} ms: the time "
            f"between operators (Python, dispatch) is in the timed step but in no row.")


def per_call_sentence(record: dict[str, Any], worst: dict[str, Any]) -> str:
    """How long one multiply of the farthest kind takes: the shorter a call, the more a fixed cost per call weighs."""
    layout = {row["kind"]: row for row in record["layout"]["rows"]}
    calls = layout[worst["kind"]]["matrices"]
    shortest = min(layout, key=lambda kind: layout[kind]["bytes_per_matrix"])
    if shortest != worst["kind"]:
        return ""
    return (f" One multiply by {worst['kind']} took {worst['ns_per_call'] / 1e3:.0f} µs in the profiled step ({calls} per "
            "step), the shortest call of the five kinds, so any fixed cost per call (dispatch, and the profiler's own "
            "bookkeeping per operator) is the largest share of it.")


def profile_faults_sentences(record: dict[str, Any]) -> list[str]:
    """Page faults in the profiled steps against the timed steps of the same cell."""
    profile = record["profile"]
    cells = cell_table(record)
    sentences = []
    for mode, entry in profile["modes"].items():
        key = (profile["dtype"], profile["threads"], profile["batch"], profile["context"], mode)
        if key not in cells:
            continue
        profiled, timed = entry["minor_faults_median"], cells[key]["minor_faults_median"]
        copies = next(row for row in entry["rows"] if row["kind"] == "cache writes and copies")
        sentence = (f"Profiled, the {mode} step took {format_count(profiled)} minor page faults (median of "
                    f"{len(entry['minor_faults'])}), against {format_count(timed)} in its timed steps")
        if profiled >= timed + MANY_FAULTS and profiled > 2 * timed:
            sentence += (": under the profiler the memory its copies wrote was freshly mapped, and the kernel's "
                         f"work of mapping it lands in the \"cache writes and copies\" row "
                         f"({format_ms(copies['ns_per_step'])} ms), which the timed steps did not pay to that extent")
        sentences.append(sentence + ".")
    return sentences


def streaming_sentence(layout: dict[str, Any], kind: str) -> str:
    """What the separate layout measurement says about one matrix kind, without claiming a cause it cannot show."""
    rates = {row["kind"]: row["bytes_per_s"][row["stored"]] for row in layout["rows"]}
    sizes = {row["kind"]: row["bytes_per_matrix"] for row in layout["rows"]}
    others = [rate for other, rate in rates.items() if other != kind]
    if rates[kind] >= min(others):
        return ""
    smallest = sizes[kind] == min(sizes.values())
    return (f" In the separate layout measurement {kind} also streamed slowest of the five, {gbs(rates[kind])} per "
            f"matrix in its stored layout against {gbs(min(others)).removesuffix(' GB/s')}–{gbs(max(others))} for "
            f"the others" + (f", and it is the smallest matrix ({sizes[kind]:,} bytes)" if smallest else "")
            + "; the record does not separate a fixed cost per multiply from the streaming itself, so it shows "
              "this without establishing why.")
