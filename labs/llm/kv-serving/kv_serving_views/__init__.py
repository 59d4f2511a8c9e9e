"""The serving lab's part of the site: views of its record, the record's self-consistency, its headline.

Torch-free: everything here reads the JSON record only. Every number a view
prints, and every verdict ("within", "failed", "met"), is computed from the
record at build time.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from typing import Any

from site_hooks.chart import Series, line_chart, nice_step, style
from site_hooks.templating import lab_renderer

from .checks import best_point, check_record, policy

render = lab_renderer(__file__)

WIDTH, HEIGHT = 720, 360
MARGIN = {"left": 70, "right": 24, "top": 64, "bottom": 56}
NUMBER_WORDS = ["none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


# ---- small helpers --------------------------------------------------------------------------------------------
def seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f}"


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "n/a"


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def spelled(count: int) -> str:
    """A small count as a word, as prose writes it; larger ones as digits."""
    return NUMBER_WORDS[count] if 0 <= count < len(NUMBER_WORDS) else f"{count:,}"


def join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def mean_used(run: dict[str, Any]) -> float:
    return statistics.mean(s["used_blocks"] for s in run["occupancy"])


def mode(record: dict[str, Any], honor: bool) -> dict[str, Any]:
    return next(m for m in record["cancellation"]["modes"] if m["honor_disconnect"] is honor)


def pct(summary: dict[str, Any], name: str, q: str) -> float | None:
    return (summary[name] or {}).get(q)


def spread(summary: dict[str, Any], name: str) -> str:
    """A latency's median and 99th percentile in one cell."""
    return f"{seconds(pct(summary, name, 'p50'))} / {seconds(pct(summary, name, 'p99'))}"


def table(headings: list[str], rows: list[tuple[Any, ...]], caption: str = "", lead: str = "") -> dict[str, Any]:
    return {"headings": headings, "rows": rows, "caption": caption, "lead": lead}


def page(css: str, paragraphs: list[str], charts: list[dict[str, str]] | None = None,
         tables: list[dict[str, Any]] | None = None, notes: list[str] | None = None) -> str:
    return render("serving_table.html.j2", css=css, paragraphs=paragraphs, charts=charts or [], tables=tables or [],
                  notes=notes or [])


def short_label(run: dict[str, Any], record: dict[str, Any]) -> str:
    """A policy's name short enough for a table cell: its limit, not its derivation."""
    if run["name"] == "kv_budget_bytes":
        return f"KV bytes, {run['server']['budget_blocks']}-block budget"
    return f"count, at most {run['options'][-1]} running"


def arrival_span(run: dict[str, Any]) -> float:
    """Seconds from the first request sent to the last: how long arrivals lasted."""
    sent = [r["sent_s"] for r in run["requests"]]
    return max(sent) - min(sent)


def mean_step_s(server: dict[str, Any]) -> float:
    return server["decode_seconds"] / server["decode_steps"] if server["decode_steps"] else 0.0


def over_serial(point: dict[str, Any], record: dict[str, Any]) -> float:
    return point["summary"]["throughput_tokens_per_s"] / record["rates"]["serial"]["summary"]["throughput_tokens_per_s"]


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
def timeline(lines: list[tuple[str, list[dict[str, Any]]]], limits: list[tuple[int, str]], title: str,
             description: str) -> str:
    """Blocks in use against time, one line per run; each limit (the pool, a budget) drawn as a dashed line."""
    margin = {**MARGIN, "top": 28 + 18 * len(lines)}  # one legend row per line above the plot
    plot_w, plot_h = WIDTH - margin["left"] - margin["right"], HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    top = max(limit for limit, _ in limits)
    t_max = max(s["t_s"] for _, samples in lines for s in samples) or 1.0
    x_step, y_step = nice_step(t_max / 6), nice_step(top / 5)
    x_max, y_max = x_step * math.ceil(t_max / x_step), y_step * math.ceil(top * 1.05 / y_step)

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
                  y_ticks=[(py(v), f"{v:g}") for v in ticks(y_step, y_max)],
                  limits=[{"y": py(limit), "label": label, "dash": "3 3" if i == 0 else "8 4"}
                          for i, (limit, label) in enumerate(limits)],
                  series=series)


# ---- views ------------------------------------------------------------------------------------------------
def pool_view(record: dict[str, Any]) -> str:
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
    return page("lab-config", paragraphs)


