"""The record's constants, formulas, derived figures and invariants. Torch-free: the site build imports it.

Every figure a page shows follows from the record's raw data here, once: per policy and position bucket the
perplexity (the exponential of the mean NLL), the mean KL divergence from the full cache and the top-1
agreement, each with a seeded bootstrap interval (labkit.bootstrap; moving blocks of BOOTSTRAP_BLOCK
positions, since neighbouring positions of one text are not independent); the paired differences between
policies on the same positions, and whether each comparison against recomputation is fine enough to tell the
policies apart; the bytes each policy keeps (its formula, which the measured bytes must equal); step times,
and whether the spread of each policy's timed steps lets two of them be ordered; the re-rotation drift;
packed against padded prefill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from labkit.bootstrap import Interval, Statistic, interval, mean
from labkit.figures import Figures, refuse, tolerance_bound
from labkit.records import JsonPath
from labkit.summary import median
from llm_models.kv_bytes import BYTES_PER_ELEMENT, kv_cache_bytes

from .config import Policy
from .rules import most_shifts, ring_slot

WALL_TIME_LIMIT_S = 300.0  # the whole benchmark, weights loaded, on the two-core machines the site targets
RECOMPUTE_BATCH = 8  # windows per forward call of window with recomputation
RANDOM_PROBE = {"keys": 256, "head_dim": 128, "theta": 1e6}  # a long-context model's head: 128 features, base 1e6
PACKING_TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}  # float32 logits of one prompt in another batch layout
REFERENCE = "full"
MAIN = ("window", "sinks", "snapkv")  # the policies evaluated over the whole text beside the reference
BOOTSTRAP_BLOCK = 16  # positions per resampled run: about the span over which a text's NLLs correlate
UNTIL_EVICTION_KL = 1e-6  # before its first eviction a bounded cache attends exactly as the full cache does
SAME_RULE_NLL = 1e-3  # float32: re-rotated and read-rotated keys give the same NLL up to rounding
META_BYTES = 4 + 4 + 1  # per slot and key/value head: an int32 position, an int32 sequence id, a bool flag


# --- the evaluation's layout -------------------------------------------------------------------------------

def bucket_edges(slots: int, positions: int) -> list[int]:
    """Position buckets that double in length: [0, slots) before any eviction, then [slots, 2 slots),
    [2 slots, 4 slots), ... up to ``positions``."""
    if not 1 <= slots < positions:
        raise ValueError(f"buckets need 1 <= slots < positions, got {slots} and {positions}")
    edges = [0, slots]
    while edges[-1] * 2 < positions:
        edges.append(edges[-1] * 2)
    return edges + [positions]


def sample_positions(edges: Sequence[int], count: int) -> list[int]:
    """``count`` positions spread evenly over the buckets after the first eviction (the first ones get the
    remainder), evenly spaced inside each: where window with recomputation is scored."""
    buckets = list(zip(edges[1:-1], edges[2:]))
    if count < len(buckets):
        raise ValueError(f"{count} samples cannot cover the {len(buckets)} buckets after the first eviction")
    positions = []
    for index, (start, end) in enumerate(buckets):
        share = count // len(buckets) + (index < count % len(buckets))
        positions += [start + (end - start) * (2 * i + 1) // (2 * share) for i in range(share)]
    return positions


def drift_shifts(slots: int, sinks: int) -> list[int]:
    """The shift counts the drift probes report: powers of four up to four windows' worth, and the most this
    cache ever turns a key."""
    powers = {4**k for k in range(16) if 4**k <= 4 * slots}
    return sorted(powers | {most_shifts(sinks, slots)})


def policy_of(entry: dict[str, Any]) -> Policy:
    """The policy a record's entry describes, checked by Policy itself."""
    fields = {key: value for key, value in entry["policy"].items() if key != "label"}
    return Policy(**fields)


