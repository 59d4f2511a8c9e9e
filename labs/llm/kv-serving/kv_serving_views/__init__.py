"""The serving lab's part of the site: views of its record, the record's self-consistency, its headline.

Torch-free: everything here reads the JSON record only. Every number a view
prints, and every verdict ("within", "failed", "met"), is computed from the
record at build time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from labkit.records import RecordError
from site_hooks.chart import Series, line_chart, nice_step, style
from site_hooks.orchestrate import Evidence
from site_hooks.templating import lab_renderer

render = lab_renderer(__file__)

WIDTH, HEIGHT = 720, 360
MARGIN = {"left": 70, "right": 24, "top": 64, "bottom": 56}
REL = 1e-9  # recomputed figures must match the stored ones to float rounding


# ---- small helpers --------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks: the load generator's own definition."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "n/a"


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def mean_used(run: dict[str, Any]) -> float:
    return statistics.mean(s["used_blocks"] for s in run["occupancy"])


def runs(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every load run in the record, with its JSON path."""
    found = [(f"$.admission.policies[{i}]", p) for i, p in enumerate(record["admission"]["policies"])]
    found += [(f"$.cancellation.modes[{i}]", m) for i, m in enumerate(record["cancellation"]["modes"])]
    found += [(f"$.rates.points[{i}]", p) for i, p in enumerate(record["rates"]["points"])]
    return [*found, ("$.rates.serial", record["rates"]["serial"])]


def policy(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in record["admission"]["policies"] if p["name"] == name)


def mode(record: dict[str, Any], honor: bool) -> dict[str, Any]:
    return next(m for m in record["cancellation"]["modes"] if m["honor_disconnect"] is honor)


def best_point(record: dict[str, Any]) -> dict[str, Any]:
    return max(record["rates"]["points"], key=lambda p: p["summary"]["throughput_tokens_per_s"])


# ---- check_record: recompute every derivable figure -------------------------------------------------------
def check_record(record: dict[str, Any], source: str) -> None:
    def fail(path: str, message: str) -> None:
        raise RecordError(f"{source}: field {path} {message}")

    def same(path: str, stored: float, computed: float) -> None:
        if not math.isclose(stored, computed, rel_tol=REL, abs_tol=1e-12):
            fail(path, f"is {stored}, but the record's own data give {computed}")

    model, config = record["config"]["model"], record["config"]["benchmark"]
    per_token = 2 * config["layers"] * model["kv_heads"] * model["head_dim"] * model["bytes_per_element"]
    same("$.config.benchmark.kv_bytes_per_token", config["kv_bytes_per_token"], per_token)
    same("$.config.benchmark.block_bytes", config["block_bytes"], per_token * config["block_size"])
    same("$.config.benchmark.pool_bytes", config["pool_bytes"], config["num_blocks"] * config["block_bytes"])
    tolerance, gate = record["tolerance"], record["equivalence"]
    if gate["max_abs_diff"] > tolerance["atol"] + tolerance["rtol"] * gate["max_abs_reference"]:
        fail("$.equivalence.max_abs_diff", f"= {gate['max_abs_diff']} exceeds atol + rtol x max |reference|")
    for i, row in enumerate(record["step_times"]):
        path = f"$.step_times[{i}]"
        same(f"{path}.median_ns", row["median_ns"], statistics.median(row["durations_ns"]))
        same(f"{path}.min_ns", row["min_ns"], min(row["durations_ns"]))
        same(f"{path}.max_ns", row["max_ns"], max(row["durations_ns"]))
        same(f"{path}.tokens_per_s", row["tokens_per_s"], row["batch"] / (row["median_ns"] / 1e9))
    for path, run in runs(record):
        check_run(run, path, same, fail)
    check_admission(record, same, fail)
    check_targets(record, same, fail)


