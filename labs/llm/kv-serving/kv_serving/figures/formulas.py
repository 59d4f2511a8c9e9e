"""The serving record's formulas, torch-free: the pool's sizes, one run's summaries, the runs a record holds.

One definition each, used by the benchmark and the load generator to write a record, by kv_serving.figures
to derive and check it, and by the views to word it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kv_cache.memory import kv_cache_bytes
from labkit.figures import JsonPath, tolerance_bound
from labkit.regimes import FLAT_BAND
from labkit.summary import median, percentile

OUTCOMES = ("completed", "refused", "failed", "left")  # a request's outcome, as the load generator records it
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
# The equivalence gate's tolerance per dtype the model runs in. float32: the first lab's (kv_cache.equivalence).
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
LATENCIES = ("ttft_s", "e2e_s")  # per completed request in its row; the gaps between tokens are not stored


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


# ---- the pool's sizes ----------------------------------------------------------------------------------------
def blocks_for(positions: int, block_size: int) -> int:
    """Blocks that hold ``positions`` cached positions: ceil(positions / block_size)."""
    if positions < 0 or block_size < 1:
        raise ValueError(f"need positions >= 0 and block_size >= 1, got {positions} and {block_size}")
    return -(-positions // block_size)


def block_bytes(layers: int, block_size: int, kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    """Keys and values of one block in every layer, from the first lab's formula (batch 1)."""
    return layers * kv_cache_bytes(1, kv_heads, block_size, head_dim, bytes_per_element)


def record_block_bytes(record: dict[str, Any], block_size: int) -> int:
    """``block_bytes`` for the record's model and layer count: block_size 1 is one token's keys and values."""
    model, layers = record["config"]["model"], record["config"]["benchmark"]["layers"]
    return block_bytes(layers, block_size, model["kv_heads"], model["head_dim"], model["bytes_per_element"])


def reservation_blocks(prompt: int, max_tokens: int, block_size: int) -> int:
    """Blocks a request reserves when admitted: its prompt and every token but the last, which is never fed back."""
    return blocks_for(prompt + max_tokens - 1, block_size)


def budget_blocks(num_blocks: int, share: float) -> int:
    """The byte-admission server's budget in blocks: ``share`` of its pool, rounded down."""
    return int(num_blocks * share)


# ---- one run, as its client saw it --------------------------------------------------------------------------
def latency_summary(values: Sequence[float]) -> dict[str, float] | None:
    """p50, p90, p99 (labkit.summary.percentile), mean and count of latencies in seconds; None for none."""
    if not values:
        return None
    return {**{name: percentile(values, share) for name, share in QUANTILES},
            "mean": statistics.fmean(values), "count": len(values)}


def duration_s(requests: Sequence[dict[str, Any]]) -> float:
    """From the first request sent to the last response's end."""
    first = min(r["sent_s"] for r in requests)
    ends = [r["sent_s"] + r["e2e_s"] for r in requests if r["e2e_s"] is not None]
    return max(ends, default=first) - first


