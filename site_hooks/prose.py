"""Sentences whose every figure and verdict is computed from a record, so they cannot contradict it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from labkit.summary import STATISTICS

from .formatting import format_ms, format_ratio, format_sci, join, plural, power_of_ten

NOISY_SPREAD = 0.25  # (max - min) / median above this flags a measurement as noisy
MIN_REPEATS = 5  # fewer timed repetitions than this flags every row
FLOAT64_SHRINK = 1e3  # float64 error this many times smaller than float32 reads as rounding


def stored_statistics(record: dict[str, Any]) -> pd.DataFrame:
    """The min/median/max and spread per (length, mode) and the repetitions: derived from the record's raw
    durations by the build (labkit.summary.sweep_figures) before any view reads them."""
    rows = [{"length": entry["length"], "mode": mode, **{name: values[name] for name in STATISTICS},
             "spread": values["spread"], "repeats": len(values["durations_ns"])}
            for entry in record["lengths"] for mode, values in entry["modes"].items()]
    return pd.DataFrame(rows).set_index(["length", "mode"]).sort_index()


def stored_speedups(record: dict[str, Any], mode: str, name: str) -> pd.Series:
    """One speedup figure of ``mode`` per length, derived from the record: 'ratio_of_medians' (baseline / mode), 'median_gap_ns'."""
    return pd.Series({entry["length"]: entry["speedup"][mode][name] for entry in record["lengths"]})


def environment_sentence(record: dict[str, Any]) -> str:
    env = record["environment"]
    threads = env["torch"]["threads"]
    return (
        f"The timings were recorded with {env['python']['implementation']} {env['python']['version']} "
        f"and PyTorch {env['torch']['version']}, with {plural(threads, 'Torch thread')} in force, "
        f"on {env['cpu']['model']} ({env['cpu']['logical_cores'] or 'unknown'} logical cores), "
        f"on {record['created_utc'].replace('T', ' at ').replace('Z', ' UTC')}."
    )


def protocol_sentence(record: dict[str, Any]) -> str:
    """How each timing was taken, from the record's config: warmup, repetitions, order."""
    bench = record["config"]["benchmark"]
    warmup, repeats, modes = bench["warmup"], bench["repeats"], bench["modes"]
    return (f"At each length, every mode first ran {plural(warmup, 'untimed warm-up run')}, then "
            f"{plural(repeats, 'timed repetition')}; the {len(modes)} modes took turns in a rotating order, "
            f"so none always ran first. The medians below are over those {repeats} repetitions.")


def faster_sentences(record: dict[str, Any]) -> list[str]:
    """Per mode, a paragraph: where it had the lower median than the baseline, and how the gap moved."""
    bench = record["config"]["benchmark"]
    baseline = bench["baseline"]
    medians = stored_statistics(record)["median_ns"].unstack("mode")
    sentences = []
    others = [m for m in bench["modes"] if m != baseline]
    for mode in others:  # one paragraph per mode
        gap = gap_sentences(stored_speedups(record, mode, "ratio_of_medians"),
                            stored_speedups(record, mode, "median_gap_ns"), mode, baseline)
        sentences.append(" ".join([lower_median_sentence(medians, mode, baseline), *gap]))
    if len(others) > 1:
        sentences.append(ranking_sentence(medians[others]))
    return sentences


def ranking_sentence(medians: pd.DataFrame) -> str:
    """Order of the non-baseline modes at the shortest and the longest prefix."""
    def ranked(length: int) -> str:
        return " < ".join(medians.loc[length].sort_values().index)

    first, last = medians.index[0], medians.index[-1]
    return (f"Ordered by median time, fastest first: {ranked(first)} at {first} tokens; "
            f"{ranked(last)} at {last} tokens.")


def lower_median_sentence(medians: pd.DataFrame, mode: str, baseline: str) -> str:
    lengths = list(medians.index)
    wins = [str(n) for n in lengths if medians.at[n, mode] < medians.at[n, baseline]]
    losses = [str(n) for n in lengths if medians.at[n, mode] > medians.at[n, baseline]]
    span = f"{lengths[0]} to {lengths[-1]} tokens" if len(lengths) > 1 else f"{lengths[0]} tokens"
    if len(wins) == len(lengths):
        return f"The {mode} path had the lower median time at every measured prefix length ({span})."
    if len(losses) == len(lengths):
        return f"The {baseline} path had the lower median time at every measured prefix length ({span})."
    parts = []
    if wins:
        parts.append(f"the {mode} path had the lower median at {join(wins)} tokens")
    if losses:
        parts.append(f"the {baseline} path at {join(losses)} tokens")
    ties = [n for n in lengths if medians.at[n, mode] == medians.at[n, baseline]]
    if ties:
        parts.append(f"the medians were equal at {plural(len(ties), 'length')}")
    text = "; ".join(parts)
    return f"{text[:1].upper()}{text[1:]}."


ONE_LENGTH = "With one measured length, the record cannot show how the gap changes with prefix length."