def model_cost_view(record: dict[str, Any]) -> str:
    """What one request's decode step costs on the machine that made the record: the work a batch can share."""
    rows, config = record["step_times"], record["config"]["benchmark"]
    one = min(rows, key=lambda r: r["batch"])
    model, cpu = record["config"]["model"], record["environment"]["cpu"]
    cores = cpu["logical_cores"]
    targets = record["targets"]
    paragraphs = [
        f"The record was made on {cpu['model']} with {plural(cores, 'logical core') if cores else 'an unknown number of cores'}. "
        f"There, one decode step for "
        f"{'a single request' if one['batch'] == 1 else plural(one['batch'], 'request')} through the "
        f"{config['layers']} layers of width {model['width']} took {one['median_ns'] / 1e6:.2f} ms (median of "
        f"{len(one['durations_ns'])} steps, {one['min_ns'] / 1e6:.2f} to {one['max_ns'] / 1e6:.2f} ms), timed "
        f"in-process with {plural(config['threads'], 'torch thread')}, and the whole benchmark took "
        f"{record['wall_time_s']:.0f} s against a limit of {targets['wall_time_limit_s']:.0f} s; the step-time "
        f"table further down gives larger batches."]
    return page("lab-config", paragraphs)


def blas(record: dict[str, Any]) -> str:
    """The matrix library the record's PyTorch build names, if it names one."""
    found = re.search(r"BLAS_INFO=(\w+)", record["environment"]["torch"].get("build_config") or "")
    return found.group(1) if found else "unknown"


def step_view(record: dict[str, Any]) -> str:
    rows = record["step_times"]
    first, last = rows[0], rows[-1]
    chart = line_chart(
        [Series("one decode step (ms)", [r["batch"] for r in rows], [r["median_ns"] / 1e6 for r in rows],
                [r["min_ns"] / 1e6 for r in rows], [r["max_ns"] / 1e6 for r in rows]),
         Series("its weight multiplications alone (ms)", [r["batch"] for r in rows],
                [r["weights"]["median_ns"] / 1e6 for r in rows], [r["weights"]["min_ns"] / 1e6 for r in rows],
                [r["weights"]["max_ns"] / 1e6 for r in rows]),
         Series("per token (ms)", [r["batch"] for r in rows], [r["median_ns"] / 1e6 / r["batch"] for r in rows],
                [r["min_ns"] / 1e6 / r["batch"] for r in rows], [r["max_ns"] / 1e6 / r["batch"] for r in rows])],
        title="One batched decode step against batch size", x_label="requests in the batch", y_label="milliseconds",
        description="; ".join(f"batch {r['batch']}: {ms(r['median_ns'])} ms per step, {ms(r['weights']['median_ns'])} "
                              f"ms of weight multiplications" for r in rows))
    growth = last["median_ns"] / first["median_ns"]
    paragraphs = [
        f"A step for {last['batch']} requests took {ms(last['median_ns'])} ms (median), "
        f"{growth:.1f} times the {ms(first['median_ns'])} ms of a step for {first['batch']}, while producing "
        f"{last['batch'] / first['batch']:g} times the tokens: {last['tokens_per_s']:,.0f} against "
        f"{first['tokens_per_s']:,.0f} tokens per second, measured in-process with no HTTP in the way.",
        *step_order_sentences(record)]
    config = record["config"]["benchmark"]
    rows_out = [(r["batch"], ms(r["median_ns"]), f"{ms(r['min_ns'])} – {ms(r['max_ns'])}", ms(r["weights"]["median_ns"]),
                 ms(r["median_ns"] - r["weights"]["median_ns"]), ms(r["weights"]["median_ns"] / r["batch"]),
                 f"{r['tokens_per_s']:,.0f}") for r in rows]
    return page("lab-medians", paragraphs,
                charts=[{"svg": chart, "caption": f"Median of {config['repeats']} timed steps after "
                                                  f"{plural(config['step_warmup'], 'untimed one')}; whiskers from the "
                                                  f"fastest to the slowest."}],
                tables=[table(["Batch", "Median step (ms)", "Range (ms)", "Weights alone (ms)", "Rest of the step (ms)",
                               "Weights per request (ms)", "Tokens per second"], rows_out)],
                notes=["“Weights alone” times the step's multiplications by weight matrices (every layer's fused "
                       "projection, output projection and feed-forward network, and the output head) on a batch of "
                       "that many rows, without attention, the block gather or the cache writes. “Rest of the step” is "
                       "the median step minus that median: attention over the gathered blocks, the writes, and "
                       "Python."
                       + (" The two medians come from separate timings, so where the rest is small their difference "
                          "can fall below zero, as it does here." if any(r["median_ns"] < r["weights"]["median_ns"]
                                                                         for r in rows) else "")])


