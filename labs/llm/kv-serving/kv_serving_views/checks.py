"""check_record: every figure of the serving record that the rest of the record determines is recomputed.

A hand-edited number (a counter, a peak, a percentile, a verdict) that the
record's own raw data contradict is refused with the field's JSON path.
Where a figure cannot be recomputed exactly (a peak between two /metrics
samples, a percentile of gaps the record does not store), the bounds the
raw data impose are checked instead.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from labkit.records import RecordError

REL = 1e-9  # recomputed figures must match the stored ones to float rounding
SLACK_S = 1e-6  # latencies are sums of perf_counter differences: allow their rounding
MEMORY_FAILURE = "out of KV memory"  # how the scheduler words a failure for memory (scheduler._admit)

Fail = Callable[[str, str], None]
Same = Callable[[str, float, float], None]


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks: the load generator's own definition."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def runs(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every load run in the record, with its JSON path."""
    found = [(f"$.admission.policies[{i}]", p) for i, p in enumerate(record["admission"]["policies"])]
    found += [(f"$.cancellation.modes[{i}]", m) for i, m in enumerate(record["cancellation"]["modes"])]
    found += [(f"$.rates.points[{i}]", p) for i, p in enumerate(record["rates"]["points"])]
    return [*found, ("$.rates.serial", record["rates"]["serial"])]


def policy(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in record["admission"]["policies"] if p["name"] == name)


def best_point(record: dict[str, Any]) -> dict[str, Any]:
    return max(record["rates"]["points"], key=lambda p: p["summary"]["throughput_tokens_per_s"])


def check_record(record: dict[str, Any], source: str) -> None:
    def fail(path: str, message: str) -> None:
        raise RecordError(f"{source}: field {path} {message}")

    def same(path: str, stored: float, computed: float) -> None:
        if not math.isclose(stored, computed, rel_tol=REL, abs_tol=1e-12):
            fail(path, f"is {stored}, but the record's own data give {computed}")

    check_config_and_gate(record, same, fail)
    for path, run in runs(record):
        check_run(run, path, same, fail)
    check_pools(record, fail)
    check_admission(record, same, fail)
    check_cancellation(record, fail)
    serial = record["rates"]["serial"]["server"]
    highest = max(p["rate"] for p in record["rates"]["points"])
    if record["rates"]["serial"]["rate"] != highest:
        fail("$.rates.serial.rate", f"is {record['rates']['serial']['rate']}, but the serial run is made at the "
                                    f"sweep's highest rate, {highest}")
    if serial["peak_running"] > 1:
        fail("$.rates.serial.server.peak_running", f"is {serial['peak_running']}, but the serial server admits one "
                                                   f"request at a time (--max-running 1)")
    check_targets(record, same, fail)


def check_config_and_gate(record: dict[str, Any], same: Same, fail: Fail) -> None:
    model, config = record["config"]["model"], record["config"]["benchmark"]
    per_token = 2 * config["layers"] * model["kv_heads"] * model["head_dim"] * model["bytes_per_element"]
    same("$.config.benchmark.kv_bytes_per_token", config["kv_bytes_per_token"], per_token)
    same("$.config.benchmark.block_bytes", config["block_bytes"], per_token * config["block_size"])
    same("$.config.benchmark.pool_bytes", config["pool_bytes"], config["num_blocks"] * config["block_bytes"])
    # the byte budget is a share of the pool below 1, rounded down exactly as the benchmark does
    same("$.config.benchmark.byte_budget_blocks", config["byte_budget_blocks"],
         int(config["num_blocks"] * config["byte_budget_share"]))
    if not config["byte_budget_blocks"] < config["num_blocks"]:
        fail("$.config.benchmark.byte_budget_blocks", f"= {config['byte_budget_blocks']} is not below the pool's "
                                                      f"{config['num_blocks']} blocks: the allocator alone would keep "
                                                      f"reservations within such a budget")
    tolerance, gate = record["tolerance"], record["equivalence"]
    for flag in ("tokens_identical", "within_tolerance"):
        if gate[flag] is not True:
            fail(f"$.equivalence.{flag}", f"is {gate[flag]!r}: a run whose equivalence gate failed measures nothing")
    if gate["max_abs_diff"] > tolerance["atol"] + tolerance["rtol"] * gate["max_abs_reference"]:
        fail("$.equivalence.max_abs_diff", f"= {gate['max_abs_diff']} exceeds atol + rtol x max |reference|")
    def timings(path: str, entry: dict[str, Any]) -> None:
        """A timed entry's repetition count and its min, median and max, recomputed from its durations."""
        if len(entry["durations_ns"]) != config["repeats"]:
            fail(f"{path}.durations_ns", f"holds {len(entry['durations_ns'])} timings, config says repeats = "
                                         f"{config['repeats']}")
        same(f"{path}.median_ns", entry["median_ns"], statistics.median(entry["durations_ns"]))
        same(f"{path}.min_ns", entry["min_ns"], min(entry["durations_ns"]))
        same(f"{path}.max_ns", entry["max_ns"], max(entry["durations_ns"]))

    for i, row in enumerate(record["step_times"]):
        path = f"$.step_times[{i}]"
        timings(path, row)
        same(f"{path}.tokens_per_s", row["tokens_per_s"], row["batch"] / (row["median_ns"] / 1e9))
        timings(f"{path}.weights", row["weights"])


