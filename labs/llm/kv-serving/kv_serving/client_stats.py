"""One load run as its client saw it: counts of each outcome, tokens, duration, throughput, and the latency
percentiles, summarised by the load generator from its request rows.

Torch-free, and the one home of each: the load generator (kv_serving.loadgen) summarises every run with these,
and so do the record's figures, views and tests.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from labkit.summary import percentile

OUTCOMES = ("completed", "refused", "failed", "left")  # a request's outcome, as the load generator records it
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
LATENCIES = ("ttft_s", "e2e_s")  # per completed request in its row; the gaps between tokens are not stored


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
