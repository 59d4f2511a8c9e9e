"""The page's "Measuring a decode step": its findings and equivalence views, the shared sentences made to fit
this lab's sweep.

The shared prose ranks modes by median alone and states gaps per timed window. Here the medians of
several modes often sit within each other's spread, and the chart beside them is per decode step, so these
sentences treat overlapping measurements as ties, state every gap per step, and say which figures rest on
a measurement flagged as noisy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from kv_storage.figures import TIE_SHARE
from site_hooks import prose
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ratio, format_sci, join


@dataclass(frozen=True)
class Step:
    """One mode at one prefix length, in µs per decode step: the median and the min–max range, and the derived
    spread, (max − min) / median of the raw repetitions (labkit.summary), the same per step or per window."""

    median: float
    low: float
    high: float
    spread: float


def per_step(record: dict[str, Any]) -> dict[int, dict[str, Step]]:
    """Per prefix length and mode, the statistics per decode step derived from its repetitions (labkit.summary), in µs, and
    their spread."""
    return {entry["length"]: {mode: Step(*(values["per_step"][name] / 1e3 for name in ("median_ns", "min_ns", "max_ns")),
                                         values["spread"])
                              for mode, values in entry["modes"].items()}
            for entry in record["lengths"]}


def speedups(record: dict[str, Any], mode: str, name: str) -> dict[int, float]:
    """One speedup figure of ``mode`` per length, derived from the record: 'ratio_of_medians' (baseline ÷ mode) or
    'median_gap_per_step_ns' (baseline − mode)."""
    return {entry["length"]: entry["speedup"][mode][name] for entry in record["lengths"]}


def format_us(value: float) -> str:
    """A duration in µs: one decimal below 1,000, whole µs with separators above."""
    return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def tied(a: Step, b: Step) -> bool:
    """The record cannot order these two: their ranges overlap, or their medians are within TIE_SHARE."""
    overlap = a.low <= b.high and b.low <= a.high
    return overlap or max(a.median, b.median) <= (1 + TIE_SHARE) * min(a.median, b.median)


def ranked(steps: dict[str, Step], modes: list[str]) -> str:
    """'concat = prealloc < full < paged': fastest first, each mode tied with the one before it joined by '='.

    Within a tie the record's mode order is kept, so the same measured order always reads the same."""
    order = sorted(modes, key=lambda mode: steps[mode].median)
    groups = [[order[0]]]
    for mode in order[1:]:
        if tied(steps[groups[-1][-1]], steps[mode]):
            groups[-1].append(mode)
        else:
            groups.append([mode])
    return " < ".join(" = ".join(sorted(group, key=modes.index)) for group in groups)


def ranking_sentence(record: dict[str, Any]) -> str:
    """Every mode, the baseline included, in order at every measured length; a repeated order is not spelled out."""
    modes = record["config"]["benchmark"]["modes"]
    runs: list[tuple[str, list[int]]] = []  # (order, the consecutive lengths that had it)
    for length, steps in per_step(record).items():
        order = ranked(steps, modes)
        if runs and runs[-1][0] == order:
            runs[-1][1].append(length)
        else:
            runs.append((order, [length]))
    clauses = "; ".join(f"{order} at {lengths[0]} tokens"
                        + (f"; the same at {join(list(map(str, lengths[1:])))} tokens" if lengths[1:] else "")
                        for order, lengths in runs)
    return (f"Ordered by median time, fastest first, with “=” between neighbours this record cannot tell "
            f"apart (their min–max ranges overlap, or their medians differ by less than {TIE_SHARE:.0%}): {clauses}.")


def noise_note(record: dict[str, Any], length: int, modes: list[str]) -> str:
    """' (flagged as noisy: prealloc, spread 41%)' when one of ``modes`` is flagged at ``length``, else ''."""
    flags = prose.noise_flags(record)[length]
    flagged = [f"{mode}, {' and '.join(flags[mode])}" for mode in modes if mode in flags]
    return f" (flagged as noisy: {'; '.join(flagged)})" if flagged else ""


