""""Latency and throughput against arrival rate": the sweep, the serial run, and why the gaps moved."""

from __future__ import annotations

from typing import Any

from kv_serving.figures import formulas
from kv_serving.figures.formulas import best_point
from site_hooks.blocks import Block, Chart, Table
from site_hooks.chart import Series, line_chart
from site_hooks.formatting import format_latency, format_ms, format_percent, join

from .common import blocks_timeline, percent, spread

BUSY = 0.9  # a model thread computing for at least this share of a run: the model's work is the limit
IDLE = 0.5  # computing for less than this share: the limit lies outside the model (overhead, arrivals)


def server_regime(point: dict[str, Any]) -> str:
    """What limited a run, from the share of its wall time its model thread spent in decode steps and prefills."""
    share = point["busy_share"]
    if share >= BUSY:
        return f"its model thread computed for {format_percent(share)} of the run, so the model's work, not HTTP, was the limit"
    if share < IDLE:
        return (f"its model thread computed for only {format_percent(share)} of the run: overhead-bound, the rest went "
                f"to waiting, HTTP and scheduling")
    return f"its model thread computed for {format_percent(share)} of the run"


def rates_view(record: dict[str, Any]) -> Block:
    """The sweep of arrival rates and the serial run: latency, throughput, occupancy, and why they moved."""
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
                               description="; ".join(f"{p['rate']:g}/s: TTFT p50 {format_latency(p['summary']['ttft_s']['p50'])}"
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
    occupancy_chart = blocks_timeline([(f"{p['rate']:g}/s", p) for p in points], [(pool, f"pool: {pool} blocks")],
                               "KV blocks in use at each arrival rate",
                               "; ".join(f"{p['rate']:g}/s: peak {p['server']['peak_used_blocks']} blocks"
                                         for p in points))
    load, latencies = [], []
    for p in [*points, serial]:
        s, server = p["summary"], p["server"]
        name = f"serial at {p['rate']:g}" if p is serial else f"{p['rate']:g}"
        load.append((name, f"{p['arrival_span_s']:.1f} of {s['duration_s']:.1f}", s["completed"],
                     f"{server['mean_batch']:.1f}", server["peak_running"],
                     f"{server['peak_used_blocks']} of {server['num_blocks']}",
                     f"{s['throughput_tokens_per_s']:,.0f}", "1 (baseline)" if p is serial else f"{p['over_serial']:.2f}×"))
        latencies.append((name, *(spread(s, n) for n in ("ttft_s", "itl_s", "e2e_s")), format_latency(server["mean_step_s"])))
    lead = (f"The same {rates['requests']} requests at every rate; the serial server ran once, at {serial['rate']:g} "
            f"per second, and every ratio divides by its {serial_value:,.0f} tokens per second. At the best rate, "
            f"{best_point(record)['rate']:g}/s, {server_regime(best_point(record))}.")
    return Block(css="lab-medians", paragraphs=[lead],
                 charts=[Chart(latency_chart, "Measured by the load generator, from send to each streamed token."),
                         Chart(throughput_chart, "Output tokens of the run divided by its wall time. The serial server "
                               f"ran once, at {serial['rate']:g} arrivals per second: its point is that run."),
                         Chart(occupancy_chart, "Each run's own /metrics samples, every "
                               f"{record['config']['benchmark']['metrics_interval_s'] * 1000:.0f} ms.")],
                 tables=[Table(["Rate (/s)", "Arrivals over (s of the run)", "Completed", "Mean batch", "Peak running",
                               "Peak blocks", "Tokens/s", "Over serial"], load,
                              caption="Load, batching and throughput per run"),
                        Table(["Rate (/s)", "Time to first token p50 / p99", "Between tokens p50 / p99",
                               "End to end p50 / p99", "Server's mean decode step"], latencies,
                              caption="Client-side latency per run, and the server's own time per decode step")])


def rates_detail_view(record: dict[str, Any]) -> Block:
    """The sweep in sentences: how long arrivals lasted, the ratios over serial, where the pool filled, what the
    gaps between tokens did, and why the server delivered less than an in-process batch."""
    pool = record["config"]["benchmark"]["sweep_blocks"]
    return Block(css="lab-findings", paragraphs=[burst_sentence(record), speedup_sentence(record),
                                                 pool_sentence(record["rates"]["points"], pool), *gap_sentences(record),
                                                 in_process_sentence(record, best_point(record))])


def burst_sentence(record: dict[str, Any]) -> str:
    """How many requests each rate sent, and whether a run was steady arrivals or a burst and then a drain."""
    rates = record["rates"]
    points = sorted(rates["points"], key=lambda p: p["rate"])
    top = points[-1]
    arriving = top["arrival_share"]
    return (
        f"Each rate sent the same {rates['requests']} requests to a fresh server with a pool of "
        f"{record['config']['benchmark']['sweep_blocks']} blocks, so every row's counters and peaks are that run's "
        f"own; the table's second column gives how long arrivals lasted in each. "
        + (f"At {top['rate']:g}/s requests kept arriving for only {arriving:.0%} of the run: such a run is a burst "
           f"and then a drain of the queue, not a steady state at that rate, and its tokens per second say how fast "
           f"the server worked through a backlog of {rates['requests']}." if arriving < formulas.BURST_SHARE else
           f"Even at {top['rate']:g}/s requests kept arriving for {arriving:.0%} of the run."))


def speedup_sentence(record: dict[str, Any]) -> str:
    rates = record["rates"]
    points, serial = rates["points"], rates["serial"]
    best = best_point(record)
    ratios = [f"{p['over_serial']:.2f}× at {p['rate']:g}/s" for p in points]
    return (
        f"The same requests served one at a time (--max-running 1) gave "
        f"{serial['summary']['throughput_tokens_per_s']:,.0f} tokens per second; that serial run was made once, at "
        f"{serial['rate']:g} arrivals per second, and every ratio divides by it. Continuous batching delivered "
        f"{join(ratios)}: the most at {best['rate']:g}/s ({rates['speedup_over_serial']:.2f}×).")


def rates_list(points: list[dict[str, Any]]) -> str:
    return join([f"{p['rate']:g}" for p in points])


def pool_sentence(points: list[dict[str, Any]], pool: int) -> str:
    """At which rates every block was reserved at some moment, and what that means for the batch."""
    full = [p for p in points if p["server"]["peak_used_blocks"] == pool]
    below = [p for p in points if p["server"]["peak_used_blocks"] < pool]
    parts = []
    if full:
        queued = join([percent(p["waiting_share"]) for p in full])
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
    steps = [p["server"]["mean_step_s"] for p in points]
    falls = [(a, b) for a, b in zip(points, points[1:])
             if b["summary"]["itl_s"]["p50"] < a["summary"]["itl_s"]["p50"]
             and b["server"]["mean_batch"] > a["server"]["mean_batch"]]
    first = (f"At {rates_list(points)} arrivals per second the mean batch was "
             f"{join([f'{b:.1f}' for b in batches])} requests per step, and the median gap between tokens "
             f"{join([format_latency(g) for g in gaps])}. ")
    if falls:
        a, b = falls[0]
        first += (f"The gap did not grow with the batch at every rate: from {a['rate']:g} to {b['rate']:g}/s it fell "
                  f"from {format_latency(a['summary']['itl_s']['p50'])} to {format_latency(b['summary']['itl_s']['p50'])} while the "
                  f"mean batch grew from {a['server']['mean_batch']:.1f} to {b['server']['mean_batch']:.1f}. ")
    same_order = sorted(range(len(points)), key=gaps.__getitem__) == sorted(range(len(points)), key=steps.__getitem__)
    order = (f"The server's own mean decode step (its time in decode steps over their number) was "
             f"{join([format_latency(s) for s in steps])}, "
             + ("in the same order as the gaps: where the gap was longer, so were the server's own steps. A step's "
                 "cost depends on more than the mean batch (attention, for one, grows with each request's cache), "
                 "and the record does not break steps down further."
                 if same_order else
                 "not in the same order as the gaps, so part of the gaps lies outside the decode steps (prefills and "
                 "the event loop's own work); the record does not break this down further."))
    low = points[0]
    nearest = step_at(record, low["nearest_step_batch"])
    alone = min(record["step_times"], key=lambda r: r["batch"])
    second = (
        f"Even at {low['rate']:g}/s a token came more slowly than alone: the median gap was "
        f"{format_latency(low['summary']['itl_s']['p50'])}, against {format_latency(serial['summary']['itl_s']['p50'])} for the "
        f"serial server, whose every step decodes one request. The mean batch there was still "
        f"{low['server']['mean_batch']:.1f}, and in-process a step for {nearest['batch']} requests takes "
        f"{format_ms(nearest['median_ns'], 2)} ms against {format_ms(alone['median_ns'], 2)} for {alone['batch']}."
        if low["summary"]["itl_s"]["p50"] > serial["summary"]["itl_s"]["p50"] else
        f"At {low['rate']:g}/s the median gap, {format_latency(low['summary']['itl_s']['p50'])}, was no longer than the "
        f"serial server's {format_latency(serial['summary']['itl_s']['p50'])}.")
    prefill = [p["server"]["mean_prefill_call_s"] for p in points if p["server"]["prefill_calls"]]
    tails = [p["summary"]["itl_s"]["p99"] for p in points]
    third = (f"A prefill call runs between two decode steps and stalls every running stream meanwhile. The mean call "
             f"of each run took {format_latency(min(prefill))} to {format_latency(max(prefill))}, so a gap that spans a few of them "
             f"can last a few times that; the p99 gaps were {format_latency(min(tails))} to {format_latency(max(tails))}."
             if prefill else "")
    return [first, order, second, *([third] if third else [])]


def step_at(record: dict[str, Any], batch: int) -> dict[str, Any]:
    """The in-process step-time row of one batch size."""
    return next(row for row in record["step_times"] if row["batch"] == batch)


def in_process_sentence(record: dict[str, Any], point: dict[str, Any]) -> str:
    """Why in-process batches of many requests decode faster than the server did at its best rate."""
    steps = record["step_times"]
    widest = max(steps, key=lambda r: r["batch"])
    server, summary = point["server"], point["summary"]
    batch = server["mean_batch"]
    nearest = step_at(record, point["nearest_step_batch"])
    duration = summary["duration_s"]
    decode_rate, rest = server["decode_rows_per_s"], point["idle_s"]
    idle = (f"the other {rest:.1f} s ({percent(point['idle_share'])}) its model thread computed nothing: it waited for "
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
        f"second of decoding) and {server['prefill_seconds']:.1f} s prefilling {server['prefills']:,} prompts, during which "
        f"no running request advanced; {idle}.")
