"""Each cache format's effective bits per element and what fits a byte budget, the record's derived figures and
what its raw data must satisfy.

Torch-free: the page and the site build budget with these without torch. Each format's byte formula is the
mechanism's (llm_models.cache_formats, shared with the serving lab's admission): the caches in kv_quant.cache
count their bytes from the tensors they hold, and the tests prove the two agree at every length. Scales and
zero points are float32 (4 bytes; this lab's model dtype, and quanto and KIVI keep theirs in the activations'
dtype), so the round-trip bound needs no scale rounding; llama.cpp's blocks keep one fp16 scale (2 bytes), and
its tests show what that rounding costs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from labkit.bootstrap import LEVEL, RESAMPLES, SEED, Statistic, interval, mean
from labkit.figures import Figures, refuse
from labkit.records import JsonPath
from labkit.summary import median
from llm_models.cache_formats import (
    FP8_MAX,
    CacheFormat,
    block_bytes,
    format_of,
    formula_bytes,
    kivi_split,
    per_token_head_bytes,
)
from llm_models.generations import first_departure
from llm_models.kv_bytes import kv_bytes_per_token, kv_cache_bytes, tokens_that_fit

from .evaluation import REFERENCE, SPLIT, TEXT, TRAINED_LABELS


def bits_per_element(fmt: CacheFormat, head_dim: int) -> float:
    """Effective bits per cached element at long context: codes plus their share of scales and zeros."""
    return per_token_head_bytes(fmt, head_dim) * 8 / (2 * head_dim)


def effective_bits(fmt: CacheFormat, batch: int, kv_heads: int, head_dim: int, tokens: int) -> float:
    """Bits per element at one length, residual and per-layer scales included."""
    if tokens < 1:
        raise ValueError(f"tokens must be at least 1, got {tokens}")
    elements = kv_cache_bytes(batch, kv_heads, tokens, head_dim, bytes_per_element=1)  # 2 x B x Hkv x T x D
    return formula_bytes(fmt, batch, kv_heads, head_dim, tokens) * 8 / elements


def tokens_in_budget(fmt: CacheFormat, budget: int, batch: int, kv_heads: int, head_dim: int) -> int:
    """The most positions whose cache fits ``budget`` bytes, by the format's real formula."""
    if budget < 0:
        raise ValueError(f"budget must be at least 0 bytes, got {budget}")
    if formula_bytes(fmt, batch, kv_heads, head_dim, 0) > budget:
        return 0
    low, high = 0, 1
    while formula_bytes(fmt, batch, kv_heads, head_dim, high) <= budget:  # bytes only grow with tokens
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        if formula_bytes(fmt, batch, kv_heads, head_dim, middle) <= budget:
            low = middle
        else:
            high = middle
    return low


def naive_tokens(budget: int, batch: int, kv_heads: int, head_dim: int, bits: float) -> int:
    """What a budget admits by 2 x B x Hkv x T x D x bits / 8, the first lab's formula with nominal bits:
    32 or 16 for a full-precision estimate (too few tokens), 4 or 2 billed as the code width alone (too many,
    since scales, zeros and the residual are not free)."""
    return tokens_that_fit(budget, 0, batch * kv_bytes_per_token(1, kv_heads, head_dim, bits))


# --- serving: what a budget admits when blocks are priced in a format's real bytes ------------------------

