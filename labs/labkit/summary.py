"""Summaries of a timing record's raw repetitions, with pandas: the one place medians are computed.

A timing record lists, for each prefix length, the run order of every
repetition and each mode's durations in that order, and nothing computed from
them. ``sweep_figures`` derives its statistics, speedups, gaps and regimes each
time the record is read (``with_figures``, and the build's
labkit.figures.check_record): the views read the figures derived there, and a
benchmark's summary lines read them the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .figures import Derive, Figure, Figures, check, fill, stored_value
from .regimes import regime

STATISTICS = ("min_ns", "median_ns", "max_ns")
SPEEDUPS = ("ratio_of_medians", "median_of_paired_ratios")


def repetitions_frame(lengths: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per timed loop: length, repetition, mode, slot (0 = ran first), duration_ns."""
    rows = [
        {
            "length": entry["length"],
            "repetition": repetition,
            "mode": mode,
            "slot": order.index(mode),
            "first": order[0],
            "duration_ns": entry["modes"][mode]["durations_ns"][repetition],
        }
        for entry in lengths
        for repetition, order in enumerate(entry["order"])
        for mode in order
    ]
    return pd.DataFrame(rows, columns=["length", "repetition", "mode", "slot", "first", "duration_ns"])


def statistics_frame(lengths: list[dict[str, Any]]) -> pd.DataFrame:
    """min, median and max duration per (length, mode), indexed by (length, mode)."""
    grouped = repetitions_frame(lengths).groupby(["length", "mode"], sort=True)["duration_ns"]
    frame = grouped.agg(min_ns="min", median_ns="median", max_ns="max", repeats="count")
    return frame


def speedup_frame(lengths: list[dict[str, Any]], baseline: str) -> pd.DataFrame:
    """baseline / mode, as a ratio of medians and as the median of per-repetition ratios."""
    raw = repetitions_frame(lengths).pivot_table(
        index=["length", "repetition"], columns="mode", values="duration_ns"
    )
    stats = statistics_frame(lengths)["median_ns"].unstack("mode")
    rows = []
    for mode in (m for m in raw.columns if m != baseline):
        paired = (raw[baseline] / raw[mode]).groupby(level="length").median()
        ratio = stats[baseline] / stats[mode]
        rows.append(pd.DataFrame({
            "mode": mode,
            "ratio_of_medians": ratio,
            "median_of_paired_ratios": paired,
        }))
    return pd.concat(rows).reset_index().set_index(["length", "mode"]).sort_index()


def as_number(value: float) -> int | float:
    """JSON-friendly: integral values as int, so medians of odd repeat counts stay exact nanoseconds."""
    return int(value) if float(value).is_integer() else float(value)


def sweep_figures(record: dict[str, Any]) -> Figures:
    """Every figure of a timing sweep that follows from its raw durations: per length and mode its min, median
    and max, the same per decode step and the spread; per non-baseline mode both speedup estimates over the
    baseline and the gap between the medians; per mode its regime (labkit.regimes) from the per-step medians;
    and, when the record compares precisions, how much smaller float64 made the difference."""
    lengths, baseline = record["lengths"], record["config"]["benchmark"]["baseline"]
    stats, speedups = statistics_frame(lengths), speedup_frame(lengths, baseline)
    figures = Figures()
    per_step: dict[str, dict[int, float]] = {}
    for index, entry in enumerate(lengths):
        length, steps = entry["length"], entry["steps"]
        for mode in entry["modes"]:
            row = stats.loc[(length, mode)]
            at = ("lengths", index, "modes", mode)
            for name in STATISTICS:
                figures.add((*at, name), as_number(row[name]), "its raw durations")
            figures.add_each((*at, "per_step"), {name: float(row[name]) / steps for name in STATISTICS},
                        f"its statistics over the run's decode steps ($.lengths[{index}].steps = {steps})")
            figures.add((*at, "spread"), float((row["max_ns"] - row["min_ns"]) / row["median_ns"]),
                        "(max - min) / median of its raw durations")
            per_step.setdefault(mode, {})[length] = float(row["median_ns"]) / steps
        for mode, row in speedups.loc[length].iterrows():
            for name in SPEEDUPS:
                figures.add(("lengths", index, "speedup", mode, name), float(row[name]), "the raw durations")
            gap = float(stats.loc[(length, baseline), "median_ns"] - stats.loc[(length, mode), "median_ns"])
            figures.add(("lengths", index, "speedup", mode, "median_gap_ns"), gap,
                        f"the {baseline} median minus the {mode} median")
            figures.add(("lengths", index, "speedup", mode, "median_gap_per_step_ns"), gap / steps,
                        f"the {baseline} median minus the {mode} median over the run's decode steps "
                        f"($.lengths[{index}].steps = {steps})")
    for mode, medians in per_step.items():
        figures.add_each(("regimes", mode), regime(medians).as_record(), "its per-step medians (labkit.regimes)")
    if "precision" in record:
        figures.add(("precision", "float64_shrink"), float64_shrink(record["precision"]),
                    "the float32 difference over the float64 one (none when float64's is 0)")
    return figures


def float64_shrink(precision: dict[str, Any]) -> float | None:
    """How many times smaller float64 made the largest difference than float32; None when float64's is 0."""
    single, double = (precision[name]["max_abs_diff"] for name in ("float32", "float64"))
    return single / double if double else None