def step_order_sentences(record: dict[str, Any]) -> list[str]:
    """Where a larger batch stepped faster than a smaller one: whether that is noise, and what the weight
    multiplications alone show about it."""
    rows = sorted(record["step_times"], key=lambda r: r["batch"])
    inversions = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:] if b["median_ns"] < a["median_ns"]]
    if not inversions:
        return [f"The median step grew with the batch at every measured size, from {ms(rows[0]['median_ns'])} ms "
                f"for {rows[0]['batch']} to {ms(rows[-1]['median_ns'])} ms for {rows[-1]['batch']}."]
    slow, fast = max(inversions, key=lambda pair: pair[0]["median_ns"] - pair[1]["median_ns"])
    separate = slow["min_ns"] > fast["max_ns"]
    repeats = len(slow["durations_ns"])
    sentences = [
        f"The step time does not grow with the batch everywhere: a step for {slow['batch']} requests took "
        f"{ms(slow['median_ns'])} ms ({ms(slow['min_ns'])} to {ms(slow['max_ns'])}), longer than one for "
        f"{fast['batch']} at {ms(fast['median_ns'])} ms ({ms(fast['min_ns'])} to {ms(fast['max_ns'])}). "
        + (f"Even the fastest of the {repeats} timed steps for {slow['batch']} was slower than the slowest for "
           f"{fast['batch']}, so this is not noise between repeats." if separate else
           f"The two ranges of {repeats} timed steps overlap, so the order may be noise between repeats.")]
    one = rows[0]
    w_slow, w_fast, w_one = (r["weights"]["median_ns"] for r in (slow, fast, one))
    if w_slow > w_fast:
        per_slow, per_fast, per_one = w_slow / slow["batch"], w_fast / fast["batch"], w_one / one["batch"]
        rest = [slow["median_ns"] - w_slow, fast["median_ns"] - w_fast]
        sentences.append(
            f"The weight multiplications alone show the same inversion: {ms(w_slow)} ms for {slow['batch']} rows "
            f"against {ms(w_fast)} ms for {fast['batch']}, and {ms(w_one)} ms for {one['batch']}. Per request, they "
            f"cost {ms(per_slow)} ms at batch {slow['batch']}, against {ms(per_one)} ms at batch {one['batch']} and "
            f"{ms(per_fast)} ms at batch {fast['batch']}: with {spelled(slow['batch'])} rows the matrix library "
            f"({blas(record)}, as this PyTorch build names it, on "
            f"{plural(record['config']['benchmark']['threads'], 'thread')}) shares "
            f"{'little' if per_slow > 0.6 * per_one else 'some'} of the reading of the weights between the rows, "
            f"and with {spelled(fast['batch'])} it shares {'far ' if per_fast < 0.5 * per_slow else ''}more. It "
            f"evidently multiplies these two row counts in different ways, and the step inherits that. "
            + (f"The rest of the step (attention, the gather, the writes) took {ms(rest[0])} and {ms(rest[1])} ms at "
               f"these two sizes, so it is not the cause." if min(rest) > 0 else
               "The rest of the step (attention, the gather, the writes) is within the noise of the two timings at "
               "these sizes, so it is not the cause."))
    else:
        sentences.append(
            f"The weight multiplications alone do not show it ({ms(w_slow)} ms for {slow['batch']} rows, "
            f"{ms(w_fast)} ms for {fast['batch']}), so the difference lies in the rest of the step.")
    return sentences