def check_pools(record: dict[str, Any], fail: Fail) -> None:
    """Every server reports the pool the config says it was started with."""
    config = record["config"]["benchmark"]
    if record["admission"]["pool_blocks"] != config["num_blocks"]:
        fail("$.admission.pool_blocks", f"is {record['admission']['pool_blocks']}, but "
                                        f"$.config.benchmark.num_blocks is {config['num_blocks']}")
    for path, run in runs(record):
        key = "sweep_blocks" if path.startswith("$.rates") else "num_blocks"
        if run["server"]["num_blocks"] != config[key]:
            fail(f"{path}.server.num_blocks", f"is {run['server']['num_blocks']}, but the server was started with "
                                              f"$.config.benchmark.{key} = {config[key]}")


def check_run(run: dict[str, Any], path: str, same: Same, fail: Fail) -> None:
    check_client_side(run, path, same, fail)
    check_server_side(run, path, same, fail)


def check_client_side(run: dict[str, Any], path: str, same: Same, fail: Fail) -> None:
    summary, requests = run["summary"], run["requests"]
    counts = {outcome: sum(r["outcome"] == outcome for r in requests)
              for outcome in ("completed", "refused", "failed", "left")}
    for outcome, count in counts.items():
        same(f"{path}.summary.{outcome}", summary[outcome], count)
    same(f"{path}.summary.requests", summary["requests"], len(requests))
    same(f"{path}.summary.output_tokens", summary["output_tokens"], sum(r["tokens"] for r in requests))
    ends = [r["sent_s"] + r["e2e_s"] for r in requests if r["e2e_s"] is not None]
    first = min(r["sent_s"] for r in requests)
    duration = max(ends, default=first) - first
    same(f"{path}.summary.duration_s", summary["duration_s"], duration)
    if duration > 0:
        same(f"{path}.summary.throughput_tokens_per_s", summary["throughput_tokens_per_s"],
             summary["output_tokens"] / duration)
    done = [r for r in requests if r["outcome"] == "completed"]
    for i, r in enumerate(requests):
        if r["outcome"] == "completed" and r["tokens"] != r["max_tokens"]:
            fail(f"{path}.requests[{i}].tokens", f"is {r['tokens']}, but a completed request runs to its "
                                                 f"max_tokens {r['max_tokens']}")
        if r["ttft_s"] is not None and r["e2e_s"] is not None and r["ttft_s"] > r["e2e_s"] + SLACK_S:
            fail(f"{path}.requests[{i}].ttft_s", f"= {r['ttft_s']} is after the request's end ({r['e2e_s']})")
    for name, values in (("ttft_s", [r["ttft_s"] for r in done if r["ttft_s"] is not None]),
                         ("e2e_s", [r["e2e_s"] for r in done if r["e2e_s"] is not None])):
        stored = summary[name]
        if (stored is None) != (not values):
            fail(f"{path}.summary.{name}", f"does not match the {len(values)} completed requests' latencies")
        if values:
            for q in (50, 90, 99):
                same(f"{path}.summary.{name}.p{q}", stored[f"p{q}"], percentile(values, q))
            same(f"{path}.summary.{name}.count", stored["count"], len(values))
            same(f"{path}.summary.{name}.mean", stored["mean"], statistics.mean(values))
    check_gaps(summary["itl_s"], done, f"{path}.summary.itl_s", fail)


