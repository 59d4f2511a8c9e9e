"""The serving record's formulas, torch-free: the pool's sizes, one run's summaries, the runs a record holds.

One definition each, used by the benchmark and the load generator to write a record, by kv_serving.figures
to derive and check it, and by the views to word it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from typing import Any

from kv_cache.memory import kv_cache_bytes
from labkit.figures import JsonPath
from labkit.summary import percentile

OUTCOMES = ("completed", "refused", "failed", "left")  # a request's outcome, as the load generator records it
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
# The equivalence gate's tolerance per dtype the model runs in. float32: the first lab's (kv_cache.equivalence).
# bfloat16 keeps 8 significant bits (a unit in the last place is 2^-7 of a value's magnitude, 0.0078 at 1 to 2):
# batched and alone, a row's matrix products may round once differently, so one such unit is allowed, not more.
TOLERANCES = {"float32": {"atol": 1e-5, "rtol": 1e-5}, "bfloat16": {"atol": 1e-2, "rtol": 1e-2}}
DTYPES = tuple(TOLERANCES)
LATENCIES = ("ttft_s", "e2e_s")  # per completed request in its row; the gaps between tokens are not stored


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


def mean_used(run: dict[str, Any]) -> float:
    """Blocks in use, averaged over the run's /metrics samples."""
    return statistics.mean(s["used_blocks"] for s in run["occupancy"])


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


def policy(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in record["admission"]["policies"] if p["name"] == name)


def mode(record: dict[str, Any], honor: bool) -> dict[str, Any]:
    return next(m for m in record["cancellation"]["modes"] if m["honor_disconnect"] is honor)


def best_point(record: dict[str, Any]) -> dict[str, Any]:
    """The sweep's point of highest throughput, at which the speedup target is judged."""
    return max(record["rates"]["points"], key=lambda p: p["summary"]["throughput_tokens_per_s"])


def over_serial(point: dict[str, Any], serial: dict[str, Any]) -> float:
    """A run's throughput over the serial server's: continuous batching's speedup."""
    return point["summary"]["throughput_tokens_per_s"] / serial["summary"]["throughput_tokens_per_s"]