def admission_view(record: dict[str, Any]) -> str:
    admission = record["admission"]
    pool = admission["pool_blocks"]
    runs_ = admission["policies"]
    budget = policy(record, "kv_budget_bytes")["server"]["budget_blocks"]
    chart = timeline([(p["label"], p["occupancy"]) for p in runs_],
                     [(pool, f"pool: {pool} blocks"), (budget, f"byte budget: {budget} blocks")],
                     "KV blocks in use under three admission policies, same workload, same pool",
                     "; ".join(f"{p['label']}: peak {p['server']['peak_used_blocks']} blocks, mean {mean_used(p):.0f}"
                               for p in runs_))
    memory, latency = [], []
    for p in runs_:
        s, server = p["summary"], p["server"]
        limit = server["budget_blocks"]
        memory.append((short_label(p, record), f"{s['completed']} / {s['failed']} / {s['refused']}",
                       f"{server['peak_used_blocks']} of {limit} ({'budget' if p['name'] == 'kv_budget_bytes' else 'pool'})",
                       f"{mean_used(p):.0f} ({share(mean_used(p), limit)})",
                       f"{s['output_tokens']:,}", f"{s['throughput_tokens_per_s']:,.0f}"))
        latency.append((short_label(p, record), f"{s['completed']} of {s['requests']} ({s['failed']} failed)",
                        *(spread(s, name) for name in ("ttft_s", "itl_s", "e2e_s"))))
    return page("lab-medians", admission_sentences(record),
                charts=[{"svg": chart, "caption": f"Sampled from /metrics every "
                         f"{record['config']['benchmark']['metrics_interval_s'] * 1000:.0f} ms by the load generator. "
                         f"The count limits have no budget of their own: the pool is their only limit."}],
                tables=[table(["Admission", "Completed / failed / refused", "Peak blocks in use (of limit)",
                               "Mean blocks in use (of limit)", "Tokens delivered", "Tokens/s"], memory,
                              caption="What each server did with the same requests"),
                        table(["Admission", "Requests measured", "Time to first token p50 / p99",
                               "Between tokens p50 / p99", "End to end p50 / p99"], latency,
                              caption="Latency of completed requests only: a request that failed has no first token "
                                      "and is in none of these percentiles")],
                notes=[completed_only_sentence(record)])