def check_gaps(itl: dict[str, float] | None, done: list[dict[str, Any]], path: str, fail: Fail) -> None:
    """The gaps themselves are not stored (thousands per run); what the requests' rows imply about them is checked:
    their number, the order of the percentiles, and their sum, which cannot exceed the time from each completed
    request's first token to its end."""
    gaps = sum(r["tokens"] - 1 for r in done if r["tokens"] > 0)
    if (itl or {"count": 0})["count"] != gaps:
        fail(f"{path}.count", f"should be {gaps}: one gap per token after the first, completed requests")
    if itl is None:
        return
    if not itl["p50"] <= itl["p90"] <= itl["p99"]:
        fail(f"{path}.p90", f"percentiles out of order: p50 {itl['p50']}, p90 {itl['p90']}, p99 {itl['p99']}")
    span = sum(r["e2e_s"] - r["ttft_s"] for r in done if r["ttft_s"] is not None and r["e2e_s"] is not None)
    if itl["mean"] * itl["count"] > span + SLACK_S * max(1, len(done)):
        fail(f"{path}.mean", f"= {itl['mean']} makes the {itl['count']} gaps sum to {itl['mean'] * itl['count']:.6g} s, "
                             f"more than the {span:.6g} s between the completed requests' first tokens and ends")
    if itl["count"] > 1 and itl["p50"] > 2 * itl["mean"] + SLACK_S:  # at least half the gaps are >= p50
        fail(f"{path}.p50", f"= {itl['p50']} is more than twice the mean {itl['mean']}: half the gaps cannot "
                            f"exceed it")


def check_server_side(run: dict[str, Any], path: str, same: Same, fail: Fail) -> None:
    server, requests, summary = run["server"], run["requests"], run["summary"]
    p = f"{path}.server"
    if not server["peak_used_blocks"] <= server["num_blocks"]:
        fail(f"{p}.peak_used_blocks", f"= {server['peak_used_blocks']} exceeds the pool's {server['num_blocks']}")
    if not server["budget_blocks"] <= server["num_blocks"]:
        fail(f"{p}.budget_blocks", f"= {server['budget_blocks']} exceeds the pool's {server['num_blocks']}")
    samples = run["occupancy"]
    for i, (before, after) in enumerate(zip(samples, samples[1:])):
        if after["t_s"] < before["t_s"]:
            fail(f"{path}.occupancy[{i + 1}].t_s", f"= {after['t_s']} is before the previous sample ({before['t_s']})")
    for field, peak in (("used_blocks", "peak_used_blocks"), ("running", "peak_running")):
        highest = max(s[field] for s in samples)
        if highest > server[peak]:
            fail(f"{p}.{peak}", f"is {server[peak]}, but a /metrics sample of this run saw {highest}")
    budgets = {s["budget_blocks"] for s in samples}
    if budgets != {server["budget_blocks"]}:
        fail(f"{path}.occupancy", f"samples report budgets {sorted(budgets)}, the server {server['budget_blocks']}")
    steps, rows = server["decode_steps"], server["decode_rows"]
    received = sum(r["tokens"] for r in requests)
    memory = sum(r["outcome"] == "failed" and MEMORY_FAILURE in (r["error"] or "") for r in requests)
    same(f"{p}.failed_for_memory", server["failed_for_memory"], memory)
    if summary["left"] == 0 and summary["failed"] == memory:
        # nobody left and no connection failed: the server's counts are exactly what the clients saw
        same(f"{p}.tokens_generated", server["tokens_generated"], received)
        same(f"{p}.completed", server["completed"], summary["completed"])
        same(f"{p}.prefills", server["prefills"], sum(r["tokens"] > 0 for r in requests))
        same(f"{p}.decode_rows", rows, sum(r["tokens"] - 1 for r in requests if r["tokens"] > 0))
        if server["cancelled"] or server["decode_rows_after_disconnect"] or server["tokens_after_disconnect"]:
            fail(f"{p}.cancelled", "or another count of work for departed clients is not 0 in a run where no "
                                   "client left")
    same(f"{p}.mean_batch", server["mean_batch"], rows / steps if steps else 0.0)
    if rows < steps:
        fail(f"{p}.decode_rows", f"= {rows} is below decode_steps {steps}: every step decodes at least one request")
    if rows > steps * server["peak_running"]:
        fail(f"{p}.decode_rows", f"= {rows} exceeds {steps} steps x the {server['peak_running']} requests that "
                                 f"ever ran at once")
    longest = max((r["tokens"] - 1 for r in requests), default=0)
    if steps < longest:
        fail(f"{p}.decode_steps", f"= {steps}, but a client received {longest + 1} tokens, one per step after the first")
    # every computed row is either streamed or dropped; rows for departed clients are streamed only if ignored
    same(f"{p}.rows_dropped", server["rows_dropped"], rows + server["prefills"] - server["tokens_generated"])
    same(f"{p}.tokens_after_disconnect", server["tokens_after_disconnect"],
         server["decode_rows_after_disconnect"] + server["prefills_after_disconnect"] - server["rows_dropped"])
    departed = server["decode_rows_after_disconnect"]
    if not min(departed, 1) <= server["decode_steps_with_departed"] <= min(departed, steps):
        fail(f"{p}.decode_steps_with_departed", f"= {server['decode_steps_with_departed']} is impossible with "
                                                f"{departed} such rows in {steps} steps")
    streamed = server["tokens_generated"] - server["tokens_after_disconnect"]  # to clients still there
    if received > streamed:
        fail(f"{p}.tokens_generated", f"= {server['tokens_generated']} minus {server['tokens_after_disconnect']} "
                                      f"streamed after disconnects is less than the {received} tokens clients received")