def gap_sentences(record: dict[str, Any], mode: str) -> list[str]:
    """How full / mode moved over the sweep, and the gap per decode step at both ends."""
    baseline = record["config"]["benchmark"]["baseline"]
    ratio, gaps = speedups(record, mode, "ratio_of_medians"), speedups(record, mode, "median_gap_per_step_ns")
    lengths = list(ratio)
    if len(lengths) < 2:
        return [prose.ONE_LENGTH]
    first, last = lengths[0], lengths[-1]
    trend = prose.trend_text(ratio)

    def at(length: int) -> str:
        return (f"{format_ratio(ratio[length])} at {length} tokens"
                f"{noise_note(record, length, [baseline, mode])}")

    def gap(length: int, against: str) -> str:
        difference = gaps[length] / 1e3
        if difference == 0:
            return f"exactly as long{against.replace(' than ', ' as ')} at {length} tokens"
        return f"{format_us(abs(difference))} µs {'more' if difference > 0 else 'less'}{against} at {length} tokens"

    return [
        f"The ratio of medians ({baseline} / {mode}) {trend}: {at(first)}, {at(last)}.",
        f"Per decode step, as in the chart, the median {baseline} step took {gap(first, f' than the {mode} step')}"
        f", and {gap(last, '')}.",
    ]


def untold(fit: dict[str, Any], first: int, last: int) -> str:
    """Why the derived paged-overhead verdict is 'unclear' (kv_storage.figures.paged_overhead), in words."""
    if not fit["apart_at_first"]:
        return f"at {first} tokens the paged and preallocated steps' min–max ranges overlap"
    return f"the gap's min–max range at {last} tokens does not clear its range at {first}"


def paged_overhead_sentences(record: dict[str, Any]) -> list[str]:
    """Split paged's extra time over prealloc into a part fixed per step and a part that grows with the prefix,
    by the least-squares line derived from the record (kv_storage.figures.paged_overhead)."""
    fit = record["paged_overhead"]
    if fit is None:
        return []
    table = per_step(record)
    lengths, gaps = list(table), [gap / 1e3 for gap in fit["gap_per_step_ns"]]
    first, last = lengths[0], lengths[-1]
    if gaps[0] <= 0:
        return [f"At {first} tokens the median paged step was not slower than the preallocated one "
                f"({format_us(table[first]['paged'].median)} against {format_us(table[first]['prealloc'].median)} µs)."]
    verdict = (
        f"so most of the gap at {first} tokens is a cost each step pays whatever the prefix length, "
        f"not the copying of cached positions"
        + ("" if fit["mostly_fixed_at_longest"] or fit["fixed_share_at_longest"] is None else
           f"; at {last} tokens that intercept is {fit['fixed_share_at_longest']:.0%} of the gap, not most of it")
        if fit["verdict"] == "fixed" else
        f"so most of the gap at {first} tokens grows with the prefix, as the gather's copying does"
        if fit["verdict"] == "grows" else
        f"but {untold(fit, first, last)}, so this run cannot tell whether most of it is fixed or grows"
    )
    return [f"The median paged step took {format_us(gaps[0])} µs more than the preallocated one at {first} "
            f"tokens and {format_us(gaps[-1])} µs more at {last} tokens. A least-squares line through that gap "
            f"at {'both' if len(lengths) == 2 else f'all {len(lengths)}'} lengths has an intercept of "
            f"{format_us(fit['intercept_ns'] / 1e3)} µs (its value at zero prefix length) and rises by "
            f"{fit['slope_ns_per_position']:,.0f} ns per cached position, {verdict}."]


def findings_sentences(record: dict[str, Any]) -> list[str]:
    bench = record["config"]["benchmark"]
    baseline = bench["baseline"]
    medians = stored_medians(record)
    paragraphs = [prose.environment_sentence(record), prose.protocol_sentence(record)]
    if len(record["lengths"]) < 2:  # no trend to tabulate: the sentences say so
        for mode in (m for m in bench["modes"] if m != baseline):
            paragraphs.append(" ".join([prose.lower_median_sentence(medians, mode, baseline),
                                        *gap_sentences(record, mode)]))
    paragraphs.append(ranking_sentence(record))
    paragraphs.extend(paged_overhead_sentences(record))
    return paragraphs


def stored_medians(record: dict[str, Any]) -> pd.DataFrame:
    """The median window per length (rows) and mode (columns), derived from the record, as the shared sentences read them."""
    return pd.DataFrame([{mode: values["median_ns"] for mode, values in entry["modes"].items()}
                         for entry in record["lengths"]], index=[entry["length"] for entry in record["lengths"]])