def policy_label(policies: dict[str, Any], name: str) -> str:
    """The label of the record's policy of this name ('window' -> 'window-256')."""
    found = [label for label, entry in policies.items() if entry["policy"]["name"] == name]
    if len(found) != 1:
        raise ValueError(f"the record holds {len(found)} policies named {name!r}, not one")
    return found[0]


def slots_held(policy: Policy, tokens: int) -> int:
    """Slots a policy's cache holds per layer and key/value head after ``tokens`` tokens: the full cache one
    per token; the ring buffer and sinks + window all theirs from the start; SnapKV grows to its budget."""
    if policy.name == "full":
        return tokens
    if policy.name == "snapkv":
        return min(tokens, policy.slots)
    return policy.slots


def kept_bytes(policy: Policy, tokens: int, layers: int, kv_heads: int, head_dim: int) -> int:
    """Bytes the cache keeps between steps: every layer's keys and values (the KV-cache lab's formula) in the
    policy's element size, and its metadata."""
    held = slots_held(policy, tokens)
    element = BYTES_PER_ELEMENT[policy.dtype if policy.name == "sinks" else "float32"]
    return layers * (kv_cache_bytes(1, kv_heads, held, head_dim, element) + kv_heads * held * META_BYTES)


def expanded_bytes(slots: int, layers: int, heads: int, head_dim: int) -> int:
    """What a port that expands grouped-query heads before caching keeps for the same choice of slots: one
    key/value head per query head (float32 entries, no metadata)."""
    return layers * kv_cache_bytes(1, heads, slots, head_dim, BYTES_PER_ELEMENT["float32"])


def layout_tokens(lengths: Sequence[int]) -> dict[str, int]:
    """Positions each prefill layout runs through the layers: packed and one at a time the prompts' sum,
    padded every prompt at the longest's length."""
    return {"packed": sum(lengths), "padded": len(lengths) * max(lengths), "alone": sum(lengths)}


# --- statistics --------------------------------------------------------------------------------------------

def exp_mean(values: np.ndarray) -> np.ndarray:
    """exp of the mean along the last axis (labkit.bootstrap: one value per resample)."""
    return np.exp(np.mean(values, axis=-1))


def estimate(values: Sequence[float], statistic: Statistic, block: int) -> dict[str, float]:
    """The statistic with its bootstrap interval, as a derived figure holds it."""
    found: Interval = interval(values, statistic, block=min(block, len(values)))
    return found.as_record()


def verdict(difference: dict[str, float]) -> str:
    """'above', 'below' or 'level': where a difference's interval lies against zero."""
    if difference["low"] > 0:
        return "above"
    if difference["high"] < 0:
        return "below"
    return "level"


def resolution(difference: dict[str, float], gap: float) -> dict[str, Any]:
    """Whether a paired NLL difference's interval (nats) is fine enough to tell apart policies ``gap`` nats
    apart: it lies strictly inside -gap..+gap, so a difference of ``gap`` either way would have shown; and its
    width over that band's (None for a band of no width, which nothing resolves)."""
    return {"resolves": -gap < difference["low"] and difference["high"] < gap,
            "width_over_band": (difference["high"] - difference["low"]) / (2 * gap) if gap > 0 else None}


def steps_apart(a: Sequence[float], b: Sequence[float]) -> str:
    """'above' when every timed step of a is slower than every one of b, 'below' when every one is faster,
    'level' when the two sets overlap (their own spread cannot order them) or either holds a single step (it
    shows no spread to judge a difference against)."""
    if min(len(a), len(b)) < 2:
        return "level"
    if min(a) > max(b):
        return "above"
    if max(a) < min(b):
        return "below"
    return "level"


def distance(difference: dict[str, float]) -> tuple[float, float]:
    """How far from zero a difference's interval lies, nearest and furthest: (0, the furthest end) when it holds
    zero."""
    low, high = abs(difference["low"]), abs(difference["high"])
    if difference["low"] <= 0 <= difference["high"]:
        return 0.0, max(low, high)
    return min(low, high), max(low, high)