def check_cancellation(record: dict[str, Any], fail: Fail) -> None:
    for i, run in enumerate(record["cancellation"]["modes"]):
        s, p = run["server"], f"$.cancellation.modes[{i}].server"
        if run["honor_disconnect"]:
            if s["tokens_after_disconnect"]:
                fail(f"{p}.tokens_after_disconnect", f"= {s['tokens_after_disconnect']}, but an honoured disconnect "
                                                     f"drops every row computed after it")
            if s["rows_dropped"] > s["cancelled"]:
                fail(f"{p}.rows_dropped", f"= {s['rows_dropped']} exceeds the {s['cancelled']} cancelled requests: "
                                          f"at most the step under way is lost for each")
        elif s["rows_dropped"] or s["cancelled"]:
            fail(f"{p}.rows_dropped", "is not 0 (or cancelled is not), but this server ignores disconnects")


def check_admission(record: dict[str, Any], same: Same, fail: Fail) -> None:
    admission, config = record["admission"], record["config"]["benchmark"]
    size = config["block_size"]
    workload = admission["workload"]
    longest = -(-(workload["prompt_tokens"][1] + workload["output_tokens"][1] - 1) // size)
    same("$.admission.longest_request_blocks", admission["longest_request_blocks"], longest)
    same("$.admission.mean_request_blocks", admission["mean_request_blocks"], statistics.mean(admission["request_blocks"]))
    same("$.admission.kv_budget_bytes", admission["kv_budget_bytes"], config["byte_budget_blocks"] * config["block_bytes"])
    for i, run in enumerate(admission["policies"]):
        need = [-(-(r["prompt_tokens"] + r["max_tokens"] - 1) // size) for r in sorted(run["requests"], key=lambda r: r["index"])]
        if need != admission["request_blocks"]:
            fail(f"$.admission.policies[{i}].requests", "are not the workload whose block needs the record lists")
    for i, run in enumerate(admission["policies"]):
        # the byte server reports its budget; a count server has none and reports its whole pool
        expected = config["byte_budget_blocks"] if run["name"] == "kv_budget_bytes" else config["num_blocks"]
        same(f"$.admission.policies[{i}].server.budget_blocks", run["server"]["budget_blocks"], expected)


def check_targets(record: dict[str, Any], same: Same, fail: Fail) -> None:
    targets, rates = record["targets"], record["rates"]
    by_bytes = policy(record, "kv_budget_bytes")["server"]
    best = best_point(record)
    same("$.rates.best_rate", rates["best_rate"], best["rate"])
    speedup = best["summary"]["throughput_tokens_per_s"] / rates["serial"]["summary"]["throughput_tokens_per_s"]
    same("$.rates.speedup_over_serial", rates["speedup_over_serial"], speedup)
    same("$.targets.speedup_over_serial", targets["speedup_over_serial"], speedup)
    same("$.targets.wall_time_s", targets["wall_time_s"], record["wall_time_s"])
    expected = {
        "bytes_peak_within_budget": by_bytes["peak_used_blocks"] <= by_bytes["budget_blocks"],
        "bytes_failed_for_memory": by_bytes["failed_for_memory"],
        "blocks_leaked_after_cancellation": max(m["server"]["num_used_blocks"] for m in record["cancellation"]["modes"]),
        "speedup_met": speedup >= targets["speedup_target"],
        "wall_time_met": record["wall_time_s"] <= targets["wall_time_limit_s"],
    }
    for key, value in expected.items():
        if targets[key] != value:
            fail(f"$.targets.{key}", f"is {targets[key]}, but the measurements give {value}")
