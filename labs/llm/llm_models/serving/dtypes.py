"""The dtypes the serving model runs in: the tolerance the equivalence gate holds each one to (batched rows against
each request alone), and how the served dtype is chosen.

Torch-free, and the one home of each: the engine, the server, the trained model's load and the benchmark take them
from here, and so do the serving lab's figures, views and tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from labkit.figures import tolerance_bound
from labkit.summary import median

# The equivalence gate's tolerance per dtype the model runs in. float32: the toy block's (llm_models.toy.equivalence).
# bfloat16 keeps 8 significant bits (a unit in the last place is 2^-7 of a value's magnitude, 0.0078 at 1 to 2):
# batched and alone, a row's matrix products may round once differently, so one such unit is allowed, not more.
TOLERANCES = {"float32": {"atol": 1e-5, "rtol": 1e-5}, "bfloat16": {"atol": 1e-2, "rtol": 1e-2}}
DTYPES = tuple(TOLERANCES)
# The trained SmolLM2-135M's gate: 30 layers of float32 rounding in another accumulation order (a batch of rows
# against one row) move its logits by a few 1e-5, past the tiny random model's bound; float32 is held to the
# KV-cache lab's bound for this model (kv_cache.trained: its parity tests against transformers).
# In bfloat16 an element-wise bound cannot fit it: every layer's products round to 8 significant bits, a batch of
# rows and one row may take different kernels that accumulate in different orders, and a one-step rounding
# difference in layer 1 grows through 29 more. So the bound is relative to each logits row's scale: the largest
# |batched - alone| in a row within ROW_STEPS bfloat16 steps at that row's largest |logit| (bfloat16_step). Fed the
# same tokens, the 16 real prompts' rows parted by up to 9 such steps (1.125 in a row whose largest |logit| lay in 16-32) when alone's
# products accumulated in another order (float32 throughout, or the inner dimension in two halves), and an AMD Zen 4
# CPU's batched and single-row kernels parted them by 1.25 steps (0.312 near 36). 16 is that worst case with
# headroom, while a batched row turned one position too far, or reading another request's first block, parts by 71
# to 137 steps on the gate's prompts (test_serving_model.TrainedBfloat16Gate fails each).
ROW_STEPS = 16
TRAINED_TOLERANCES = {"float32": {"atol": 1e-3, "rtol": 1e-4}, "bfloat16": {"row_steps": ROW_STEPS}}
BFLOAT16_BITS = 8  # significant bits of a bfloat16: 7 stored, one implied
# How the served dtype was chosen ($.config.benchmark.dtype_choice.how): timed here, the probe timings handed in by
# a caller (a test setting which dtype wins, so the suite runs each branch on any CPU), or named by --dtype.
CHOSEN_BY_TIMING = "auto: the faster of the two at this batch"
CHOSEN_BY_SUPPLIED_PROBES = "auto: the faster of two probe timings the caller supplied, not measured here"
CHOSEN_BY_FLAG = "given by --dtype"


def bfloat16_step(magnitude: float) -> float:
    """The gap between neighbouring bfloat16 numbers at ``magnitude``: 2^(floor(log2 |magnitude|) - 7), 0.25 for a
    logit of 32 to 64; at 0, the step at 1."""
    exponent = math.frexp(abs(magnitude))[1] if magnitude else 1  # |m| = f x 2^e, 0.5 <= f < 1
    return math.ldexp(1.0, exponent - BFLOAT16_BITS)


def row_scaled(tolerance: Mapping[str, float]) -> bool:
    """Whether ``tolerance`` bounds each row by bfloat16 steps at its own scale, or each element by (atol, rtol)."""
    return "row_steps" in tolerance


def difference_bound(tolerance: Mapping[str, float], max_abs_reference: float) -> float:
    """The largest |difference| ``tolerance`` allows in a row (or a run) whose largest |logit| is max_abs_reference."""
    if row_scaled(tolerance):
        return tolerance["row_steps"] * bfloat16_step(max_abs_reference)
    return tolerance_bound(tolerance["atol"], tolerance["rtol"], max_abs_reference)


def tie_bound(tolerance: Mapping[str, float], max_abs_reference: float) -> float:
    """The largest margin by which two runs whose logits agree within ``tolerance`` can pick different argmax
    tokens: each of the two logits may be off by the bound at that scale, in opposite directions."""
    return 2 * difference_bound(tolerance, max_abs_reference)


def tolerance_text(tolerance: Mapping[str, float]) -> str:
    """'atol = 1e-05, rtol = 1e-05', or '16 bfloat16 steps at each row's largest |logit|'."""
    if row_scaled(tolerance):
        return f"{tolerance['row_steps']:g} bfloat16 steps at each row's largest |logit|"
    return f"atol = {tolerance['atol']:g}, rtol = {tolerance['rtol']:g}"


def probe_medians(probes: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The median of each dtype probe's durations (one step's weight multiplies in that dtype)."""
    return {name: median(probe["durations_ns"]) for name, probe in probes.items()}


def faster_dtype(probes: Mapping[str, Mapping[str, Any]]) -> str:
    """The dtype whose probe has the lower median (the first probed on a tie): the one an automatic choice serves in."""
    medians = probe_medians(probes)
    return min(medians, key=lambda name: medians[name])