def check_run(run: dict[str, Any], path: str, same: Callable[..., None], fail: Callable[..., None]) -> None:
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
    for name, values in (("ttft_s", [r["ttft_s"] for r in done if r["ttft_s"] is not None]),
                         ("e2e_s", [r["e2e_s"] for r in done if r["e2e_s"] is not None])):
        stored = summary[name]
        if (stored is None) != (not values):
            fail(f"{path}.summary.{name}", f"does not match the {len(values)} completed requests' latencies")
        if values:
            for q in (50, 90, 99):
                same(f"{path}.summary.{name}.p{q}", stored[f"p{q}"], percentile(values, q))
            same(f"{path}.summary.{name}.count", stored["count"], len(values))
    gaps = sum(r["tokens"] - 1 for r in done if r["tokens"] > 0)
    if (summary["itl_s"] or {"count": 0})["count"] != gaps:
        fail(f"{path}.summary.itl_s.count", f"should be {gaps}: one gap per token after the first, completed requests")
    server = run["server"]
    if not server["peak_used_blocks"] <= server["num_blocks"]:
        fail(f"{path}.server.peak_used_blocks", f"= {server['peak_used_blocks']} exceeds the pool's {server['num_blocks']}")
    if server["decode_rows"] < server["decode_steps"]:
        fail(f"{path}.server.decode_rows", "is below decode_steps: every step decodes at least one request")
    for i, sample in enumerate(run.get("occupancy", [])):
        if sample["used_blocks"] > server["num_blocks"]:
            fail(f"{path}.occupancy[{i}].used_blocks", f"= {sample['used_blocks']} exceeds the pool")


