"""The serving record's formulas, torch-free: one run's summaries as the server counted them, the runs a record
holds, and the scheduler's iterations replayed without a model.

Used by kv_serving.figures to derive and check a record, and by the views to word it. What the mechanism itself
computes with (the gate's tolerances and the dtype choice, the pool's sizes, the client's summary of a run) is
defined where the timed code takes it, one home each (llm_models.serving.dtypes, llm_models.serving.sizes,
kv_serving.client_stats); the figures, the views and the tests import each from there, and from here only what
is defined here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.records import JsonPath
from labkit.regimes import FLAT_BAND
from labkit.summary import MIN_PARTED, halves_below, middle_half, parted
from llm_models.cache_formats import CacheFormat, block_bytes
from llm_models.serving.sizes import reservation_blocks


# ---- the pool's sizes in a record's units (llm_models.serving.sizes has the formulas) ----------------------------------
def record_block_bytes(record: dict[str, Any], block_size: int) -> int:
    """``block_bytes`` for the record's model and layer count: block_size 1 is one token's keys and values."""
    model, layers = record["config"]["model"], record["config"]["benchmark"]["layers"]
    return block_bytes(CacheFormat(model["dtype"]), layers, block_size, model["kv_heads"], model["head_dim"])


# ---- one run, as its client saw it (kv_serving.client_stats summarises it) ---------------------------------------
# A run whose arrivals end before this share of it has passed (its arrival_share) is a burst: its requests queue
# together, whatever the rate they were drawn at, rather than arrive as a steady stream.
BURST_SHARE = 0.5


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
    """The server's own mean prefill per prompt: its time in prefills over the prompts prefilled."""
    return server["prefill_seconds"] / server["prefills"] if server["prefills"] else 0.0


def mean_prefill_call_s(server: dict[str, Any]) -> float:
    """The server's mean prefill call: prompts admitted together are packed into one call, and a running stream waits
    out the whole call, not one prompt's share of it."""
    return server["prefill_seconds"] / server["prefill_calls"] if server["prefill_calls"] else 0.0


def mean_used(run: dict[str, Any]) -> float:
    """Blocks in use, averaged over the run's /metrics samples."""
    return statistics.mean(s["used_blocks"] for s in run["occupancy"])


def waiting_share(run: dict[str, Any]) -> float:
    """The share of the run's /metrics samples that saw a request waiting in the queue."""
    return sum(s["waiting"] > 0 for s in run["occupancy"]) / len(run["occupancy"])


# ---- the in-process steps against batch size -----------------------------------------------------------------
def growth_range(smallest: Sequence[float], largest: Sequence[float]) -> tuple[float, float]:
    """How much the largest batch's step grew over the smallest's, as low and high as the middle halves of their
    timed steps allow: (its lower quartile / their upper, its upper quartile / their lower)."""
    low_s, high_s = middle_half(smallest)
    low_l, high_l = middle_half(largest)
    return low_l / high_s, high_l / low_s


def one_step_regime(growth: float, widening: float) -> str:
    return "flat" if growth <= 1 + FLAT_BAND else "shared" if growth < widening / 2 else "per-row"


def step_regime(smallest: Sequence[float], largest: Sequence[float], widening: float) -> str:
    """How a batched step grew from the smallest batch to the largest, for ``widening`` times the rows: 'flat'
    (within labkit.regimes.FLAT_BAND: a fixed cost per step), 'shared' (less than half as fast as the batch) or
    'per-row', where both ends of growth_range agree; else 'unresolved' (the run's own spread cannot say)."""
    found = {one_step_regime(growth, widening) for growth in growth_range(smallest, largest)}
    return found.pop() if len(found) == 1 else "unresolved"


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
    return block_bytes(CacheFormat(model["dtype"]), model["layers"], block_size, model["kv_heads"], model["head_dim"])


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


# ---- the scheduler's iterations, replayed without a model (llm_models.serving.scheduler.Scheduler.run) --------------
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


@dataclass(frozen=True)
class BesideDecode:
    """One context's served step (one request, the served dtype) beside the decode lab's fastest float32 step on the
    same trained model at the same thread count, each as (median, min, max) ns, and their ratio of medians."""

    threads: int
    context: int
    served: tuple[float, float, float]
    decode_mode: str
    decode: tuple[float, float, float]
    ratio: float
    parted: bool  # the two cells' min–max ranges do not overlap: only then is one called faster
    repeats: int = MIN_PARTED  # the fewer of the two cells' timed steps: below MIN_PARTED their ranges say nothing
    # The same served step timed inside the decode lab's rounds (its llama.groups[].paired.served_over_best: the
    # median of per-round ratios to that lab's best float32 mode, with their middle half) and the side of 1 that
    # middle half lies on; None in a decode record older than that measurement.
    paired: dict[str, Any] | None = None
    paired_side: str | None = None


def cpu_of(record: dict[str, Any]) -> str:
    """'AMD EPYC, 2 logical cores': the kind of machine a record was measured on, as its environment names it."""
    cpu = record["environment"]["cpu"]
    return f"{cpu['model'].strip()}, {cpu['logical_cores']} logical cores"