def admitted_requests(fmt: CacheFormat, budget_bytes: int, layers: int, block_size: int, kv_heads: int,
                      head_dim: int, positions: int) -> int:
    """Requests of ``positions`` cached positions each whose reserved blocks fit ``budget_bytes``."""
    if positions < 1:
        raise ValueError(f"positions must be at least 1, got {positions}")
    per_request = -(-positions // block_size)
    return budget_bytes // block_bytes(fmt, layers, block_size, kv_heads, head_dim) // per_request


# --- the record: its constants, every derived figure, and what its raw data must satisfy ------------------

WALL_TIME_LIMIT_S = 300.0  # the whole benchmark, load and all, on the two-core machines the site targets
BUDGET_BYTES = 256 * 2**20  # the fixed budget of the "what fits" table: the whole model's cache
# The serving lab's model and default byte budget (llm_models.serving.engine: 4 layers, 2 key/value heads of 64,
# blocks of 16, a budget of 256 float32 blocks); test_serving_quant_admission.py holds these to its code.
SERVING = {"layers": 4, "kv_heads": 2, "head_dim": 64, "block_size": 16, "budget_blocks": 256,
           "bytes_per_element": 4, "positions": 128}
ATTENTION_ATOL = 1e-4  # blockwise against all-at-once attention: the same sums in another order
TOP1_BAND = 0.99  # top-1 agreement whose whole interval lies below 99 % says the choices changed
BOOTSTRAP_BLOCK = 32  # positions per resampled run: neighbouring positions of one text are not independent


def axis_of(group: dict[str, int]) -> str:
    """Which axis a quantization group runs along, from the elements it holds: one token's channels
    ("per token"), one channel over tokens ("per channel"), or neither."""
    if group["tokens"] == 1 and group["channels"] > 1:
        return "per token"
    if group["channels"] == 1 and group["tokens"] > 1:
        return "per channel"
    return "mixed"


def serving_requests(fmt: CacheFormat) -> int:
    """Requests of SERVING's positions the serving lab's default budget admits with blocks priced in ``fmt``."""
    s = SERVING
    return admitted_requests(fmt, serving_budget_bytes(), s["layers"], s["block_size"], s["kv_heads"],
                             s["head_dim"], s["positions"])


def serving_budget_bytes() -> int:
    """The serving lab's default budget: its float32 blocks' bytes (kv_cache.memory's per-token formula)."""
    s = SERVING
    per_token = kv_bytes_per_token(s["layers"], s["kv_heads"], s["head_dim"], 8 * s["bytes_per_element"])
    return int(per_token * s["block_size"] * s["budget_blocks"])


def derive(record: dict[str, Any]) -> Figures:
    """Per format: formula bytes and bytes per token at every counted length, effective and long-run bits and
    bytes, its size against float32's, the tokens a fixed budget holds (and the naive estimates, and how far
    they are off), the serving requests a budget admits, and on the trained model its bits at the evaluated
    length, the first greedy departure and whether that greedy run cached any position outside an exact
    residual, and perplexity's change; the step's and the dequantization's medians, timed apart; attention's
    peaks against each other and the cache; transformers' bytes per token and group axis; the orderings the page
    reads."""
    figures = Figures()
    layer = record["config"]["layer"]
    kv, d, layers = layer["kv_heads"], layer["head_dim"], layer["layers"]
    per_layer_budget = BUDGET_BYTES // layers
    reference_greedy = record["formats"][REFERENCE]["trained"]["greedy_ids"]
    evaluated = record["trained"]["text"]["evaluated"]
    greedy_positions = record["trained"]["prompt_tokens"] + record["trained"]["new_tokens"]
    naive_float32 = naive_tokens(per_layer_budget, 1, kv, d, 32)
    reference = record["formats"][REFERENCE]["bytes"][-1]
    qualities = {label: quality(record, label) for label in record["trained"]["positions"]}
    for label, entry in record["formats"].items():
        fmt = format_of(label)
        at = ("formats", label)
        for index, count in enumerate(entry["bytes"]):
            figures.add((*at, "bytes", index, "formula_bytes"), formula_bytes(fmt, 1, kv, d, count["tokens"]),
                        f"{label}'s byte formula at {count['tokens']} tokens")
            figures.add((*at, "bytes", index, "bytes_per_token"), count["stored_bytes"] / count["tokens"],
                        "its stored bytes over its tokens")
        last = entry["bytes"][-1]
        figures.add((*at, "bytes_per_token"), last["stored_bytes"] / last["tokens"],
                    "the stored bytes at the longest length over its tokens")
        figures.add((*at, "smaller_than_float32"), (reference["stored_bytes"] / reference["tokens"])
                    / (last["stored_bytes"] / last["tokens"]), "float32's bytes per token over its own")
        figures.add((*at, "effective_bits"), effective_bits(fmt, 1, kv, d, last["tokens"]),
                    f"{label}'s formula at the longest length")
        figures.add((*at, "long_run_bits"), bits_per_element(fmt, d), f"{label}'s per-token formula")
        figures.add((*at, "long_run_bytes_per_token"), kv * per_token_head_bytes(fmt, d),
                    f"{label}'s per-token formula over {kv} key/value heads")
        figures.add((*at, "nominal_bits"), fmt.nominal_bits, f"{label}'s code widths, keys and values")
        fits, naive = tokens_in_budget(fmt, per_layer_budget, 1, kv, d), naive_tokens(per_layer_budget, 1, kv, d,
                                                                                      fmt.nominal_bits)
        figures.add((*at, "fits_tokens"), fits, f"{label}'s formula against the budget")
        figures.add((*at, "naive_tokens"), naive, "the budget over the code width alone")
        figures.add((*at, "fits_overpromise"), naive / fits - 1 if fits else None,
                    "the code-width estimate over the tokens that fit, less one (none when none fit)")
        figures.add((*at, "fits_vs_float32_estimate"), fits / naive_float32, "the tokens that fit over the "
                    "float32 formula's estimate")
        if fmt.name != "kivi":
            requests = serving_requests(fmt)
            figures.add((*at, "serving_requests"), requests, f"{label}'s block bytes against the serving budget")
            figures.add((*at, "serving_vs_float32"), requests / serving_requests(format_of(REFERENCE)),
                        "its serving requests over float32's")
        if "trained" in entry:
            trained = entry["trained"]
            figures.add((*at, "trained", "evaluated_bits"), effective_bits(fmt, 1, kv, d, evaluated),
                        f"{label}'s formula at the {evaluated} positions evaluated")
            figures.add((*at, "trained", "departs_at"), first_departure(trained["greedy_ids"], reference_greedy),
                        "its greedy ids against float32's")
            figures.add((*at, "trained", "greedy_exact"),
                        fmt.name == "kivi" and kivi_split(fmt, greedy_positions)[0] == 0,
                        "whether the greedy run's prompt and new tokens all stay in its exact residual (kivi_split)")
            figures.add_each((*at, "trained", "quality"), qualities[label],
                             f"seeded bootstrap intervals of $.trained.positions.{label} (and float32's, paired)")
            timing = trained["timing"]
            step, dequantize = median(timing["step_ns"]), median(timing["dequantize_ns"])
            figures.add((*at, "trained", "timing", "median_step_ns"), step, "its step durations")
            figures.add((*at, "trained", "timing", "median_dequantize_ns"), dequantize,
                        "its dequantization durations, timed apart from the steps")
    figures.add(("trained", "timing", "longest_dequantize_ns"),
                max(median(entry["trained"]["timing"]["dequantize_ns"]) for entry in record["formats"].values()
                    if "trained" in entry), "the longest of the formats' median dequantizations")
    figures.add(("fits", "budget_bytes"), BUDGET_BYTES, "kv_quant.figures.BUDGET_BYTES")
    figures.add(("fits", "naive_float32_tokens"), naive_float32, "the first lab's formula at 32 bits")
    figures.add(("fits", "naive_bfloat16_tokens"), naive_tokens(per_layer_budget, 1, kv, d, 16),
                "the first lab's formula at 16 bits")
    figures.add(("serving", "budget_bytes"), serving_budget_bytes(), "the serving lab's default budget")
    sizes = record["trained"]["magnitudes"]
    largest = max(sizes["keys_max_abs"], sizes["values_max_abs"])
    figures.add(("trained", "fp8_scale_needed"), {variant: largest > limit for variant, limit in FP8_MAX.items()},
                "the largest stored |entry| against each fp8 variant's maximum")
    figures.add_each(("trained",), trained_verdicts(record, qualities), "the formats' per-position figures at the longest "
                     "context, paired with each other by the same bootstrap resamples")
    for label, row in record["attention_memory"]["formats"].items():
        figures.add(("attention_memory", "formats", label, "peak_ratio"),
                    row["all_at_once"]["peak_bytes"] / max(1, row["blockwise"]["peak_bytes"]),
                    "all-at-once peak over blockwise peak")
        figures.add(("attention_memory", "formats", label, "peak_over_cache"),
                    row["all_at_once"]["peak_bytes"] / row["cache_bytes"], "all-at-once peak over the cache's bytes")
    toy = record["config"]["toy"]
    figures.add(("error_chain_steps",), toy["length"] - toy["prefix"], "the toy run's one-token steps after its prefill")
    for label, row in record["transformers"]["backends"].items():
        at = ("transformers", "backends", label)
        figures.add((*at, "bytes_per_token"), row["stored_bytes"] / row["tokens"], "its stored bytes over its tokens")
        figures.add((*at, "axis"), axis_of(row["group"]), "the elements sharing its first key's group")
    figures.add(("wall_time_met",), record["wall_time_s"] <= WALL_TIME_LIMIT_S, "$.wall_time_s against its limit")
    return figures


# --- quality on the trained model: bootstrap intervals from the per-position figures -------------------------

Interval = dict[str, float]  # {"estimate", "low", "high"}: labkit.bootstrap.Interval as a derived figure holds it


def bootstrap(values: np.ndarray, statistic: Statistic = mean) -> Interval:
    """The seeded moving-block bootstrap interval of ``statistic`` over per-position ``values``; every call on
    as many positions resamples the same positions, so two formats' intervals (and their difference) pair."""
    return interval(values, statistic, block=min(BOOTSTRAP_BLOCK, len(values))).as_record()


def per_position(record: dict[str, Any], label: str, context: int) -> dict[str, np.ndarray]:
    """One format's first ``context`` positions: next-token log-likelihood loss, KL against float32, and 1 where
    its most likely token is float32's (0 where it is not)."""
    stored = record["trained"]["positions"][label]
    agree = np.ones(context)
    agree[[index for index in stored["top1_misses"] if index < context]] = 0
    return {"nll": np.asarray(stored["nll"][:context]), "kl": np.asarray(stored["kl"][:context]), "top1": agree}


def perplexity(nll: np.ndarray) -> np.ndarray:
    """exp of the mean loss along the last axis (labkit.bootstrap: one value per resample)."""
    return np.exp(np.mean(nll, axis=-1))


def relative_change(difference: np.ndarray) -> np.ndarray:
    """Perplexity over the reference's, less one, from the per-position difference of their losses (along the last
    axis)."""
    return np.exp(np.mean(difference, axis=-1)) - 1


def quality(record: dict[str, Any], label: str) -> dict[str, dict[str, Interval]]:
    """Per context: perplexity, its change against float32 (paired), KL divergence and top-1 agreement, each with
    its interval."""
    figures = {}
    for context in record["trained"]["contexts"]:
        own, reference = per_position(record, label, context), per_position(record, REFERENCE, context)
        figures[str(context)] = {"perplexity": bootstrap(own["nll"], perplexity),
                                 "perplexity_change": bootstrap(own["nll"] - reference["nll"], relative_change),
                                 "kl": bootstrap(own["kl"]), "top1_agreement": bootstrap(own["top1"])}
    return figures


def side_of(found: Interval) -> str:
    """Which side of zero an interval of a difference lies on: "above", "below", or "neither" (it holds zero)."""
    return "above" if found["low"] > 0 else "below" if found["high"] < 0 else "neither"


def hides_damage(found: dict[str, Interval]) -> str | None:
    """Whether perplexity hides a format's damage: "hides" where its change against float32's holds zero while its
    whole top-1 agreement interval lies below TOP1_BAND; "undecided" where the perplexity is as level but only the
    estimate lies below the band (the interval reaches it); None otherwise."""
    if side_of(found["perplexity_change"]) != "neither" or found["top1_agreement"]["estimate"] >= TOP1_BAND:
        return None
    return "hides" if found["top1_agreement"]["high"] < TOP1_BAND else "undecided"


def trained_verdicts(record: dict[str, Any], qualities: dict[str, dict[str, dict[str, Interval]]]) -> dict[str, Any]:
    """At the longest context: the formats by KL; those whose perplexity cannot be told from float32's while
    their top-1 agreement is clearly below TOP1_BAND, and those below it by estimate only (hides_damage);
    uncalibrated against calibrated fp8 (KL difference, paired); keys only against values only for each SPLIT
    family (KL difference, paired); the bootstrap used."""
    contexts = record["trained"]["contexts"]
    longest, at = contexts[-1], str(contexts[-1])
    labels = list(record["trained"]["positions"])
    found = {label: qualities[label][at] for label in labels}
    damage = {label: hides_damage(found[label]) for label in labels if label != REFERENCE}
    kl = {label: per_position(record, label, longest)["kl"] for label in labels}
    calibration = bootstrap(kl["fp8-tensor-none"] - kl["fp8-tensor-amax"])
    sides = {family: bootstrap(kl[f"{family}-keys"] - kl[f"{family}-values"]) for family in SPLIT}
    return {"kl_order": sorted(labels, key=lambda label: (found[label]["kl"]["estimate"], label)),
            "perplexity_hides": [label for label, kind in damage.items() if kind == "hides"],
            "perplexity_hides_undecided": [label for label, kind in damage.items() if kind == "undecided"],
            "fp8_calibration": {"none_minus_amax_kl": calibration, "uncalibrated_is": side_of(calibration)},
            "sides": {family: {"keys_minus_values_kl": difference, "keys_are": side_of(difference)}
                      for family, difference in sides.items()},
            "bootstrap": {"resamples": RESAMPLES, "level": LEVEL, "seed": SEED, "block": BOOTSTRAP_BLOCK}}


def refuse_unless(condition: bool, source: str, path: JsonPath, message: str) -> None:
    if not condition:
        refuse(source, path, message)


def check_invariants(record: dict[str, Any], source: str) -> None:
    """Formats as labelled, stored bytes equal to each format's formula at every length, the float32 cache
    exact (error chain zero, KL zero, top-1 one), the trained formats and contexts as configured, every metric
    in its range, blockwise attention equal to all-at-once within ATTENTION_ATOL, positive timings."""
    config, layer = record["config"], record["config"]["layer"]
    refuse_unless(list(record["formats"]) == config["formats"], source, ("formats",),
                  f"holds {list(record['formats'])}, but config.formats lists {config['formats']}")
    for label, entry in record["formats"].items():
        at = ("formats", label)
        try:
            fmt = format_of(label)
        except ValueError as error:
            refuse(source, at, str(error))
        refuse_unless(entry["format"] == fmt.as_record(), source, (*at, "format"),
                      f"is {entry['format']}, but its label names {fmt.as_record()}")
        tokens = [count["tokens"] for count in entry["bytes"]]
        refuse_unless(tokens == config["lengths"], source, (*at, "bytes"),
                      f"counts lengths {tokens}, config.lengths are {config['lengths']}")
        for index, count in enumerate(entry["bytes"]):
            wanted = formula_bytes(fmt, 1, layer["kv_heads"], layer["head_dim"], count["tokens"])
            refuse_unless(count["stored_bytes"] == wanted, source, (*at, "bytes", index, "stored_bytes"),
                          f"is {count['stored_bytes']}, but {label}'s formula at {count['tokens']} tokens gives {wanted}")
        chain = entry["error_chain"]
        refuse_unless(all(value >= 0 for value in chain.values()) and chain["top1_agreement"] <= 1, source,
                      (*at, "error_chain"), f"holds a negative error or an agreement above 1: {chain}")
    exact = record["formats"][REFERENCE]["error_chain"]
    refuse_unless(exact["logits"] == 0 and exact["keys"] == 0, source, ("formats", REFERENCE, "error_chain", "logits"),
                  f"is {exact['logits']}, but the float32 cache is the plain cache: its difference must be 0")
    trained = record["trained"]
    labels = [label for label in record["formats"] if "trained" in record["formats"][label]]
    refuse_unless(labels == list(TRAINED_LABELS) and config["trained_formats"] == list(TRAINED_LABELS), source,
                  ("config", "trained_formats"), f"are {labels}, but this lab measures {list(TRAINED_LABELS)}")
    refuse_unless(trained["text"]["sha256"] == TEXT.sha256, source, ("trained", "text", "sha256"),
                  f"is {trained['text']['sha256'][:16]}…, but the lab evaluates {TEXT.name} of sha256 "
                  f"{TEXT.sha256[:16]}…")
    contexts, evaluated = trained["contexts"], trained["text"]["evaluated"]
    refuse_unless(contexts == sorted(set(contexts)) and contexts[-1] == evaluated, source, ("trained", "contexts"),
                  f"are {contexts}: ascending, each once, the longest the {evaluated} positions evaluated")
    refuse_unless(list(trained["positions"]) == list(TRAINED_LABELS), source, ("trained", "positions"),
                  f"holds {list(trained['positions'])}, but this lab measures {list(TRAINED_LABELS)}")
    for label, stored in trained["positions"].items():
        at = ("trained", "positions", label)
        for metric in ("nll", "kl"):
            refuse_unless(len(stored[metric]) == evaluated and min(stored[metric]) >= 0, source, (*at, metric),
                          f"holds {len(stored[metric])} values (a negative among them?), but {evaluated} positions "
                          f"were evaluated, each with a loss and a KL of at least 0")
        misses = stored["top1_misses"]
        refuse_unless(misses == sorted(set(misses)) and all(0 <= i < evaluated for i in misses), source,
                      (*at, "top1_misses"), f"must list positions in [0, {evaluated}) once each, in order")
    for label in labels:
        values = record["formats"][label]["trained"]
        at = ("formats", label, "trained")
        refuse_unless(len(values["greedy_ids"]) == trained["new_tokens"], source, (*at, "greedy_ids"),
                      f"holds {len(values['greedy_ids'])} tokens, trained.new_tokens is {trained['new_tokens']}")
        timing = values["timing"]
        refuse_unless(len(timing["step_ns"]) == len(timing["dequantize_ns"]) == config["repeats"]
                      and min(timing["step_ns"] + timing["dequantize_ns"]) > 0, source, (*at, "timing"),
                      f"needs {config['repeats']} positive durations of each kind")
    reference = trained["positions"][REFERENCE]
    refuse_unless(max(reference["kl"]) == 0 and reference["top1_misses"] == [], source,
                  ("trained", "positions", REFERENCE, "kl"), "must be 0 with no top-1 miss: it is the reference")
    for label, row in record["attention_memory"]["formats"].items():
        refuse_unless(row["max_abs_diff"] <= ATTENTION_ATOL, source,
                      ("attention_memory", "formats", label, "max_abs_diff"),
                      f"is {row['max_abs_diff']:g}, beyond {ATTENTION_ATOL:g}: blockwise attention must equal all-at-once")