def series(entry: dict[str, Any], start: int, end: int) -> dict[str, list[float]]:
    """A run's per-position metrics over [start, end)."""
    return {name: entry[name][start:end] for name in ("nll", "kl", "agree") if name in entry}


def quality(values: dict[str, list[float]], block: int) -> dict[str, Any]:
    """Perplexity, and against the full cache mean KL and top-1 agreement, with intervals."""
    found = {"positions": len(values["nll"]), "perplexity": estimate(values["nll"], exp_mean, block)}
    if "kl" in values:
        found["kl"] = estimate(values["kl"], mean, block)
        found["top1"] = estimate(values["agree"], mean, block)
    return found


def paired(a: Sequence[float], b: Sequence[float], block: int) -> dict[str, Any]:
    """The mean NLL difference a - b over the same positions, with its interval and verdict, and the
    perplexity ratio it gives (the exponential of each end)."""
    difference = estimate(list(np.asarray(a) - np.asarray(b)), mean, block)
    return {"nll_difference": difference, "verdict": verdict(difference),
            "perplexity_ratio": {key: math.exp(value) for key, value in difference.items()}}


# --- the record ---------------------------------------------------------------------------------------------

def derive(record: dict[str, Any]) -> Figures:
    """Quality per policy and bucket and after the first eviction; the paired comparisons against the full
    cache and, at the sampled positions, against window with recomputation; the position rules; memory,
    steps, drift at this cache's most shifts, and packed against padded prefill."""
    figures = Figures()
    config = record["config"]
    edges, slots, positions = config["buckets"], config["slots"], config["positions"]
    block = BOOTSTRAP_BLOCK
    policies, samples = record["policies"], record["recompute"]["positions"]
    full = policies[REFERENCE]
    against_full: dict[str, dict[str, Any]] = {}
    for label, entry in policies.items():
        at = ("policies", label)
        buckets = [{"start": start, "end": end, **quality(series(entry, start, end), block)}
                   for start, end in zip(edges, edges[1:])]
        figures.add((*at, "buckets"), buckets, "its per-position values in each bucket")
        figures.add((*at, "after_eviction"), quality(series(entry, slots, positions), block),
                    "its per-position values from the first eviction on")
        figures.add((*at, "at_samples"), quality({name: [entry[name][t] for t in samples]
                                                  for name in series(entry, 0, 1)}, 1),
                    "its values at window with recomputation's sampled positions")
        figures.add((*at, "median_step_ns"), median(entry["step_ns"]), "its timed decode steps")
        figures.add((*at, "step_range_ns"), {"low": min(entry["step_ns"]), "high": max(entry["step_ns"])},
                    "its fastest and slowest timed decode steps")
        figures.add((*at, "kept_over_full"), entry["kept_bytes"][-1][1] / full["kept_bytes"][-1][1],
                    "its kept bytes over the full cache's, at the end of the text")
        figures.add((*at, "memory_grows"), entry["kept_bytes"][-1][1] > entry["kept_bytes"][0][1],
                    "its kept bytes at the end against after the first block")
        if label != REFERENCE:
            against_full[label] = paired(entry["nll"][slots:], full["nll"][slots:], block)
            figures.add((*at, "against_full"), against_full[label],
                        "its NLL minus the full cache's from the first eviction on")
    recompute = record["recompute"]
    figures.add(("recompute", "at_samples"), quality(series(recompute, 0, len(samples)), 1),
                "its values at the sampled positions")
    figures.add(("recompute", "buckets"),
                [{"start": start, "end": end, **quality({name: [v for t, v in zip(samples, recompute[name])
                                                                if start <= t < end]
                                                         for name in ("nll", "kl", "agree")}, 1)}
                 for start, end in zip(edges[1:], edges[2:])], "its values at the samples in each bucket")
    figures.add(("recompute", "median_step_ns"), median(recompute["step_ns"]), "its timed steps")
    gaps = {label: abs(against["nll_difference"]["estimate"]) for label, against in against_full.items()}
    nearest = sorted(gaps, key=gaps.__getitem__)
    closest, runner_up = nearest[0], (nearest[1] if len(nearest) > 1 else None)
    gap = gaps[closest]
    # The closest may be named only where its interval's distance from the full cache parts from the next one's.
    parted = runner_up is None or (distance(against_full[closest]["nll_difference"])[1]
                                   < distance(against_full[runner_up]["nll_difference"])[0])
    figures.add(("comparisons", "recompute_yardstick"),
                {"label": closest, "nats": gap, "ratio": math.exp(gap), "band": {"low": math.exp(-gap),
                                                                                  "high": math.exp(gap)},
                 "runner_up": runner_up, "parted": parted},
                "the smallest NLL gap between a bounded cache and the full cache from the first eviction on: the "
                "finest difference between policies a comparison against recomputation must resolve; the next "
                "smallest's policy, and whether the two intervals' distances from zero part")
    for label, against in against_full.items():
        others = [value for other, value in gaps.items() if other != label]
        figures.add(("policies", label, "full_resolution"),
                    resolution(against["nll_difference"], min(others) if others else 0.0),
                    "its interval against the full cache over the smallest gap between another bounded cache and the "
                    "full cache")
    for label, entry in policies.items():
        against = paired([entry["nll"][t] for t in samples], recompute["nll"], 1)
        figures.add(("policies", label, "against_recompute"), against,
                    "its NLL minus recomputation's at the sampled positions")
        figures.add(("policies", label, "recompute_resolution"), resolution(against["nll_difference"], gap),
                    "its interval against recomputation over the smallest gap between a bounded cache and the full "
                    "cache")
    sinks_label = policy_label(policies, "sinks")
    sinks_at = policies[sinks_label]["nll"]
    window_label = policy_label(policies, "window")
    window_after = float(exp_mean(np.asarray(policies[window_label]["nll"][slots:])))
    sinks_after = float(exp_mean(np.asarray(sinks_at[slots:])))
    full_after = float(exp_mean(np.asarray(full["nll"][slots:])))
    figures.add(("comparisons", "recovered_share"), (window_after - sinks_after) / (window_after - full_after)
                if window_after != full_after else None,
                "how much of window-only's perplexity excess over the full cache the sinks take back")
    newest = positions - 1
    figures.add(("comparisons", "ring_example"), {"position": newest, "slot": ring_slot(newest, slots),
                                                  "sees_from": newest - slots + 1},
                "the text's last position, its ring slot and the first position its window reaches")
    derive_rules(record, figures, sinks_label, gap)
    derive_memory(record, figures, window_label)
    drift = record["drift"]
    most = drift["most_shifts"]
    for probe in ("random", "trained"):
        errors, shifts = drift[probe]["errors"], drift[probe]["shifts"]
        figures.add(("drift", probe, "at_most_shifts"), {name: values[shifts.index(most)]
                                                         for name, values in errors.items()},
                    f"its errors after {most} shifts")
    packing = record["packing"]
    tokens = layout_tokens(packing["lengths"])
    figures.add(("packing", "tokens"), tokens, "the prompts' lengths")
    figures.add(("packing", "padded_waste"), 1 - tokens["packed"] / tokens["padded"],
                "the share of padded positions that are padding")
    medians = {mode: median(values["durations_ns"]) for mode, values in packing["modes"].items()}
    figures.add(("packing", "median_ns"), medians, "each layout's timed runs")
    figures.add(("packing", "padded_over_packed"), medians["padded"] / medians["packed"],
                "the padded layout's median over the packed one's")
    figures.add(("packing", "alone_over_packed"), medians["alone"] / medians["packed"],
                "one pass per prompt over the packed layout's median")
    figures.add(("wall_time_met",), record["wall_time_s"] <= WALL_TIME_LIMIT_S, "$.wall_time_s against its limit")
    return figures