def beside_decode(serving: dict[str, Any], decode: dict[str, Any]) -> list[BesideDecode]:
    """Each (thread count, context) both records timed (the serving record's solo steps, the decode record's
    trained groups), the decode side being that group's fastest float32 mode. Both records with their figures
    (labkit.summary.with_figures)."""
    cells = {(c["threads"], c["context"], c["mode"]): c for c in decode["llama"]["cells"]}
    groups = {(g["threads"], g["context"]): g for g in decode["llama"]["groups"]}
    rows = []
    for step in serving["trained"]["solo_steps"]:
        group = groups.get((step["threads"], step["context"]))
        if group is None:
            continue
        best = cells[(step["threads"], step["context"], group["best_float32_mode"])]
        served = (step["median_ns"], step["min_ns"], step["max_ns"])
        fastest = (best["median_ns_per_step"], best["min_ns_per_step"], best["max_ns_per_step"])
        rows.append(BesideDecode(step["threads"], step["context"], served, group["best_float32_mode"], fastest,
                                 served[0] / fastest[0], parted(step["durations_ns"], best["durations_ns"]),
                                 min(len(step["durations_ns"]), len(best["durations_ns"])),
                                 group.get("paired", {}).get("served_over_best"),
                                 group.get("sides", {}).get("served_over_best")))
    return rows


def ranges_apart(first: tuple[float, float, float], last: tuple[float, float, float], repeats: int) -> bool:
    """Whether two cells given as (median, min, max) lie apart, every timing of one beyond every timing of the other
    (labkit.summary.parted on their extremes), with at least MIN_PARTED timings in each: only then may a page say one
    took more or less than the other."""
    return repeats >= MIN_PARTED and (first[2] < last[1] or last[2] < first[1])


def growth_over_decode(rows: Sequence[BesideDecode]) -> tuple[float, float, float] | None:
    """How much the served step and the decode lab's grew from the first context both timed to the last (ns, by
    medians), and the first over the second, over ``rows`` of one thread count; None with fewer than two contexts."""
    if len({row.threads for row in rows}) > 1:
        raise ValueError(f"growth is read at one thread count, got rows at {sorted({row.threads for row in rows})}")
    if len(rows) < 2:
        return None
    served, decode = rows[-1].served[0] - rows[0].served[0], rows[-1].decode[0] - rows[0].decode[0]
    return served, decode, served / decode if decode > 0 else math.inf


def ttft_order(first: dict[str, Any], second: dict[str, Any]) -> str | None:
    """'sooner' or 'later' where the middle halves of two runs' times to first token (their completed requests)
    do not overlap, else None: one run each, so a difference inside the runs' own spread is not one."""
    ttfts = [[r["ttft_s"] for r in run["requests"] if r["outcome"] == "completed" and r["ttft_s"] is not None]
             for run in (first, second)]
    return {True: "sooner", False: "later", None: None}[halves_below(*ttfts)]


# ---- resident memory while prompts of ever-new lengths arrive (the benchmark's memory section) ------------------
# The window's growth is called growth only beyond the larger of two bounds, its noise. NOISE_JUMPS times the largest
# move of resident memory from one prompt of the window to the next: a process that keeps nothing per length still
# moves by such a jump whenever its allocator extends or trims its heap, and growth that two such jumps would explain is
# no evidence of state kept per length. MEMORY_FLOOR_BYTES where the moves are smaller still: resident memory moves by
# whole pages (4 KiB), and 1 MB is less than a single new length kept (about 1.7 MB at one thread on the 2-core AMD
# EPYC) while oneDNN's packed kernel multiplied the long prefills, so a window of new lengths passes it at once.
NOISE_JUMPS = 2
MEMORY_FLOOR_BYTES = 1_000_000
GROWS, FLAT = "grows", "flat"


@dataclass(frozen=True)
class MemoryWindow:
    """The memory section read as the figures judge it: resident bytes after k prompts (k = 0 before the first), the
    prompts of at most ``packed_rows`` rows (the first ones), and the window: every prompt after the settling ones."""

    levels: list[int]
    packed: int
    start: int  # prompts before the window opens: the packed ones and the settling ones

    @property
    def steps(self) -> list[int]:
        """Each window prompt's move of resident memory over the prompt before it."""
        window = self.levels[self.start:]
        return [after - before for before, after in zip(window, window[1:])]

    @property
    def growth(self) -> int:
        return self.levels[-1] - self.levels[self.start]


def memory_window(section: dict[str, Any]) -> MemoryWindow:
    lengths = section["lengths"]
    packed = sum(length <= section["packed_rows"] for length in lengths)  # the first ones: check_invariants
    return MemoryWindow([section["rss_before_bytes"], *section["rss_bytes"]], packed, packed + section["settle"])


def memory_noise(largest_step: float) -> float:
    """The growth within which the window is called flat: NOISE_JUMPS x its largest move, at least MEMORY_FLOOR_BYTES."""
    return max(NOISE_JUMPS * largest_step, MEMORY_FLOOR_BYTES)


def memory_verdict(growth: float, noise: float) -> str:
    """GROWS where the window's growth exceeds its noise, else FLAT (a fall included: nothing was kept)."""
    return GROWS if growth > noise else FLAT
