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

from site_hooks.chart import Series, line_chart, nice_step, style
from site_hooks.orchestrate import Evidence
from site_hooks.templating import lab_renderer

from .checks import best_point, check_record, policy

render = lab_renderer(__file__)

WIDTH, HEIGHT = 720, 360
MARGIN = {"left": 70, "right": 24, "top": 64, "bottom": 56}


# ---- small helpers --------------------------------------------------------------------------------------------
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


def mode(record: dict[str, Any], honor: bool) -> dict[str, Any]:
    return next(m for m in record["cancellation"]["modes"] if m["honor_disconnect"] is honor)


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
        f"{gate['steps']} greedy steps, all together in one batch and then each alone: the tokens "
        f"{'were identical' if gate['tokens_identical'] else 'differed'} and the logits differed by at most "
        f"{gate['max_abs_diff']:.2e}, {'within' if gate['within_tolerance'] else 'beyond'} atol = "
        f"{record['tolerance']['atol']:g}, rtol = {record['tolerance']['rtol']:g}.")
    return render("serving_table.html.j2", css="lab-config", paragraphs=paragraphs, charts=[], headings=[], rows=[],
                  notes=[])


def model_cost_view(evidence: Evidence) -> str:
    """What one request's decode step costs on the machine that made the record: the work a batch can share."""
    record = evidence.record
    rows, config = record["step_times"], record["config"]["benchmark"]
    one = min(rows, key=lambda r: r["batch"])
    model = record["config"]["model"]
    paragraphs = [
        f"On the machine that made this record, one decode step for "
        f"{'a single request' if one['batch'] == 1 else plural(one['batch'], 'request')} through the "
        f"{config['layers']} layers of width {model['width']} took {one['median_ns'] / 1e6:.2f} ms (median of "
        f"{len(one['durations_ns'])} steps, {one['min_ns'] / 1e6:.2f} to {one['max_ns'] / 1e6:.2f} ms), timed "
        f"in-process with {plural(config['threads'], 'torch thread')}; the step-time table further down gives "
        f"larger batches."]
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
        rows.append((label, m["summary"]["left"], f"{server['tokens_generated']:,}",
                     f"{server['decode_rows_after_disconnect']:,}", f"{server['rows_dropped']:,}",
                     f"{server['tokens_after_disconnect']:,}",
                     f"{server['decode_steps_with_departed']:,} of {server['decode_steps']:,}",
                     f"{server['block_seconds_after_disconnect']:.2f}", server["num_used_blocks"]))
    return render("serving_table.html.j2", css="lab-medians", paragraphs=cancellation_sentences(record),
                  charts=[{"svg": chart, "caption": "The same workload against two servers; only the handling of "
                                                    "disconnects differs."}],
                  headings=["Disconnects", "Clients that left", "Tokens streamed", "Decode rows for departed clients",
                            "…dropped", "…streamed to closed connections", "Decode steps with such rows",
                            "Block-seconds after the server noticed", "Blocks in use when idle"],
                  rows=rows, notes=[
                      "A row is one request's token in one step. It counts as computed for a departed client when the "
                      "server had noticed the disconnect (its response stream was closed) by the time the step "
                      "returned; block-seconds are likewise counted from that moment, not from the client's own "
                      "close, which the server cannot see."])