def derive_rules(record: dict[str, Any], figures: Figures, sinks_label: str, gap: float) -> None:
    """The position rules over the first rule_positions: each variant's quality after the first eviction and
    its NLL against the float32 read rule's (the main sinks run) on the same positions, with whether that
    interval resolves ``gap`` (comparisons.recompute_yardstick's nats)."""
    config = record["config"]
    slots, end = config["slots"], config["rule_positions"]
    read = record["policies"][sinks_label]
    runs = {sinks_label: read, **record["rules"]}
    for label, entry in runs.items():
        at = ("rules_summary", label)
        figures.add((*at, "after_eviction"), quality(series(entry, slots, end), BOOTSTRAP_BLOCK),
                    "its per-position values from the first eviction to the end of the comparison")
        if label != sinks_label:
            against = paired(entry["nll"][slots:end], read["nll"][slots:end], BOOTSTRAP_BLOCK)
            figures.add((*at, "against_read"), against, "its NLL minus the float32 read rule's over the same positions")
            figures.add((*at, "read_resolution"), resolution(against["nll_difference"], gap),
                        "its interval against the float32 read rule over comparisons.recompute_yardstick's gap")
            figures.add((*at, "largest_nll_gap"), max(abs(a - b) for a, b in zip(entry["nll"][:end], read["nll"])),
                        "the largest NLL difference from the float32 read rule at any position")


