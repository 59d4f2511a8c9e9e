"""What the serving record establishes, in the reader's terms: the key results and the answers to the page's
check-yourself questions. Every number comes from the record's checked figures or kv_serving.figures.formulas."""

from __future__ import annotations

from typing import Any

from kv_serving.figures.formulas import best_point, mode, policy
from labkit.regimes import FLAT_BAND
from site_hooks.blocks import Block, answer
from site_hooks.formatting import format_latency, format_ms, format_percent, format_ratio, plural

from .common import percent
from .pictures import stall_times
from .rates import in_process_sentence

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


def batching_item(record: dict[str, Any]) -> str:
    best = best_point(record)
    ratio = best["over_serial"]
    target = record["targets"]["speedup_target"]
    return (f"Batching: at {best['rate']:g} requests per second the server delivered {best['summary']['throughput_tokens_per_s']:,.0f} tokens per second, "
            f"{format_ratio(ratio)} the same requests served one at a time ({'at or above' if ratio >= target else 'below'} the {target:g}× this lab aims for); "
            f"{server_regime(best)}.")


def step_item(record: dict[str, Any]) -> str:
    rows = sorted(record["step_times"], key=lambda r: r["batch"])
    scaling = record["step_scaling"]
    kind, growth, widening = scaling["regime"], scaling["growth"], scaling["widening"]
    first, last = rows[0], rows[-1]
    said = {"flat": (f"flat within {FLAT_BAND:.0%}: a fixed cost per step (reading the weights, per-call overhead), "
                     f"which the whole batch shares"),
            "shared": "most of a step is a cost the batch shares (reading the weights, per-call overhead)",
            "per-row": "the step's cost grew nearly with its rows: little of it is shared"}[kind]
    return (f"One step, many requests: a decode step for {last['batch']} requests took {format_ratio(growth)} the "
            f"{format_ms(first['median_ns'], 2)} ms of a step for {first['batch']} while making "
            f"{widening:g} times the tokens; {said}.")


def admission_item(record: dict[str, Any]) -> str:
    b, average = policy(record, "kv_budget_bytes")["server"], policy(record, "count_average")
    failed = average["server"]["failed_for_memory"]
    mean_count = f"let {plural(failed, 'request')} fail for memory." if failed else "happened to fail nobody this run."
    return (f"Admission by KV bytes: reservations peaked at {b['peak_used_blocks']} of {b['budget_blocks']} budgeted blocks with {plural(b['failed_for_memory'], 'request')} failed for memory, "
            f"and held {format_ratio(record['admission']['occupancy_bytes_over_safe'])} the blocks of a count limit safe for the longest request; "
            f"a count sized for the mean request {mean_count}")


def cancellation_item(record: dict[str, Any]) -> str:
    h, i = mode(record, True)["server"], mode(record, False)["server"]
    held = (f", {record['cancellation']['block_seconds_ignored_over_honoured']:.0f} times the block-seconds of cache "
            "held" if h["block_seconds_after_disconnect"] > 0 else "")
    return (f"Cancellation: with disconnects honoured, {plural(h['cancelled'], 'cancelled request')} cost "
            f"{plural(h['rows_dropped'], 'thrown-away row')} (at most the step under way each) and "
            f"{plural(max(h['num_used_blocks'], i['num_used_blocks']), 'leaked block')}; ignoring them, the server "
            f"decoded {plural(i['decode_rows_after_disconnect'], 'row')} for nobody{held}.")


def stall_item(record: dict[str, Any]) -> str:
    step, prefill, point = stall_times(record)
    itl = point["summary"]["itl_s"]
    return (f"The prefill stall: at {point['rate']:g}/s a prefill took {format_latency(prefill)} on average, "
            f"{point['server']['prefill_over_step']:.1f} times a {format_latency(step)} decode step, and every running stream waits it out; "
            f"the gap between tokens was {format_latency(itl['p50'])} at the median and {format_latency(itl['p99'])} "
            f"at p99.")


def key_results_view(record: dict[str, Any]) -> Block:
    return Block(css="lab-key-results", items=[batching_item(record), step_item(record), admission_item(record),
                                               cancellation_item(record), stall_item(record)])


def answer_fit_view(record: dict[str, Any]) -> Block:
    admission, config = record["admission"], record["config"]["benchmark"]
    workload = admission["workload"]
    positions = admission["longest_request_positions"]
    blocks, budget = admission["longest_request_blocks"], config["byte_budget_blocks"]
    safe = policy(record, "count_safe")["options"][-1]
    text = (f"It stores {workload['prompt_tokens'][1]} + {workload['output_tokens'][1]} − 1 = {positions} positions "
            f"(the last token is never fed back), {blocks} blocks of {config['block_size']}, "
            f"{admission['longest_request_bytes']:,} bytes at {config['block_bytes']:,} bytes a block. The byte server's "
            f"budget is {budget} blocks, so it "
            + (f"admits it once {blocks} blocks are unreserved, and waits until then."
               if blocks <= budget else "refuses it at once with a 400 that gives these numbers.")
            + f" A count limit that must be safe for such requests in the {config['num_blocks']}-block pool runs at most "
            f"{safe} at once, whatever the actual lengths.")
    return answer(text)


def answer_stall_view(record: dict[str, Any]) -> Block:
    step, _, point = stall_times(record)
    server = point["server"]
    stalled, p99 = server["stalled_gap_s"], point["summary"]["itl_s"]["p99"]
    text = (f"By one prefill: the model thread runs it between two decode steps, so every running stream's next token "
            f"comes {format_latency(stalled)} after the last instead of {format_latency(step)}. At "
            f"{point['rate']:g}/s the server spent {server['prefill_seconds']:.1f} s in {plural(server['prefills'], 'prefill')} "
            f"and {server['decode_seconds']:.1f} s in {plural(server['decode_steps'], 'decode step')} "
            f"({percent(server['prefill_share'])} of its model time in prefills)."
            + (f" Arrivals admitted in the same iteration stack their prefills, so one gap can span several: the p99 "
               f"gap was {format_latency(p99)}, longer than a step and a prefill together."
               if p99 > stalled else f" The p99 gap, {format_latency(p99)}, stayed within a step and a prefill."))
    return answer(text)


def answer_throughput_view(record: dict[str, Any]) -> Block:
    return answer(in_process_sentence(record, best_point(record)))


def answer_cancel_view(record: dict[str, Any]) -> Block:
    h = mode(record, True)["server"]
    return answer(f"At most one row: the step already under way when the server notices. The scheduler touches its state "
            f"only between steps, so the departed request keeps its blocks until that step returns, its token is "
            f"dropped, and it retires before the next step. In the record, {plural(h['cancelled'], 'cancelled request')} "
            f"cost {plural(h['rows_dropped'], 'dropped row')} and {plural(h['tokens_after_disconnect'], 'token')} sent "
            f"to a closed connection.")