def findings_table(record: dict[str, Any]) -> Table:
    """Per cached mode, the baseline's ratio and its gap per decode step at both ends, and the ratio's trend."""
    baseline = record["config"]["benchmark"]["baseline"]
    lengths = [entry["length"] for entry in record["lengths"]]
    first, last = lengths[0], lengths[-1]
    rows = []
    for mode in (m for m in record["config"]["benchmark"]["modes"] if m != baseline):
        ratio, gaps = speedups(record, mode, "ratio_of_medians"), speedups(record, mode, "median_gap_per_step_ns")
        rows.append((mode, f"{format_ratio(ratio[first])}{noise_note(record, first, [baseline, mode])}",
                     f"{format_ratio(ratio[last])}{noise_note(record, last, [baseline, mode])}",
                     prose.trend_text(ratio), format_us(gaps[first] / 1e3), format_us(gaps[last] / 1e3)))
    return Table(headings=["Layout", f"{baseline} ÷ layout at {first} tokens", f"at {last} tokens",
                           "The ratio over the sweep", f"{baseline} − layout, µs per step, at {first}",
                           f"at {last}"], rows=rows)


def findings_view(record: dict[str, Any]) -> Block:
    tables = [findings_table(record)] if len(record["lengths"]) >= 2 else []
    return Block(css="lab-findings", paragraphs=findings_sentences(record), tables=tables)


def equivalence_rows(record: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Per cached mode: the largest difference over every length, every length it occurred at, the greedy token."""
    bench = record["config"]["benchmark"]
    rows = []
    for mode in (m for m in bench["modes"] if m != bench["baseline"]):
        diffs = [(entry["length"], entry["equivalence"][mode]["max_abs_diff"]) for entry in record["lengths"]]
        worst = max(diff for _, diff in diffs)
        at = [str(length) for length, diff in diffs if diff == worst]
        where = (f"at {at[0]} tokens" if len(at) == 1 else
                 "at every measured length" if len(at) == len(diffs) else
                 f"first at {at[0]} tokens, again at {join(at[1:])} tokens")
        agree = all(entry["equivalence"][mode]["argmax_agrees_every_step"] for entry in record["lengths"])
        rows.append((mode, format_sci(worst), where, "yes" if agree else "no: a near-tie tipped by rounding"))
    return rows


def equivalence_sentence(record: dict[str, Any]) -> str:
    tolerance, bench = record["tolerance"], record["config"]["benchmark"]
    agree = all(entry["equivalence"][m]["within_tolerance"] for entry in record["lengths"]
                for m in bench["modes"] if m != bench["baseline"])
    return (f"Before any timing, every cached layout's logits {'matched' if agree else 'did not all match'} the "
            f"{bench['baseline']} logits at every compared step of every measured length within "
            f"atol = {tolerance['atol']:g} and rtol = {tolerance['rtol']:g}.")


def equivalence_view(record: dict[str, Any]) -> Block:
    """The sentences, then per length (named on its first row) and cached mode, the pre-timing comparison."""
    bench, tolerance = record["config"]["benchmark"], record["tolerance"]
    compared = [m for m in bench["modes"] if m != bench["baseline"]]
    rows = [(entry["length"] if index == 0 else "", mode, f"{entry['steps']} × {bench['batch']}",
             format_sci(entry["equivalence"][mode]["max_abs_diff"]),
             "yes" if entry["equivalence"][mode]["within_tolerance"] else "no",
             "yes" if entry["equivalence"][mode]["argmax_agrees_every_step"] else "no")
            for entry in record["lengths"] for index, mode in enumerate(compared)]
    table = Table(headings=["Prefix (tokens)", f"Compared with {bench['baseline']}", "Steps × batch",
                            "Max |difference|", f"Within atol = {tolerance['atol']}, rtol = {tolerance['rtol']}",
                            "Same greedy token at every step"], rows=rows)
    summary = Table(headings=["Layout", "Largest |difference|", "Where", "Same greedy token at every step"],
                    rows=equivalence_rows(record))
    return Block(css="lab-equivalence", paragraphs=[equivalence_sentence(record)], tables=[summary, table])