def derive_memory(record: dict[str, Any], figures: Figures, window_label: str) -> None:
    policies, model = record["policies"], record["model"]
    full = policies[REFERENCE]
    figures.add(("memory", "full_over_window"), full["kept_bytes"][-1][1] / policies[window_label]["kept_bytes"][-1][1],
                "the full cache's kept bytes over the ring buffer's at the end of the text")
    snap = policies[policy_label(policies, "snapkv")]
    policy = policy_of(snap)
    expanded = expanded_bytes(policy.slots, model["layers"], model["heads"], model["head_dim"])
    figures.add(("memory", "snapkv_expanded_bytes"), expanded,
                "the same slots with one key/value head per query head")
    figures.add(("memory", "snapkv_expanded_over_kept"), expanded / snap["kept_bytes"][-1][1],
                "the expanded port's bytes over the kept bytes")
    figures.add(("memory", "recompute_over_window_step"), median(record["recompute"]["step_ns"])
                / median(policies[window_label]["step_ns"]), "recomputation's step over the ring buffer's")
    figures.add(("memory", "full_over_window_step"), median(full["step_ns"]) / median(policies[window_label]["step_ns"]),
                "the full cache's step over the ring buffer's, at the end of the text")
    figures.add(("memory", "full_vs_window_step"), steps_apart(full["step_ns"], policies[window_label]["step_ns"]),
                "the full cache's timed steps against the ring buffer's")
    kept = policies[window_label]["kept_bytes"][-1]
    same = [label for label, entry in policies.items() if label != REFERENCE and entry["kept_bytes"][-1] == kept]
    fastest = min(same, key=lambda label: median(policies[label]["step_ns"]))
    slowest = max(same, key=lambda label: median(policies[label]["step_ns"]))
    held = {slots_held(policy_of(policies[label]), kept[0]) for label in same}
    figures.add(("memory", "same_bytes_steps"),
                {"policies": same, "slots": held.pop() if len(held) == 1 else None, "fastest": fastest,
                 "slowest": slowest, "verdict": steps_apart(policies[slowest]["step_ns"], policies[fastest]["step_ns"])},
                "the bounded caches keeping the ring buffer's bytes at the end of the text, the slots each holds, the "
                "fastest and slowest by median step, and whether their timed steps overlap")


def refuse_unless(condition: bool, source: str, path: JsonPath, message: str) -> None:
    if not condition:
        refuse(source, path, message)