def admission_sentences(record: dict[str, Any]) -> list[str]:
    admission, config = record["admission"], record["config"]["benchmark"]
    pool, workload = admission["pool_blocks"], admission["workload"]
    by_bytes, safe, average = (policy(record, n) for n in ("kv_budget_bytes", "count_safe", "count_average"))
    first = (f"{workload['requests']} requests arrived at {workload['rate']:g} per second, prompts of "
             f"{workload['prompt_tokens'][0]} to {workload['prompt_tokens'][1]} tokens and outputs of "
             f"{workload['output_tokens'][0]} to {workload['output_tokens'][1]}: one needs "
             f"{min(admission['request_blocks'])} to {max(admission['request_blocks'])} blocks, "
             f"{admission['mean_request_blocks']:.1f} on average, and the longest the workload allows needs "
             f"{admission['longest_request_blocks']}. Every server had the same pool of {pool} blocks. The byte "
             f"server's budget was {config['byte_budget_share']:g} of it, {config['byte_budget_blocks']} blocks "
             f"({admission['kv_budget_bytes']:,} bytes), so the "
             f"{pool - config['byte_budget_blocks']} blocks above the budget were free in the allocator all along and "
             f"only the admission policy kept reservations out of them; the count limits had no budget but the pool.")
    b = by_bytes["server"]
    bytes_sentence = (
        f"Admitted by KV bytes, reservations peaked at {b['peak_used_blocks']} of the {b['budget_blocks']} budgeted "
        f"blocks ({'never above' if b['peak_used_blocks'] <= b['budget_blocks'] else 'above'} the budget, "
        f"{share(b['peak_used_blocks'], pool)} of the pool), held {mean_used(by_bytes):.0f} blocks on average "
        f"({share(mean_used(by_bytes), b['budget_blocks'])} of the budget), ran up to {b['peak_running']} requests at "
        f"once, and " + ("no request failed for memory." if b["failed_for_memory"] == 0 else
                         f"{plural(b['failed_for_memory'], 'request')} failed for memory."))
    s, sp = safe["summary"], by_bytes["summary"]
    safe_ttft, bytes_ttft = pct(s, "ttft_s", "p50"), pct(sp, "ttft_s", "p50")
    comparison = ("longer than" if safe_ttft > bytes_ttft else "no longer than") if None not in (safe_ttft, bytes_ttft) else "against"
    safe_sentence = (
        f"A count limit that is safe for the longest request ({safe['options'][-1]} running) "
        + ("never ran out of memory" if safe["server"]["failed_for_memory"] == 0 else
           f"still saw {plural(safe['server']['failed_for_memory'], 'request')} fail for memory")
        + f" but held only {mean_used(safe):.0f} blocks on average, {share(mean_used(safe), pool)} of its pool, "
        f"against {mean_used(by_bytes):.0f} by bytes with a smaller budget; its median time to first token, "
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


def completed_only_sentence(record: dict[str, Any]) -> str:
    """The latency table leaves failed requests out; say what that does to each comparison with admission by bytes."""
    by_bytes = policy(record, "kv_budget_bytes")
    b = by_bytes["summary"]
    parts = []
    for p in record["admission"]["policies"]:
        s = p["summary"]
        if p is by_bytes or s["completed"] == s["requests"]:
            continue
        parts.append(
            f"Admitted by count with at most {p['options'][-1]} running, {s['completed']} of {s['requests']} requests "
            f"completed and {s['failed']} failed. Its median time to first token, {seconds(pct(s, 'ttft_s', 'p50'))}, "
            f"and its other percentiles describe only the {s['completed']} that got in; the {s['failed']} that failed "
            f"got no token at all, which no percentile shows. Its {s['throughput_tokens_per_s']:,.0f} tokens per "
            f"second count the {s['output_tokens']:,} tokens it delivered, against {b['output_tokens']:,} by bytes "
            f"({b['completed']} of {b['requests']} completed, median time to first token "
            f"{seconds(pct(b, 'ttft_s', 'p50'))}, including each request's wait in the queue)."
            + (" Its shorter times to first token come with failed requests, so they do not compare like with like."
               if None not in (pct(s, "ttft_s", "p50"), pct(b, "ttft_s", "p50"))
               and pct(s, "ttft_s", "p50") < pct(b, "ttft_s", "p50") else ""))
    if not parts:
        return ("Every server completed every request it did not refuse, so the latency percentiles compare the same "
                "requests.")
    return " ".join(parts)


def cancellation_view(record: dict[str, Any]) -> str:
    honoured, ignored = mode(record, True), mode(record, False)
    pool = honoured["server"]["num_blocks"]
    chart = timeline([("disconnects honoured", honoured["occupancy"]), ("disconnects ignored", ignored["occupancy"])],
                     [(pool, f"pool: {pool} blocks")], "KV blocks in use while every client leaves partway",
                     f"honoured: mean {mean_used(honoured):.0f} blocks; ignored: mean {mean_used(ignored):.0f} blocks")
    work, memory = [], []
    for label, m in (("honoured", honoured), ("ignored", ignored)):
        server = m["server"]
        work.append((label, m["summary"]["left"], f"{server['tokens_generated']:,}",
                     f"{server['decode_rows_after_disconnect']:,}", f"{server['rows_dropped']:,}",
                     f"{server['tokens_after_disconnect']:,}",
                     f"{server['decode_steps_with_departed']:,} of {server['decode_steps']:,}"))
        memory.append((label, f"{server['tokens_generated'] - received(m):,}",
                       f"{server['block_seconds_after_disconnect']:.2f}", server["num_used_blocks"]))
    return page("lab-medians", cancellation_sentences(record),
                charts=[{"svg": chart, "caption": "The same workload against two servers; only the handling of "
                                                  "disconnects differs."}],
                tables=[table(["Disconnects", "Clients that left", "Tokens streamed", "Rows decoded after the server "
                               "noticed a departure", "Of those: computed, then thrown away", "Of those: sent to a "
                               "closed connection", "Decode steps holding such rows"], work,
                              caption="Decode work for clients that had gone (a row is one request's token in one "
                                      "step)"),
                        table(["Disconnects", "Tokens streamed that no client received",
                               "Block-seconds held after the server noticed", "Blocks in use once idle"], memory,
                              caption="What the departed clients cost afterwards")],
                notes=[when_counted_sentence(record)])


def received(run: dict[str, Any]) -> int:
    return sum(r["tokens"] for r in run["requests"])


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
        f"it threw away {plural(h['rows_dropped'], 'computed row')} and sent "
        f"{plural(h['tokens_after_disconnect'], 'token')} to closed connections: {bound}. It held "
        f"{held_honoured:.2f} block-seconds of cache for them after noticing.",
        f"Ignoring disconnects, the server decoded {plural(i['decode_rows_after_disconnect'], 'row')} for departed "
        f"clients, in {i['decode_steps_with_departed']:,} of its {i['decode_steps']:,} decode steps (against "
        f"{h['decode_steps']:,} steps in all when honoured), sent {plural(i['tokens_after_disconnect'], 'token')} "
        f"into connections nobody read, and held {held:.2f} block-seconds{times}, because each departed request ran "
        f"on to its max_tokens.",
        f"Once both servers were idle, {h['num_used_blocks']} and {i['num_used_blocks']} blocks were still in use: "
        + ("no block leaked either way." if h["num_used_blocks"] == i["num_used_blocks"] == 0 else "blocks leaked."),
    ]