def cancellation_sentences(record: dict[str, Any]) -> list[str]:
    honoured, ignored = mode(record, True), mode(record, False)
    h, i = honoured["server"], ignored["server"]
    workload = record["cancellation"]["workload"]
    per_request = (f"{h['decode_rows_after_disconnect'] / h['cancelled']:.2f} per cancelled request"
                   if h["cancelled"] else "with no request cancelled")
    bound = ("no more rows than cancelled requests, as the scheduler drops at most the row of the step already "
             "under way for each (a scheduler test checks this per request)" if h["rows_dropped"] <= h["cancelled"]
             else "more rows than cancelled requests")
    prefills = (f", and {plural(h['prefills_after_disconnect'], 'prefill')} whose client left while it ran"
                if h["prefills_after_disconnect"] else "")
    held, held_honoured = i["block_seconds_after_disconnect"], h["block_seconds_after_disconnect"]
    times = f", {held / held_honoured:.0f} times as many" if held_honoured > 0 else ""
    return [
        f"{workload['requests']} clients each disconnected after a random number of tokens. With disconnects "
        f"honoured, the server cancelled {plural(h['cancelled'], 'request')}. It still decoded "
        f"{plural(h['decode_rows_after_disconnect'], 'row')} for departed clients ({per_request}) in "
        f"{plural(h['decode_steps_with_departed'], 'step')} that were already under way when it noticed{prefills}; "
        f"it dropped {plural(h['rows_dropped'], 'computed row')} and streamed "
        f"{plural(h['tokens_after_disconnect'], 'token')} to departed clients: {bound}. It held "
        f"{held_honoured:.2f} block-seconds of cache for them after noticing.",
        f"Ignoring disconnects, the server decoded {plural(i['decode_rows_after_disconnect'], 'row')} for departed "
        f"clients, in {i['decode_steps_with_departed']:,} of its {i['decode_steps']:,} decode steps (against "
        f"{h['decode_steps']:,} steps in all when honoured), streamed {plural(i['tokens_after_disconnect'], 'token')} "
        f"into connections nobody read, and held {held:.2f} block-seconds{times}, because each departed request ran "
        f"on to its max_tokens.",
        f"Once both servers were idle, {h['num_used_blocks']} and {i['num_used_blocks']} blocks were still in use: "
        + ("no block leaked either way." if h["num_used_blocks"] == i["num_used_blocks"] == 0 else "blocks leaked."),
    ]


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
    pool = record["config"]["benchmark"]["sweep_blocks"]
    occupancy_chart = timeline([(f"{p['rate']:g}/s", p["occupancy"]) for p in points], pool, f"pool: {pool} blocks",
                               "KV blocks in use at each arrival rate",
                               "; ".join(f"{p['rate']:g}/s: peak {p['server']['peak_used_blocks']} blocks"
                                         for p in points))
    table = []
    for p in [*points, serial]:
        s, server = p["summary"], p["server"]
        table.append(("serial" if p is serial else f"{p['rate']:g}", s["completed"], f"{server['mean_batch']:.1f}",
                      server["peak_running"], f"{server['peak_used_blocks']} of {server['num_blocks']}",
                      f"{s['throughput_tokens_per_s']:,.0f}",
                      seconds(s["ttft_s"]["p50"]), seconds(s["ttft_s"]["p99"]), seconds(s["itl_s"]["p50"]),
                      seconds(s["itl_s"]["p99"]), seconds(s["e2e_s"]["p50"]), seconds(s["e2e_s"]["p99"])))
    targets = record["targets"]
    best = best_point(record)
    paragraphs = [
        f"Each rate sent the same {rates['requests']} requests to a fresh server with a pool of {pool} blocks, so every "
        f"row's counters and peaks are that run's own. Throughput peaked at "
        f"{best['summary']['throughput_tokens_per_s']:,.0f} tokens per second at {best['rate']:g} arrivals per second; "
        f"the same requests served one at a time (--max-running 1) gave {serial_value:,.0f}, so continuous batching "
        f"delivered {rates['speedup_over_serial']:.2f} times the serial throughput, "
        + ("meeting" if targets["speedup_met"] else "short of") + f" the target of {targets['speedup_target']:g}×.",
        pool_sentence(points, pool),
        in_process_sentence(record, best),
    ]
    return render("serving_table.html.j2", css="lab-medians", paragraphs=paragraphs,
                  charts=[{"svg": latency_chart, "caption": "Measured by the load generator, from send to each streamed token."},
                          {"svg": throughput_chart, "caption": "Output tokens of the run divided by its wall time."},
                          {"svg": occupancy_chart, "caption": "Each run's own /metrics samples, every "
                           f"{record['config']['benchmark']['metrics_interval_s'] * 1000:.0f} ms."}],
                  headings=["Rate (/s)", "Completed", "Mean batch", "Peak running", "Peak blocks", "Tokens/s",
                            "TTFT p50", "TTFT p99", "Between tokens p50", "Between tokens p99", "End-to-end p50",
                            "End-to-end p99"], rows=table, notes=[])