def check_admission(record: dict[str, Any], same: Callable[..., None], fail: Callable[..., None]) -> None:
    admission, config = record["admission"], record["config"]["benchmark"]
    size = config["block_size"]
    workload = admission["workload"]
    longest = -(-(workload["prompt_tokens"][1] + workload["output_tokens"][1] - 1) // size)
    same("$.admission.longest_request_blocks", admission["longest_request_blocks"], longest)
    same("$.admission.mean_request_blocks", admission["mean_request_blocks"], statistics.mean(admission["request_blocks"]))
    same("$.admission.kv_budget_bytes", admission["kv_budget_bytes"], admission["pool_blocks"] * config["block_bytes"])
    for i, run in enumerate(admission["policies"]):
        need = [-(-(r["prompt_tokens"] + r["max_tokens"] - 1) // size) for r in sorted(run["requests"], key=lambda r: r["index"])]
        if need != admission["request_blocks"]:
            fail(f"$.admission.policies[{i}].requests", "are not the workload whose block needs the record lists")
    by_bytes = policy(record, "kv_budget_bytes")["server"]
    same("$.admission.policies[kv_budget_bytes].server.budget_blocks", by_bytes["budget_blocks"],
         admission["kv_budget_bytes"] // config["block_bytes"])


def check_targets(record: dict[str, Any], same: Callable[..., None], fail: Callable[..., None]) -> None:
    targets, rates = record["targets"], record["rates"]
    by_bytes = policy(record, "kv_budget_bytes")["server"]
    best = best_point(record)
    same("$.rates.best_rate", rates["best_rate"], best["rate"])
    speedup = best["summary"]["throughput_tokens_per_s"] / rates["serial"]["summary"]["throughput_tokens_per_s"]
    same("$.rates.speedup_over_serial", rates["speedup_over_serial"], speedup)
    same("$.targets.speedup_over_serial", targets["speedup_over_serial"], speedup)
    expected = {
        "bytes_peak_within_budget": by_bytes["peak_used_blocks"] <= by_bytes["budget_blocks"],
        "bytes_failed_for_memory": by_bytes["failed_for_memory"],
        "blocks_leaked_after_cancellation": max(m["server"]["num_used_blocks"] for m in record["cancellation"]["modes"]),
        "speedup_met": speedup >= targets["speedup_target"],
    }
    for key, value in expected.items():
        if targets[key] != value:
            fail(f"$.targets.{key}", f"is {targets[key]}, but the measurements give {value}")


# ---- headline ---------------------------------------------------------------------------------------------
def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    steps = record["step_times"]
    return [
        ("batched throughput at the best arrival rate over serial", record["rates"]["speedup_over_serial"]),
        (f"decode tokens/s, batch {steps[-1]['batch']} over batch {steps[0]['batch']}",
         steps[-1]["tokens_per_s"] / steps[0]["tokens_per_s"]),
        ("mean pool occupancy, byte admission over the safe count limit",
         mean_used(policy(record, "kv_budget_bytes")) / mean_used(policy(record, "count_safe"))),
    ]


# ---- charts -----------------------------------------------------------------------------------------------
def timeline(lines: list[tuple[str, list[dict[str, Any]]]], limit: int, limit_label: str, title: str,
             description: str) -> str:
    """Blocks in use against time, one line per run, the pool drawn as a dashed limit."""
    margin = {**MARGIN, "top": 28 + 18 * len(lines)}  # one legend row per line above the plot
    plot_w, plot_h = WIDTH - margin["left"] - margin["right"], HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    t_max = max(s["t_s"] for _, samples in lines for s in samples) or 1.0
    x_step, y_step = nice_step(t_max / 6), nice_step(limit / 5)
    x_max, y_max = x_step * math.ceil(t_max / x_step), y_step * math.ceil(limit * 1.05 / y_step)

    def px(t: float) -> float:
        return round(margin["left"] + plot_w * t / x_max, 1)

    def py(v: float) -> float:
        return round(margin["top"] + plot_h * (1 - v / y_max), 1)

    series = []
    for i, (label, samples) in enumerate(lines):
        points = []
        for before, after in zip(samples, samples[1:] + samples[-1:]):  # steps: a value holds until the next sample
            points += [(px(before["t_s"]), py(before["used_blocks"])), (px(after["t_s"]), py(before["used_blocks"]))]
        series.append({"label": label, "style": style(i), "points": points})
    ticks = lambda step, top: [step * k for k in range(int(round(top / step)) + 1)]  # noqa: E731
    return render("timeline.svg.j2", width=WIDTH, height=margin["top"] + plot_h + margin["bottom"], margin=margin,
                  plot_w=plot_w, plot_h=plot_h, title=title, description=description, x_label="seconds since the first request",
                  y_label="KV blocks in use", x_ticks=[(px(t), f"{t:g}") for t in ticks(x_step, x_max)],
                  y_ticks=[(py(v), f"{v:g}") for v in ticks(y_step, y_max)], limit_y=py(limit),
                  limit_label=limit_label, series=series)


# ---- views ------------------------------------------------------------------------------------------------
def pool_view(evidence: Evidence) -> str:
    record = evidence.record
    model, config = record["config"]["model"], record["config"]["benchmark"]
    paragraphs = [
        f"One token's keys and values take 2 × {config['layers']} layers × {model['kv_heads']} key/value heads × "
        f"{model['head_dim']} features × {model['bytes_per_element']} bytes = {config['kv_bytes_per_token']:,} bytes, "
        f"so a block of {config['block_size']} positions is {config['block_bytes']:,} bytes and the pool of "
        f"{config['num_blocks']} blocks is {config['pool_bytes']:,} bytes ({config['pool_bytes'] / 2**20:.2f} MiB).",
    ]
    gate = record["equivalence"]
    paragraphs.append(
        f"Before any load, prompts of {', '.join(map(str, gate['prompt_lengths']))} tokens were decoded for "
        f"{gate['steps']} greedy steps, all together in one batch and then each alone: the tokens were identical and "
        f"the logits differed by at most {gate['max_abs_diff']:.2e}, within atol = {record['tolerance']['atol']:g}, "
        f"rtol = {record['tolerance']['rtol']:g}.")
    return render("serving_table.html.j2", css="lab-config", paragraphs=paragraphs, charts=[], headings=[], rows=[],
                  notes=[])


def step_view(evidence: Evidence) -> str:
    rows = evidence.record["step_times"]
    first, last = rows[0], rows[-1]
    chart = line_chart(
        [Series("one decode step (ms)", [r["batch"] for r in rows], [r["median_ns"] / 1e6 for r in rows],
                [r["min_ns"] / 1e6 for r in rows], [r["max_ns"] / 1e6 for r in rows]),
         Series("per token (ms)", [r["batch"] for r in rows], [r["median_ns"] / 1e6 / r["batch"] for r in rows],
                [r["min_ns"] / 1e6 / r["batch"] for r in rows], [r["max_ns"] / 1e6 / r["batch"] for r in rows])],
        title="One batched decode step against batch size", x_label="requests in the batch", y_label="milliseconds",
        description="; ".join(f"batch {r['batch']}: {r['median_ns'] / 1e6:.2f} ms per step" for r in rows))
    growth = (last["median_ns"] / first["median_ns"])
    paragraphs = [
        f"A step for {last['batch']} requests took {last['median_ns'] / 1e6:.2f} ms (median), "
        f"{growth:.1f} times the {first['median_ns'] / 1e6:.2f} ms of a step for {first['batch']}, while producing "
        f"{last['batch'] // first['batch']} times the tokens: {last['tokens_per_s']:,.0f} against "
        f"{first['tokens_per_s']:,.0f} tokens per second, measured in-process with no HTTP in the way."]
    table = [(r["batch"], f"{r['median_ns'] / 1e6:.2f}", f"{r['min_ns'] / 1e6:.2f} – {r['max_ns'] / 1e6:.2f}",
              f"{r['tokens_per_s']:,.0f}") for r in rows]
    return render("serving_table.html.j2", css="lab-medians", paragraphs=paragraphs,
                  charts=[{"svg": chart, "caption": "Median of the timed steps; whiskers from the fastest to the slowest."}],
                  headings=["Batch", "Median step (ms)", "Range (ms)", "Tokens per second"], rows=table, notes=[])


def admission_view(evidence: Evidence) -> str:
    record = evidence.record
    admission = record["admission"]
    pool = admission["pool_blocks"]
    runs_ = admission["policies"]
    chart = timeline([(p["label"], p["occupancy"]) for p in runs_], pool, f"pool: {pool} blocks",
                     "KV blocks in use under three admission policies, same workload, same pool",
                     "; ".join(f"{p['label']}: peak {p['server']['peak_used_blocks']} blocks, mean {mean_used(p):.0f}"
                               for p in runs_))
    table = []
    for p in runs_:
        s = p["summary"]
        table.append((p["label"], s["completed"], s["failed"], s["refused"], f"{p['server']['peak_used_blocks']} of {pool}",
                      share(mean_used(p), pool), seconds((s["ttft_s"] or {}).get("p50")),
                      seconds((s["ttft_s"] or {}).get("p99")), seconds((s["e2e_s"] or {}).get("p50")),
                      seconds((s["e2e_s"] or {}).get("p99")), f"{s['throughput_tokens_per_s']:,.0f}"))
    return render("serving_table.html.j2", css="lab-medians", paragraphs=admission_sentences(record),
                  charts=[{"svg": chart, "caption": f"Sampled from /metrics every "
                           f"{record['config']['benchmark']['metrics_interval_s'] * 1000:.0f} ms by the load generator."}],
                  headings=["Admission", "Completed", "Failed", "Refused", "Peak blocks", "Mean occupancy",
                            "TTFT p50", "TTFT p99", "End-to-end p50", "End-to-end p99", "Tokens/s"],
                  rows=table, notes=[])


def admission_sentences(record: dict[str, Any]) -> list[str]:
    admission = record["admission"]
    pool, workload = admission["pool_blocks"], admission["workload"]
    by_bytes, safe, average = (policy(record, n) for n in ("kv_budget_bytes", "count_safe", "count_average"))
    first = (f"{workload['requests']} requests arrived at {workload['rate']:g} per second, prompts of "
             f"{workload['prompt_tokens'][0]} to {workload['prompt_tokens'][1]} tokens and outputs of "
             f"{workload['output_tokens'][0]} to {workload['output_tokens'][1]}: one needs "
             f"{min(admission['request_blocks'])} to {max(admission['request_blocks'])} blocks, "
             f"{admission['mean_request_blocks']:.1f} on average, and the longest the workload allows needs "
             f"{admission['longest_request_blocks']}.")
    b = by_bytes["server"]
    bytes_sentence = (
        f"Admitted by KV bytes, the pool peaked at {b['peak_used_blocks']} of its {b['budget_blocks']} budgeted blocks "
        f"({'never above' if b['peak_used_blocks'] <= b['budget_blocks'] else 'above'} the budget), held "
        f"{share(mean_used(by_bytes), pool)} of them on average, ran up to {b['peak_running']} requests at once, and "
        + ("no request failed for memory." if b["failed_for_memory"] == 0 else
           f"{plural(b['failed_for_memory'], 'request')} failed for memory."))
    s, sp = safe["summary"], by_bytes["summary"]
    safe_ttft, bytes_ttft = (s["ttft_s"] or {}).get("p50"), (sp["ttft_s"] or {}).get("p50")
    comparison = ("longer than" if safe_ttft > bytes_ttft else "no longer than") if None not in (safe_ttft, bytes_ttft) else "against"
    safe_sentence = (
        f"A count limit that is safe for the longest request ({safe['options'][-1]} running) "
        + ("never ran out of memory" if safe["server"]["failed_for_memory"] == 0 else
           f"still saw {plural(safe['server']['failed_for_memory'], 'request')} fail for memory")
        + f" but left {share(pool - mean_used(safe), pool)} of the pool empty on average, against "
        f"{share(pool - mean_used(by_bytes), pool)} by bytes; its median time to first token, "
        f"{seconds(safe_ttft)}, was {comparison} the {seconds(bytes_ttft)} of admission by bytes.")
    a = average["server"]
    average_sentence = (
        f"A count limit sized for the mean request ({average['options'][-1]} running) admitted whenever a slot was "
        f"free, whatever the request's length: "
        + (f"{plural(a['failed_for_memory'], 'request')} of {average['summary']['requests']} found the pool without "
           f"their blocks and failed (reserve-at-admission turns over-commitment into failures at admission, "
           f"before any token is computed)." if a["failed_for_memory"] else
           "this time the pool happened to have the blocks for every admitted request, so nothing failed."))
    return [first, bytes_sentence, safe_sentence, average_sentence]


def cancellation_view(evidence: Evidence) -> str:
    record = evidence.record
    honoured, ignored = mode(record, True), mode(record, False)
    pool = honoured["server"]["num_blocks"]
    chart = timeline([("disconnects honoured", honoured["occupancy"]), ("disconnects ignored", ignored["occupancy"])],
                     pool, f"pool: {pool} blocks", "KV blocks in use while every client leaves partway",
                     f"honoured: mean {mean_used(honoured):.0f} blocks; ignored: mean {mean_used(ignored):.0f} blocks")
    rows = []
    for label, m in (("honoured", honoured), ("ignored", ignored)):
        server = m["server"]
        rows.append((label, m["summary"]["left"], f"{server['tokens_generated']:,}", f"{server['tokens_after_disconnect']:,}",
                     f"{server['decode_steps']:,}", f"{server['block_seconds_after_disconnect']:.2f}",
                     server["num_used_blocks"]))
    h, i = honoured["server"], ignored["server"]
    workload = record["cancellation"]["workload"]
    held, held_honoured = i["block_seconds_after_disconnect"], h["block_seconds_after_disconnect"]
    times = f", {held / held_honoured:.0f} times as many" if held_honoured > 0 else ""
    paragraphs = [
        f"{workload['requests']} clients each disconnected after a random number of tokens. With disconnects "
        f"honoured, the server decoded {h['tokens_after_disconnect']:,} tokens for clients that had left and held "
        f"{h['block_seconds_after_disconnect']:.2f} block-seconds of cache for them; ignoring disconnects, it decoded "
        f"{i['tokens_after_disconnect']:,} such tokens in {i['decode_steps']:,} decode steps (against "
        f"{h['decode_steps']:,}) and held {i['block_seconds_after_disconnect']:.2f} block-seconds{times}, because "
        f"each departed request ran on to its max_tokens.",
        f"Once both servers were idle, {h['num_used_blocks']} and {i['num_used_blocks']} blocks were still in use: "
        + ("no block leaked either way." if h["num_used_blocks"] == i["num_used_blocks"] == 0 else "blocks leaked."),
    ]
    return render("serving_table.html.j2", css="lab-medians", paragraphs=paragraphs,
                  charts=[{"svg": chart, "caption": "The same workload against two servers; only the handling of "
                                                    "disconnects differs."}],
                  headings=["Disconnects", "Clients that left", "Tokens decoded", "…after the client left",
                            "Decode steps", "Block-seconds after leaving", "Blocks in use when idle"],
                  rows=rows, notes=[])


def rates_view(evidence: Evidence) -> str:
    record = evidence.record
    rates = record["rates"]
    points, serial = rates["points"], rates["serial"]
    x = [p["rate"] for p in points]

    def latency(name: str, label: str) -> Series:
        values = [p["summary"][name] for p in points]
        return Series(label, x, [v["p50"] * 1000 for v in values], [v["p50"] * 1000 for v in values],
                      [v["p99"] * 1000 for v in values])

    latency_chart = line_chart([latency("ttft_s", "time to first token"), latency("itl_s", "between tokens"),
                                latency("e2e_s", "end to end")],
                               title="Client-side latency against arrival rate (median, whisker to p99)",
                               x_label="arrivals per second (Poisson)", y_label="milliseconds",
                               description="; ".join(f"{p['rate']:g}/s: TTFT p50 {seconds(p['summary']['ttft_s']['p50'])}"
                                                     for p in points))
    throughput = [p["summary"]["throughput_tokens_per_s"] for p in points]
    serial_value = serial["summary"]["throughput_tokens_per_s"]
    throughput_chart = line_chart(
        [Series("continuous batching", x, throughput, throughput, throughput),
         Series("one request at a time", x, [serial_value] * len(x), [serial_value] * len(x), [serial_value] * len(x))],
        title="Output tokens per second against arrival rate", x_label="arrivals per second (Poisson)",
        y_label="tokens per second", description=f"serial: {serial_value:,.0f} tokens/s; " + "; ".join(
            f"{r:g}/s: {t:,.0f} tokens/s" for r, t in zip(x, throughput)))
    table = []
    for p in [*points, serial]:
        s, server = p["summary"], p["server"]
        batch = server["decode_rows"] / server["decode_steps"] if server["decode_steps"] else 0.0
        table.append(("serial" if p is serial else f"{p['rate']:g}", s["completed"], f"{batch:.1f}",
                      f"{s['throughput_tokens_per_s']:,.0f}",
                      seconds(s["ttft_s"]["p50"]), seconds(s["ttft_s"]["p99"]), seconds(s["itl_s"]["p50"]),
                      seconds(s["itl_s"]["p99"]), seconds(s["e2e_s"]["p50"]), seconds(s["e2e_s"]["p99"])))
    targets = record["targets"]
    best = best_point(record)
    paragraphs = [
        f"Each rate sent the same {rates['requests']} requests to a server with a pool of "
        f"{record['config']['benchmark']['sweep_blocks']} blocks. Throughput peaked at "
        f"{best['summary']['throughput_tokens_per_s']:,.0f} tokens per second at {best['rate']:g} arrivals per second; "
        f"the same requests served one at a time (--max-running 1) gave {serial_value:,.0f}, so continuous batching "
        f"delivered {rates['speedup_over_serial']:.2f} times the serial throughput, "
        + ("meeting" if targets["speedup_met"] else "short of") + f" the target of {targets['speedup_target']:g}×.",
    ]
    return render("serving_table.html.j2", css="lab-medians", paragraphs=paragraphs,
                  charts=[{"svg": latency_chart, "caption": "Measured by the load generator, from send to each streamed token."},
                          {"svg": throughput_chart, "caption": "Output tokens of the run divided by its wall time."}],
                  headings=["Rate (/s)", "Completed", "Mean batch", "Tokens/s", "TTFT p50", "TTFT p99", "Between tokens p50",
                            "Between tokens p99", "End-to-end p50", "End-to-end p99"], rows=table, notes=[])


def targets_view(evidence: Evidence) -> str:
    record = evidence.record
    t = record["targets"]
    rows = [
        ("Byte admission: the pool never exceeds its budget", "met" if t["bytes_peak_within_budget"] else "not met"),
        ("Byte admission: no request fails for memory",
         "met" if t["bytes_failed_for_memory"] == 0 else f"not met ({t['bytes_failed_for_memory']} failed)"),
        ("Zero blocks leaked after the cancellation experiment",
         "met" if t["blocks_leaked_after_cancellation"] == 0 else f"not met ({t['blocks_leaked_after_cancellation']} leaked)"),
        (f"Batched throughput at least {t['speedup_target']:g}× serial",
         f"{'met' if t['speedup_met'] else 'not met'} ({t['speedup_over_serial']:.2f}×)"),
        ("Benchmark wall time", f"{record['wall_time_s']:.0f} s"),
    ]
    return render("serving_table.html.j2", css="lab-findings", paragraphs=[], charts=[], headings=["Target", "Result"],
                  rows=rows, notes=[])


VIEWS: dict[str, Callable[[Evidence], str]] = {
    "pool": pool_view,
    "steps": step_view,
    "admission": admission_view,
    "cancellation": cancellation_view,
    "rates": rates_view,
    "targets": targets_view,
}