def when_counted_sentence(record: dict[str, Any]) -> str:
    """Which moment the counts start from, and what the record says about the time before it."""
    parts, early = [], 0
    for label, m in (("honoured", mode(record, True)), ("ignored", mode(record, False))):
        s = m["server"]
        unread = s["tokens_generated"] - received(m)
        before = unread - s["tokens_after_disconnect"]
        early += before
        parts.append(f"With disconnects {label}, the server streamed {s['tokens_generated']:,} tokens and the clients "
                     f"received {received(m):,}; "
                     + ("every token it streamed was received." if unread == 0 else
                        f"of the {unread:,} nobody received, {s['tokens_after_disconnect']:,} were sent after the "
                        f"server noticed and {before:,} before."))
    return " ".join([
        "The counts of work for departed clients (rows, steps, block-seconds) start when the server noticed a "
        "departure, which is when the client's "
        "disconnect reached it and closed its response stream, not when the client closed its end: the server "
        "cannot see that earlier moment. The decode work is bounded all the same, because every computed row is "
        "either streamed or thrown away, and the clients count what they received, so the work no client used is "
        "the rows thrown away plus the tokens streamed that nobody received, whenever they were computed.",
        *parts,
        ("So no streamed token fell between a client's close and the server's noticing." if early == 0 else
         f"So {plural(early, 'token')} went out between a client's close and the server's noticing, work the "
         f"counts after noticing leave out."),
        "The block-seconds have no such check: they start when the server noticed and leave out the cache held "
        "before, which the record does not measure."])


def rates_view(record: dict[str, Any]) -> str:
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
         Series(f"one at a time, measured at {serial['rate']:g}/s only", [serial["rate"]], [serial_value],
                [serial_value], [serial_value])],
        title="Output tokens per second against arrival rate", x_label="arrivals per second (Poisson)",
        y_label="tokens per second",
        description=f"serial, measured once at {serial['rate']:g}/s: {serial_value:,.0f} tokens/s; batched: " + "; ".join(
            f"{r:g}/s: {t:,.0f} tokens/s" for r, t in zip(x, throughput)))
    pool = record["config"]["benchmark"]["sweep_blocks"]
    occupancy_chart = timeline([(f"{p['rate']:g}/s", p["occupancy"]) for p in points], [(pool, f"pool: {pool} blocks")],
                               "KV blocks in use at each arrival rate",
                               "; ".join(f"{p['rate']:g}/s: peak {p['server']['peak_used_blocks']} blocks"
                                         for p in points))
    load, latencies = [], []
    for p in [*points, serial]:
        s, server = p["summary"], p["server"]
        name = f"serial at {p['rate']:g}" if p is serial else f"{p['rate']:g}"
        load.append((name, f"{arrival_span(p):.1f} of {s['duration_s']:.1f}", s["completed"],
                     f"{server['mean_batch']:.1f}", server["peak_running"],
                     f"{server['peak_used_blocks']} of {server['num_blocks']}",
                     f"{s['throughput_tokens_per_s']:,.0f}", "1 (baseline)" if p is serial else f"{over_serial(p, record):.2f}×"))
        latencies.append((name, *(spread(s, n) for n in ("ttft_s", "itl_s", "e2e_s")), seconds(mean_step_s(server))))
    paragraphs = [burst_sentence(record), speedup_sentence(record), pool_sentence(points, pool),
                  *gap_sentences(record), in_process_sentence(record, best_point(record))]
    return page("lab-medians", paragraphs,
                charts=[{"svg": latency_chart, "caption": "Measured by the load generator, from send to each streamed token."},
                        {"svg": throughput_chart, "caption": "Output tokens of the run divided by its wall time. The "
                         f"serial server ran once, at {serial['rate']:g} arrivals per second: its point is that run."},
                        {"svg": occupancy_chart, "caption": "Each run's own /metrics samples, every "
                         f"{record['config']['benchmark']['metrics_interval_s'] * 1000:.0f} ms."}],
                tables=[table(["Rate (/s)", "Arrivals over (s of the run)", "Completed", "Mean batch", "Peak running",
                               "Peak blocks", "Tokens/s", "Over serial"], load,
                              caption="Load, batching and throughput per run"),
                        table(["Rate (/s)", "Time to first token p50 / p99", "Between tokens p50 / p99",
                               "End to end p50 / p99", "Server's mean decode step"], latencies,
                              caption="Client-side latency per run, and the server's own time per decode step")])


