"""Every figure of the serving record that follows from its raw data (``derive``).

Torch-free: the benchmark fills its record with ``derive`` (labkit.harness.run), the site build checks
the stored figures against it (labkit.figures.check) after ``check_invariants`` (invariants.py), and the
views read the stored figures. A figure is derived only from raw data: durations, request rows, the
servers' own counters and the config; the formulas are formulas.py's.
"""

from __future__ import annotations

import statistics
from typing import Any

from labkit.figures import Figures, JsonPath
from labkit.summary import as_number, percentile

from .formulas import blocks_for, budget_blocks, client_summary, mean_batch, policy, record_block_bytes, runs


# ---- derive ---------------------------------------------------------------------------------------------------
def config_figures(record: dict[str, Any], figures: Figures) -> None:
    config = record["config"]["benchmark"]
    path = ("config", "benchmark")
    block = record_block_bytes(record, config["block_size"])
    figures.add((*path, "kv_bytes_per_token"), record_block_bytes(record, 1),
                "2 x layers x Hkv x D x bytes from the record's config")
    figures.add((*path, "block_bytes"), block, "the bytes per token x block_size")
    figures.add((*path, "pool_bytes"), config["num_blocks"] * block, "num_blocks x block_bytes")
    figures.add((*path, "byte_budget_blocks"), budget_blocks(config["num_blocks"], config["byte_budget_share"]),
                "num_blocks x byte_budget_share, rounded down")


def step_figures(record: dict[str, Any], figures: Figures) -> None:
    """Each batch size's step and weights-alone statistics from their durations, and its tokens per second."""
    for index, row in enumerate(record["step_times"]):
        for path, timings in ((("step_times", index), row), (("step_times", index, "weights"), row["weights"])):
            durations = timings["durations_ns"]
            for name, value in (("median_ns", percentile(durations, 0.5)), ("min_ns", min(durations)),
                                ("max_ns", max(durations))):
                figures.add((*path, name), as_number(value), "its raw durations")
        figures.add(("step_times", index, "tokens_per_s"), row["batch"] / (percentile(row["durations_ns"], 0.5) / 1e9),
                    "batch / its median step")


def run_figures(path: JsonPath, run: dict[str, Any], figures: Figures) -> dict[str, Any]:
    """One run's client summary from its request rows, and its server's mean batch; returns the summary."""
    summary = client_summary(run["requests"])
    for name, value in summary.items():
        if isinstance(value, dict):
            for key, number in value.items():
                figures.add((*path, "summary", name, key), number, "client_summary of its completed requests")
        else:
            figures.add((*path, "summary", name), value, "client_summary of its request rows")
    figures.add((*path, "server", "mean_batch"), mean_batch(run["server"]), "decode_rows / decode_steps")
    return summary


def admission_figures(record: dict[str, Any], figures: Figures) -> None:
    admission, config = record["admission"], record["config"]["benchmark"]
    workload = admission["workload"]
    longest = workload["prompt_tokens"][1] + workload["output_tokens"][1] - 1
    figures.add(("admission", "longest_request_blocks"), blocks_for(longest, config["block_size"]),
                "the workload's longest prompt + output - 1 positions, in blocks")
    figures.add(("admission", "mean_request_blocks"), statistics.mean(admission["request_blocks"]),
                "the mean of request_blocks")
    figures.add(("admission", "kv_budget_bytes"),
                budget_blocks(config["num_blocks"], config["byte_budget_share"]) * record_block_bytes(record, config["block_size"]),
                "byte_budget_blocks x block_bytes")


def target_figures(record: dict[str, Any], summaries: dict[JsonPath, dict[str, Any]], figures: Figures) -> None:
    """The best rate, the speedup over serial there and the targets' verdicts, from the raw measurements."""
    points = record["rates"]["points"]
    throughput = [summaries[("rates", "points", i)]["throughput_tokens_per_s"] for i in range(len(points))]
    best = max(range(len(points)), key=throughput.__getitem__)
    speedup = throughput[best] / summaries[("rates", "serial")]["throughput_tokens_per_s"]
    targets = record["targets"]
    by_bytes = policy(record, "kv_budget_bytes")["server"]
    figures.add(("rates", "best_rate"), points[best]["rate"], "the rate of highest throughput")
    figures.add(("rates", "speedup_over_serial"), speedup, "the best rate's throughput over serial")
    figures.add(("targets", "speedup_over_serial"), speedup, "the best rate's throughput over serial")
    figures.add(("targets", "wall_time_s"), record["wall_time_s"], "$.wall_time_s")
    figures.add(("targets", "bytes_peak_within_budget"), by_bytes["peak_used_blocks"] <= by_bytes["budget_blocks"],
                "the byte server's peak against its budget")
    figures.add(("targets", "bytes_failed_for_memory"), by_bytes["failed_for_memory"],
                "the byte server's failed_for_memory")
    figures.add(("targets", "blocks_leaked_after_cancellation"),
                max(m["server"]["num_used_blocks"] for m in record["cancellation"]["modes"]),
                "the cancellation servers' blocks in use once idle")
    figures.add(("targets", "speedup_met"), speedup >= targets["speedup_target"], "the speedup against its target")
    figures.add(("targets", "wall_time_met"), record["wall_time_s"] <= targets["wall_time_limit_s"],
                "the wall time against its limit")


def derive(record: dict[str, Any]) -> Figures:
    """Every derivable figure, each computed from raw data only (durations, request rows, server counters)."""
    figures = Figures()
    config_figures(record, figures)
    step_figures(record, figures)
    summaries = {path: run_figures(path, run, figures) for path, run in runs(record)}
    admission_figures(record, figures)
    target_figures(record, summaries, figures)
    figures.add(("equivalence", "tokens_identical"), not record["equivalence"]["ties"],
                "no step where alone chose another token (equivalence.ties)")
    return figures