def trend_text(ratio: dict[int, float]) -> str:
    """How a ratio moved over the sweep's lengths (ascending): 'grew at every length of the sweep', ..."""
    lengths = list(ratio)
    falls = [f"{a} and {b}" for a, b in zip(lengths, lengths[1:]) if ratio[b] <= ratio[a]]
    if not falls:
        return "grew at every length of the sweep"
    if ratio[lengths[-1]] > ratio[lengths[0]]:
        return f"rose overall but not at every length (it did not grow between {join(falls)} tokens)"
    return "did not grow with prefix length"


def gap_sentences(ratio: pd.Series, gap: pd.Series, mode: str, baseline: str) -> list[str]:
    """How the ratio of medians moved over the sweep, and the derived gap between the medians (baseline - mode)
    at both ends when the baseline was the slower at both."""
    lengths = list(ratio.index)
    if len(lengths) < 2:
        return [ONE_LENGTH]
    first, last = lengths[0], lengths[-1]
    trend = trend_text(ratio.to_dict())
    sentences = [f"The ratio of medians ({baseline} / {mode}) {trend}: {format_ratio(ratio[first])} at "
                 f"{first} tokens, {format_ratio(ratio[last])} at {last} tokens."]
    if gap[first] >= 0 and gap[last] >= 0:
        sentences.append(f"In absolute terms the median {baseline} run took {format_ms(gap[first])} ms more than "
                         f"the {mode} run at {first} tokens and {format_ms(gap[last])} ms more at {last} tokens.")
    return sentences


def noise_flags(record: dict[str, Any]) -> dict[int, dict[str, list[str]]]:
    """Per length and mode, the reasons its timings deserve suspicion (no entry: none)."""
    stats = stored_statistics(record)
    flags: dict[int, dict[str, list[str]]] = {entry["length"]: {} for entry in record["lengths"]}
    for (length, mode), row in stats.iterrows():
        reasons = []
        if row["spread"] > NOISY_SPREAD:
            reasons.append(f"spread {row['spread']:.0%}")
        if row["repeats"] < MIN_REPEATS:
            reasons.append(f"only {plural(int(row['repeats']), 'repetition')}")
        if reasons:
            flags[int(length)][mode] = reasons
    return flags


def noise_sentence(record: dict[str, Any]) -> str:
    flags = noise_flags(record)
    flagged = [f"{mode} at {length}" for length, modes in flags.items() for mode in modes]
    repeats = sorted({len(entry["order"]) for entry in record["lengths"]})
    rule = (f"min–max spread above {NOISY_SPREAD:.0%} of the median, "
            f"or fewer than {MIN_REPEATS} repetitions")
    if not flagged:
        return (f"No measurement is flagged as noisy ({rule}): every mode stayed within that spread "
                f"over {join(list(map(str, repeats)))} repetitions.")
    return (f"{len(flagged)} of {len(stored_statistics(record))} measurements flagged as noisy ({rule}): {join(flagged)} tokens. "
            f"Read those medians with care, or rerun make bench on a quieter machine.")


def equivalence_sentences(record: dict[str, Any]) -> list[str]:
    tolerance = record["tolerance"]
    bench = record["config"]["benchmark"]
    sentences = []
    for mode in (m for m in bench["modes"] if m != bench["baseline"]):
        worst = max(record["lengths"], key=lambda e: e["equivalence"][mode]["max_abs_diff"])
        agree = all(e["equivalence"][mode]["argmax_agrees_every_step"] for e in record["lengths"])
        sentences.append(
            f"Before any timing, the {mode} logits matched the {bench['baseline']} logits at every compared step "
            f"of every measured length within atol = {tolerance['atol']:g} and rtol = {tolerance['rtol']:g}; "
            f"the largest absolute difference was {format_sci(worst['equivalence'][mode]['max_abs_diff'])}, "
            f"at {worst['length']} tokens. "
            + ("The greedy (argmax) token was the same at every step." if agree else
               "The greedy (argmax) token differed at some step: a near-tie that rounding tipped, "
               "although the logits stayed within tolerance.")
        )
    if "precision" in record:
        sentences.append(precision_sentence(record["precision"]))
    return sentences


def precision_sentence(precision: dict[str, Any]) -> str:
    """Rounding or logic: the stored float64_shrink (float32's difference over float64's; none when float64's
    is 0) against FLOAT64_SHRINK."""
    single = precision["float32"]["max_abs_diff"]
    double = precision["float64"]["max_abs_diff"]
    shrink = precision["float64_shrink"]
    head = (f"Run again at {precision['length']} tokens, the largest difference was {format_sci(single)} in float32 "
            f"and {format_sci(double)} in float64")
    if single == 0:
        return f"{head}: the two paths agreed exactly in float32, so there was no rounding difference to shrink."
    if shrink is None or shrink >= FLOAT64_SHRINK:
        factor = "float64 removed it entirely" if shrink is None else f"about {power_of_ten(shrink)} times smaller"
        return (f"{head}, {factor}: the float32 differences shrink with precision as rounding error does, "
                f"instead of persisting as a logic error would.")
    return (f"{head}: float64 did not shrink the difference by {FLOAT64_SHRINK:.0e} or more, "
            f"which points at a difference in the computation, not rounding.")