def burst_sentence(record: dict[str, Any]) -> str:
    """How many requests each rate sent, and whether a run was steady arrivals or a burst and then a drain."""
    rates = record["rates"]
    points = sorted(rates["points"], key=lambda p: p["rate"])
    spans = [f"{arrival_span(p):.1f} s of a {p['summary']['duration_s']:.1f} s run at {p['rate']:g}/s"
             for p in points]
    top = points[-1]
    arriving = arrival_span(top) / top["summary"]["duration_s"] if top["summary"]["duration_s"] else 1.0
    return (
        f"Each rate sent the same {rates['requests']} requests to a fresh server with a pool of "
        f"{record['config']['benchmark']['sweep_blocks']} blocks, so every row's counters and peaks are that run's "
        f"own. With so few requests, arrivals lasted {join(spans)}. "
        + (f"At {top['rate']:g}/s requests kept arriving for only {arriving:.0%} of the run: such a run is a burst "
           f"and then a drain of the queue, not a steady state at that rate, and its tokens per second say how fast "
           f"the server worked through a backlog of {rates['requests']}." if arriving < 0.5 else
           f"Even at {top['rate']:g}/s requests kept arriving for {arriving:.0%} of the run."))


def speedup_sentence(record: dict[str, Any]) -> str:
    rates, targets = record["rates"], record["targets"]
    points, serial = rates["points"], rates["serial"]
    best = best_point(record)
    ratios = [f"{over_serial(p, record):.2f}× at {p['rate']:g}/s" for p in points]
    met = [p for p in points if over_serial(p, record) >= targets["speedup_target"]]
    return (
        f"The same requests served one at a time (--max-running 1) gave "
        f"{serial['summary']['throughput_tokens_per_s']:,.0f} tokens per second; that serial run was made once, at "
        f"{serial['rate']:g} arrivals per second, and every ratio divides by it. Continuous batching delivered "
        f"{join(ratios)}. The target of {targets['speedup_target']:g}× is judged at the best rate, {best['rate']:g}/s "
        f"({rates['speedup_over_serial']:.2f}×, "
        + ("met" if targets["speedup_met"] else "not met")
        + f"); it was reached at {spelled(len(met))} of the {len(points)} rates.")


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