def check_run(entry: dict[str, Any], expected: int, source: str, at: JsonPath, reference: bool) -> None:
    for name in ("nll",) if reference else ("nll", "kl", "agree"):
        refuse_unless(len(entry[name]) == expected, source, (*at, name),
                      f"holds {len(entry[name])} positions, the run evaluated {expected}")
    refuse_unless(min(entry["nll"]) >= 0, source, (*at, "nll"), "holds a negative log-likelihood")
    if not reference:
        refuse_unless(min(entry["kl"]) >= 0, source, (*at, "kl"), "holds a negative KL divergence")
        refuse_unless(set(entry["agree"]) <= {0, 1}, source, (*at, "agree"), "holds a value other than 0 and 1")


def check_invariants(record: dict[str, Any], source: str) -> None:
    """The policies as configured, every run as long as it says, the buckets and samples as the formulas give
    them, every kept byte count equal to its policy's formula, each bounded cache exact until its first
    eviction, the two rules equal in float32, the packed and padded logits equal to each prompt's own."""
    config, model = record["config"], record["model"]
    slots, positions, block = config["slots"], config["positions"], config["block"]
    refuse_unless(config["buckets"] == bucket_edges(slots, positions), source, ("config", "buckets"),
                  f"are {config['buckets']}, but slots {slots} over {positions} positions give "
                  f"{bucket_edges(slots, positions)}")
    samples = sample_positions(config["buckets"], config["samples"])
    refuse_unless(record["recompute"]["positions"] == samples, source, ("recompute", "positions"),
                  f"are not the {config['samples']} sampled positions {samples[:4]}... the buckets give")
    names = [policy_of(entry).name for entry in record["policies"].values()]
    refuse_unless(names == [REFERENCE, *MAIN], source, ("policies",),
                  f"hold policies {names}, this lab measures {[REFERENCE, *MAIN]}")
    for label, entry in record["policies"].items():
        at = ("policies", label)
        refuse_unless(policy_of(entry).label == label, source, (*at, "policy"), f"describes another policy than {label}")
        check_run(entry, positions, source, at, label == REFERENCE)
        refuse_unless(len(entry["step_ns"]) == config["repeats"] and min(entry["step_ns"]) > 0, source,
                      (*at, "step_ns"), f"needs {config['repeats']} positive durations")
        policy = policy_of(entry)
        for index, (tokens, stored) in enumerate(entry["kept_bytes"]):
            wanted = kept_bytes(policy, tokens, model["layers"], model["kv_heads"], model["head_dim"])
            refuse_unless(tokens == block * (index + 1) and stored == wanted, source, (*at, "kept_bytes", index),
                          f"is [{tokens}, {stored}], but {label} after {block * (index + 1)} tokens keeps {wanted} bytes")
        if label != REFERENCE:
            early = max(entry["kl"][:slots])
            refuse_unless(early <= UNTIL_EVICTION_KL, source, (*at, "kl"),
                          f"reaches {early:g} before position {slots}, beyond {UNTIL_EVICTION_KL:g}: a bounded cache "
                          f"attends as the full cache does until its first eviction")
    for label, entry in record["rules"].items():
        check_run(entry, config["rule_positions"], source, ("rules", label), False)
        policy = policy_of(entry)
        if policy.dtype == "float32":
            sinks = next(e for e in record["policies"].values() if policy_of(e).name == "sinks")
            gap = max(abs(a - b) for a, b in zip(entry["nll"], sinks["nll"]))
            refuse_unless(gap <= SAME_RULE_NLL, source, ("rules", label, "nll"),
                          f"differs from the float32 read rule's by up to {gap:g}, beyond {SAME_RULE_NLL:g}")
    recompute = record["recompute"]
    check_run(recompute, len(samples), source, ("recompute",), False)
    packing = record["packing"]
    for mode, difference in packing["max_abs_diff"].items():
        bound = tolerance_bound(PACKING_TOLERANCE["atol"], PACKING_TOLERANCE["rtol"], packing["max_abs_reference"])
        refuse_unless(difference <= bound, source, ("packing", "max_abs_diff", mode),
                      f"is {difference:g}, beyond {bound:g}: {mode} prefill must give each prompt its own logits")