def median(values: Sequence[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count): ``percentile(values, 0.5)``."""
    return percentile(values, 0.5)


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` quantile (0.5 is the median) by linear interpolation between closest ranks, as numpy
    computes it: the one definition wherever a percentile is taken, by a load generator summing up its run or by
    a figure derived from a record's raw values."""
    if not values:
        raise ValueError("a percentile of no values")
    if not 0 <= share <= 1:
        raise ValueError(f"a percentile's share is between 0 and 1, not {share}")
    return float(np.quantile(np.asarray(values, dtype=float), share))


MIDDLE_HALF = (0.25, 0.75)  # the quartiles a noise-aware verdict reads: one outlier among the repetitions moves neither
MIN_PARTED = 3  # repetitions a cell needs before its min–max range says anything about its noise


def parted(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two cells' repetitions never overlap: every one of one is faster than every one of the other. Only
    then may a page call one step faster or slower than the other; a cell of fewer than MIN_PARTED repetitions
    shows no spread, so it never parts. The labs' "faster" and "apart" verdicts on timed cells read this one rule."""
    if min(len(a), len(b)) < MIN_PARTED:
        return False
    return max(a) < min(b) or max(b) < min(a)


def middle_half(values: Sequence[float]) -> tuple[float, float]:
    """The lower and upper quartiles of ``values`` (percentile's definition): the span a verdict must hold across."""
    low, high = MIDDLE_HALF
    return percentile(values, low), percentile(values, high)


def halves_below(a: Sequence[float], b: Sequence[float]) -> bool | None:
    """True where ``a``'s middle half lies wholly below ``b``'s, False where wholly above, None where they overlap:
    the rule for comparing two runs of one measurement each (their requests' times to first token, say), where the
    requests' own spread is the noise a difference must clear."""
    low, high = middle_half(a), middle_half(b)
    if low[1] < high[0]:
        return True
    if high[1] < low[0]:
        return False
    return None


def derived_figures(record: dict[str, Any], derive: Derive | None) -> list[Figure]:
    """Every figure that follows from a record's raw data, in with_figures' order: a sweep's statistics, then the
    lab's own ``derive`` over the record with them."""
    return [*(sweep_figures(record) if "lengths" in record else []),
            *(derive(with_figures(record, None)) if derive is not None else [])]


def raw_only(record: dict[str, Any], derive: Derive | None, source: str = "new record") -> dict[str, Any]:
    """A copy of a record without any figure that follows from its raw data (the ones with_figures fills in): what
    a benchmark writes. A figure the benchmark did compute must first equal its derivation (a count the code
    measured that its formula contradicts is refused here, before anything is written); an object left empty by
    the removal goes too."""
    figures = derived_figures(record, derive)
    check(record, figures, source)
    raw = copy.deepcopy(record)
    for figure in figures:
        parents: list[tuple[Any, Any]] = []
        node: Any = raw
        for key in figure.path[:-1]:
            stored, child = stored_value(node, (key,))
            if not stored:
                break
            parents.append((node, key))
            node = child
        else:
            if isinstance(node, dict) and figure.path[-1] in node:
                del node[figure.path[-1]]
                while parents and node == {}:  # an object that held only derived figures
                    parent, key = parents.pop()
                    if not isinstance(parent, dict):
                        break
                    del parent[key]
                    node = parent
    return raw


def with_figures(record: dict[str, Any], derive: Derive | None) -> dict[str, Any]:
    """A copy of a record (which stores what was measured) with every figure that follows from it filled in, as
    the build and the views read it: a sweep's statistics (sweep_figures), then the lab's own ``derive``."""
    derived = copy.deepcopy(record)
    if "lengths" in derived:
        fill(derived, sweep_figures(derived))
    if derive is not None:
        fill(derived, derive(derived))
    return derived


# ---- paired rounds: every comparison a page draws is a ratio of two things timed in the same round ----
# A machine's speed drifts through a run (a shared host's memory, its neighbours, its clock): absolute times moved by
# a fifth to a half between runs on the machines this site is measured on, while the ratio of two things timed
# seconds apart in one round barely moved. So a comparison is the median of per-round ratios, and its noise is
# their middle half (Kalibera and Jones, "Rigorous Benchmarking in Reasonable Time", 2013; asv's interleaved rounds).


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round r's ``numerators[r] / denominators[r]``: both lists hold one value per round, in round order."""
    if len(numerators) != len(denominators):
        raise ValueError(f"paired ratios need one value per round on both sides, got {len(numerators)} and "
                         f"{len(denominators)}")
    if not numerators:
        raise ValueError("paired ratios of no rounds")
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def paired(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, float | int]:
    """The median of the per-round ratios, with their lower and upper quartiles and the rounds they come from: the
    figure a page quotes for 'A against B' and the range its wording must clear."""
    ratios = paired_ratios(numerators, denominators)
    low, high = middle_half(ratios)
    return {"median": median(ratios), "low": low, "high": high, "rounds": len(ratios)}


def side_of_one(ratio: dict[str, float | int]) -> str:
    """'below' where a paired ratio's middle half lies wholly under 1 (the numerator took less time in most rounds),
    'above' where wholly over, 'within' where it holds 1 or has fewer than MIN_PARTED rounds: only the first two
    let a page say faster or slower."""
    if ratio["rounds"] < MIN_PARTED:
        return "within"
    if ratio["high"] < 1:
        return "below"
    if ratio["low"] > 1:
        return "above"
    return "within"