def gap_sentences(record: dict[str, Any]) -> list[str]:
    """What the gap between tokens did as batches grew, against the server's own step time and the serial run."""
    points = sorted(record["rates"]["points"], key=lambda p: p["rate"])
    serial = record["rates"]["serial"]
    gaps = [p["summary"]["itl_s"]["p50"] for p in points]
    batches = [p["server"]["mean_batch"] for p in points]
    steps = [mean_step_s(p["server"]) for p in points]
    falls = [(a, b) for a, b in zip(points, points[1:])
             if b["summary"]["itl_s"]["p50"] < a["summary"]["itl_s"]["p50"]
             and b["server"]["mean_batch"] > a["server"]["mean_batch"]]
    first = (f"At {rates_list(points)} arrivals per second the mean batch was "
             f"{join([f'{b:.1f}' for b in batches])} requests per step, and the median gap between tokens "
             f"{join([seconds(g) for g in gaps])}. ")
    if falls:
        a, b = falls[0]
        first += (f"The gap did not grow with the batch at every rate: from {a['rate']:g} to {b['rate']:g}/s it fell "
                  f"from {seconds(a['summary']['itl_s']['p50'])} to {seconds(b['summary']['itl_s']['p50'])} while the "
                  f"mean batch grew from {a['server']['mean_batch']:.1f} to {b['server']['mean_batch']:.1f}. ")
    same_order = sorted(range(len(points)), key=gaps.__getitem__) == sorted(range(len(points)), key=steps.__getitem__)
    first += (f"The server's own mean decode step (its time in decode steps over their number) was "
              f"{join([seconds(s) for s in steps])}, "
              + ("in the same order as the gaps: where the gap was longer, so were the server's own steps. A step's "
                 "cost depends on more than the mean batch (the gather, for one, grows with the longest cache in the "
                 "batch), and the record does not break steps down further."
                 if same_order else
                 "not in the same order as the gaps, so part of the gaps lies outside the decode steps (prefills and "
                 "the event loop's own work); the record does not break this down further."))
    low = points[0]
    nearest = min(record["step_times"], key=lambda r: abs(math.log(r["batch"] / max(low["server"]["mean_batch"], 1))))
    alone = min(record["step_times"], key=lambda r: r["batch"])
    second = (
        f"Even at {low['rate']:g}/s a token came more slowly than alone: the median gap was "
        f"{seconds(low['summary']['itl_s']['p50'])}, against {seconds(serial['summary']['itl_s']['p50'])} for the "
        f"serial server, whose every step decodes one request. The mean batch there was still "
        f"{low['server']['mean_batch']:.1f}, and in-process a step for {nearest['batch']} requests takes "
        f"{ms(nearest['median_ns'])} ms against {ms(alone['median_ns'])} for {alone['batch']}."
        if low["summary"]["itl_s"]["p50"] > serial["summary"]["itl_s"]["p50"] else
        f"At {low['rate']:g}/s the median gap, {seconds(low['summary']['itl_s']['p50'])}, was no longer than the "
        f"serial server's {seconds(serial['summary']['itl_s']['p50'])}.")
    prefill = [p["server"]["prefill_seconds"] / p["server"]["prefills"] for p in points if p["server"]["prefills"]]
    tails = [p["summary"]["itl_s"]["p99"] for p in points]
    third = (f"A prefill runs between two decode steps and stalls every running stream meanwhile. The mean prefill "
             f"of each run took {seconds(min(prefill))} to {seconds(max(prefill))}, so a gap that spans a few of them "
             f"can last a few times that; the p99 gaps were {seconds(min(tails))} to {seconds(max(tails))}."
             if prefill else "")
    return [first, second, *([third] if third else [])]


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


def targets_view(record: dict[str, Any]) -> str:
    t = record["targets"]
    by_bytes = policy(record, "kv_budget_bytes")
    b = by_bytes["server"]
    config = record["config"]["benchmark"]
    honoured, ignored = mode(record, True)["server"], mode(record, False)["server"]
    points = record["rates"]["points"]
    best = best_point(record)
    others = [f"{over_serial(p, record):.2f}× at {p['rate']:g}/s" for p in points if p is not best]
    verdict = lambda ok: "met" if ok else "not met"  # noqa: E731
    rows = [
        (f"Byte admission: reserved blocks never exceed the budget ({b['budget_blocks']} blocks, "
         f"{config['byte_budget_share']:g} of the {b['num_blocks']}-block pool)",
         f"{verdict(t['bytes_peak_within_budget'])}: peak {b['peak_used_blocks']} of {b['budget_blocks']} blocks"),
        ("Byte admission: no request fails for memory",
         f"{verdict(t['bytes_failed_for_memory'] == 0)}: {t['bytes_failed_for_memory']} of "
         f"{by_bytes['summary']['requests']} failed"),
        ("Zero blocks leaked after the cancellation experiment",
         f"{verdict(t['blocks_leaked_after_cancellation'] == 0)}: {honoured['num_used_blocks']} blocks in use once "
         f"idle with disconnects honoured, {ignored['num_used_blocks']} with them ignored"),
        (f"Batched throughput at least {t['speedup_target']:g}× serial, at the best of the {len(points)} arrival rates",
         f"{verdict(t['speedup_met'])}: {t['speedup_over_serial']:.2f}× at {best['rate']:g}/s"
         + (f" (other rates: {join(others)})" if others else "")),
        (f"The benchmark finishes within {t['wall_time_limit_s']:.0f} s (timed inside it, from building the model "
         f"to the last server's stop; starting Python and writing the record are not included)",
         f"{verdict(t['wall_time_met'])} ({t['wall_time_s']:.0f} s)"),
    ]
    return page("lab-findings", [], tables=[table(["Target", "Result"], rows)])


VIEWS: dict[str, Callable[[dict[str, Any]], str]] = {
    "pool": pool_view,
    "model-cost": model_cost_view,
    "steps": step_view,
    "admission": admission_view,
    "cancellation": cancellation_view,
    "rates": rates_view,
    "targets": targets_view,
}

__all__ = ["VIEWS", "check_record", "headline", "policy"]