def client_summary(requests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts, tokens, duration, throughput and the time-to-first-token and end-to-end percentiles of one
    run, from its request rows (``RequestResult`` fields); the gaps between tokens are summarised apart."""
    done = [r for r in requests if r["outcome"] == "completed"]
    tokens = sum(r["tokens"] for r in requests)
    duration = duration_s(requests)
    return {
        "requests": len(requests),
        **{outcome: sum(r["outcome"] == outcome for r in requests) for outcome in OUTCOMES},
        "output_tokens": tokens,
        "duration_s": duration,
        "throughput_tokens_per_s": tokens / duration if duration > 0 else 0.0,
        **{name: latency_summary([r[name] for r in done if r[name] is not None]) for name in LATENCIES},
    }


def arrival_span(run: dict[str, Any]) -> float:
    """Seconds from the first request sent to the last: how long arrivals lasted."""
    sent = [r["sent_s"] for r in run["requests"]]
    return max(sent) - min(sent)


# ---- one run, as its server counted it ----------------------------------------------------------------------
def mean_batch(server: dict[str, Any]) -> float:
    """Requests decoded per decode step: rows over steps."""
    return server["decode_rows"] / server["decode_steps"] if server["decode_steps"] else 0.0


def mean_step_s(server: dict[str, Any]) -> float:
    """The server's own mean decode step: its time in decode steps over their number."""
    return server["decode_seconds"] / server["decode_steps"] if server["decode_steps"] else 0.0


def mean_prefill_s(server: dict[str, Any]) -> float:
    """The server's own mean prefill: its time in prefills over their number."""
    return server["prefill_seconds"] / server["prefills"] if server["prefills"] else 0.0


def mean_used(run: dict[str, Any]) -> float:
    """Blocks in use, averaged over the run's /metrics samples."""
    return statistics.mean(s["used_blocks"] for s in run["occupancy"])


def waiting_share(run: dict[str, Any]) -> float:
    """The share of the run's /metrics samples that saw a request waiting in the queue."""
    return sum(s["waiting"] > 0 for s in run["occupancy"]) / len(run["occupancy"])


# ---- the in-process steps against batch size -----------------------------------------------------------------
def step_regime(growth: float, widening: float) -> str:
    """How a batched step grew from the smallest batch to the largest, ``growth`` times for ``widening`` times the
    rows: 'flat' (within labkit.regimes.FLAT_BAND: a fixed cost per step), 'shared' (less than half as fast as
    the batch) or 'per-row'."""
    return "flat" if growth <= 1 + FLAT_BAND else "shared" if growth < widening / 2 else "per-row"


def nearest_step(steps: Sequence[dict[str, Any]], batch: float) -> dict[str, Any]:
    """The in-process step whose batch is nearest ``batch`` (a run's mean batch, at least 1) on a log scale."""
    return min(steps, key=lambda row: abs(math.log(row["batch"] / max(batch, 1))))


# ---- the record's runs and the ones the sentences name ------------------------------------------------------
def runs(record: dict[str, Any]) -> Iterator[tuple[JsonPath, dict[str, Any]]]:
    """Every load run in the record, with its JSON path."""
    for index, run in enumerate(record["admission"]["policies"]):
        yield ("admission", "policies", index), run
    for index, run in enumerate(record["cancellation"]["modes"]):
        yield ("cancellation", "modes", index), run
    for index, run in enumerate(record["rates"]["points"]):
        yield ("rates", "points", index), run
    yield ("rates", "serial"), record["rates"]["serial"]
    yield from trained_runs(record)


def trained_runs(record: dict[str, Any]) -> Iterator[tuple[JsonPath, dict[str, Any]]]:
    """The trained model's load runs, with their JSON paths: the sweep, the serial run, the admission servers."""
    trained = record["trained"]
    for index, run in enumerate(trained["points"]):
        yield ("trained", "points", index), run
    yield ("trained", "serial"), trained["serial"]
    for index, run in enumerate(trained["admission"]["policies"]):
        yield ("trained", "admission", "policies", index), run


def trained_block_bytes(record: dict[str, Any], block_size: int) -> int:
    """One block's keys and values in every layer of the trained model, in the dtype it was served in."""
    model = record["trained"]["model"]
    element = {"float32": 4, "bfloat16": 2}[model["dtype"]]
    return block_bytes(model["layers"], block_size, model["kv_heads"], model["head_dim"], element)


def matching_solo(run: dict[str, Any], solo: dict[str, Any]) -> int:
    """Requests of ``run`` whose tokens equal the same prompt's in the one-at-a-time run (each alone there)."""
    alone = {r["index"]: r["token_ids"] for r in solo["requests"] if r["outcome"] == "completed"}
    return sum(r["outcome"] == "completed" and r["token_ids"] == alone.get(r["index"]) for r in run["requests"])


def policy(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in record["admission"]["policies"] if p["name"] == name)


def mode(record: dict[str, Any], honor: bool) -> dict[str, Any]:
    return next(m for m in record["cancellation"]["modes"] if m["honor_disconnect"] is honor)


def best_point(record: dict[str, Any]) -> dict[str, Any]:
    """The sweep's point of highest throughput, at which the speedup target is judged (its stored best_rate)."""
    return next(p for p in record["rates"]["points"] if p["rate"] == record["rates"]["best_rate"])


# ---- the scheduler's iterations, replayed without a model (kv_serving.scheduler.Scheduler.run) --------------
@dataclass(frozen=True)
class Job:
    """A request for a replay: it joins ``waiting`` before iteration ``arrives`` (1 is the first)."""

    name: str
    arrives: int
    prompt: int
    max_tokens: int


@dataclass(frozen=True)
class Iteration:
    """One pass of the loop: who was admitted and prefilled, who the batched decode step ran for, who finished
    (their blocks back in the pool), the blocks reserved when the step ran and who was still waiting."""

    number: int
    admitted: tuple[str, ...]
    decoded: tuple[str, ...]
    finished: tuple[str, ...]
    reserved_blocks: int
    waiting: tuple[str, ...]
    reserved_before: int = 0  # reserved when the pass began, before it admitted anyone
    admitted_blocks: int = 0  # reserved by this iteration's admissions
    freed_blocks: int = 0  # given back by this iteration's retirements

    @property
    def streamed(self) -> int:
        """Tokens streamed in this iteration: each prefill's first token and one per request decoded."""
        return len(self.admitted) + len(self.decoded)


def replay(jobs: Sequence[Job], budget_blocks: int, block_size: int) -> list[Iteration]:
    """The scheduler's rules on plain numbers, no client leaving: admit from the head of ``waiting`` while the
    reservations fit the budget (first come, first served, ``len(prompt) + max_tokens - 1`` positions each),
    prefill each admitted prompt (its first token), one decode step for every running request, retire each
    request at its ``max_tokens``-th token. A test runs the real Scheduler on the same jobs and compares."""
    pending = sorted(jobs, key=lambda j: j.arrives)
    waiting: list[Job] = []
    running: dict[str, int] = {}  # name -> tokens so far
    reserved: dict[str, int] = {}
    by_name = {j.name: j for j in jobs}
    iterations: list[Iteration] = []
    number = 0
    while pending or waiting or running:
        number += 1
        waiting += [j for j in pending if j.arrives <= number]
        pending = [j for j in pending if j.arrives > number]
        if not waiting and not running:
            continue
        admitted, finished = [], []
        before = sum(reserved.values())
        while waiting:
            need = reservation_blocks(waiting[0].prompt, waiting[0].max_tokens, block_size)
            if need > budget_blocks:
                raise ValueError(f"{waiting[0].name} needs {need} blocks, beyond the budget of {budget_blocks}")
            if sum(reserved.values()) + need > budget_blocks:
                break
            job = waiting.pop(0)
            reserved[job.name], running[job.name] = need, 1  # the prefill streams the first token
            admitted.append(job.name)
        for name in [n for n in admitted if running[n] == by_name[n].max_tokens]:
            finished.append(name)
            del running[name]
        held = sum(reserved.values())
        decoded = tuple(running)
        for name in decoded:
            running[name] += 1
            if running[name] == by_name[name].max_tokens:
                finished.append(name)
                del running[name]
        freed = sum(reserved.pop(name) for name in finished)
        iterations.append(Iteration(number, tuple(admitted), decoded, tuple(finished), held,
                                    tuple(j.name for j in waiting), before,
                                    sum(reservation_blocks(by_name[n].prompt, by_name[n].max_tokens, block_size)
                                        for n in admitted), freed))
    return iterations


# The page's example: three requests under a 6-block budget of 4-position blocks, two more arriving later.
REPLAY_EXAMPLE = (Job("A", 1, 5, 3), Job("B", 1, 3, 6), Job("C", 1, 6, 4), Job("D", 3, 2, 2), Job("E", 4, 7, 2))
REPLAY_BUDGET, REPLAY_BLOCK = 6, 4
# The prefill stall: two streams decoding when a third request's prompt arrives.
STALL_EXAMPLE = (Job("A", 1, 4, 7), Job("B", 1, 4, 7), Job("C", 3, 12, 4))


def model_thread(iterations: Sequence[Iteration], step_s: float, prefill_s: float
                 ) -> list[tuple[str, str, float, float]]:
    """The worker thread's timeline for a replay: (kind, names, start, end) with kind 'prefill' or 'decode',
    each prefill taking ``prefill_s`` and each batched step ``step_s``, in the loop's order."""
    spans, now = [], 0.0
    for it in iterations:
        for name in it.admitted:
            spans.append(("prefill", name, now, now + prefill_s))
            now += prefill_s
        if it.decoded:
            spans.append(("decode", " ".join(it.decoded), now, now + step_s))
            now += step_s
    return spans


def token_times(spans: Sequence[tuple[str, str, float, float]]) -> dict[str, list[float]]:
    """When each request's tokens are streamed: at the end of its prefill and of every step that decoded it."""
    times: dict[str, list[float]] = {}
    for _, names, _, end in spans:
        for name in names.split():
            times.setdefault(name, []).append(end)
    return times