def join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def rates_list(points: list[dict[str, Any]]) -> str:
    return join([f"{p['rate']:g}" for p in points])


def pool_sentence(points: list[dict[str, Any]], pool: int) -> str:
    """At which rates every block was reserved at some moment, and what that means for the batch."""
    full = [p for p in points if p["server"]["peak_used_blocks"] == pool]
    below = [p for p in points if p["server"]["peak_used_blocks"] < pool]
    parts = []
    if full:
        queued = join([share(sum(s["waiting"] > 0 for s in p["occupancy"]), len(p["occupancy"])) for p in full])
        parts.append(
            f"At {rates_list(full)} arrivals per second every one of the {pool} blocks was reserved at some moment "
            f"(peak {pool} of {pool}): there, at least at times, the pool and not the arrivals capped how many requests "
            f"ran together (at most {join([str(p['server']['peak_running']) for p in full])}{' respectively' if len(full) > 1 else ''}), and "
            f"admission by bytes held the rest in the queue (requests were waiting in {queued} of the /metrics "
            f"samples{' respectively' if len(full) > 1 else ''}), which the time to first token includes.")
    if below:
        parts.append(f"At {rates_list(below)} per second the pool never filled (peaks of "
                     f"{join([str(p['server']['peak_used_blocks']) for p in below])} blocks).")
    return " ".join(parts)


def in_process_sentence(record: dict[str, Any], point: dict[str, Any]) -> str:
    """Why in-process batches of many requests decode faster than the server did at its best rate."""
    steps = record["step_times"]
    widest = max(steps, key=lambda r: r["batch"])
    server, summary = point["server"], point["summary"]
    batch = server["mean_batch"]
    nearest = min(steps, key=lambda r: abs(math.log(r["batch"] / batch)) if batch > 0 else r["batch"])
    duration = summary["duration_s"]
    busy = server["decode_seconds"] + server["prefill_seconds"]
    decode_rate = server["decode_rows"] / server["decode_seconds"] if server["decode_seconds"] > 0 else 0.0
    rest = duration - busy
    idle = (f"the other {rest:.1f} s ({share(rest, duration)}) its model thread computed nothing: it waited for "
            f"arrivals and for the event loop's own work between steps (HTTP, streaming each token as a server-sent "
            f"event, scheduling)" if rest > 0 else "its model thread was busy for the whole run")
    faster = widest["tokens_per_s"] > summary["throughput_tokens_per_s"]
    smaller = batch < widest["batch"]
    return (
        f"In-process, a batch of {widest['batch']} decodes {widest['tokens_per_s']:,.0f} tokens per second, "
        f"{'more' if faster else 'no more'} than the {summary['throughput_tokens_per_s']:,.0f} the server delivered at "
        f"{point['rate']:g} arrivals per second. The server's batches were {'smaller' if smaller else 'no smaller'}: "
        f"{batch:.1f} requests per decode step on average (at most {server['peak_running']}), and in-process a batch "
        f"of {nearest['batch']} gives "
        f"{nearest['tokens_per_s']:,.0f} tokens per second. Of the run's {duration:.1f} s, the server spent "
        f"{server['decode_seconds']:.1f} s in {server['decode_steps']:,} decode steps ({decode_rate:,.0f} rows per "
        f"second of decoding) and {server['prefill_seconds']:.1f} s in {server['prefills']:,} prefills, during which "
        f"no running request advanced; {idle}.")


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
        (f"The benchmark finishes within {t['wall_time_limit_s']:.0f} s (timed inside it, from building the model "
         f"to the last server's stop; starting Python and writing the record are not included)",
         f"{'met' if t['wall_time_met'] else 'not met'} ({t['wall_time_s']:.0f} s)"),
    ]
    return render("serving_table.html.j2", css="lab-findings", paragraphs=[], charts=[], headings=["Target", "Result"],
                  rows=rows, notes=[])


VIEWS: dict[str, Callable[[Evidence], str]] = {
    "pool": pool_view,
    "model-cost": model_cost_view,
    "steps": step_view,
    "admission": admission_view,
    "cancellation": cancellation_view,
    "rates": rates_view,
    "targets": targets_view,
}

__all__ = ["VIEWS", "check_record", "headline"]
