"""What the serving record establishes, in the reader's terms: the key results and the answers to the page's
check-yourself questions. Every number comes from the record's checked figures or kv_serving.figures.formulas."""

from __future__ import annotations

from typing import Any

from kv_serving.figures import formulas
from kv_serving.figures.formulas import best_point, mode, policy
from site_hooks.blocks import Block, answer
from site_hooks.formatting import format_latency, format_ratio, plural

from .common import percent
from .pictures import stall_times
from .trained import rounds_sentence


def trained_item(record: dict[str, Any]) -> str:
    trained = record["trained"]
    rounds = trained.get("batching_rounds")
    if rounds is not None:
        return f"The trained model, SmolLM2-135M: {rounds_sentence(rounds)}"
    ratio, serial = trained["speedup_over_serial"], trained["serial"]
    return (f"The trained model: with its requests batched, SmolLM2-135M wrote {format_ratio(ratio)} the output tokens "
            f"per second it wrote admitting one request at a time, at {serial['rate']:g} arrivals per second.")


def batching_item(record: dict[str, Any]) -> str:
    best = best_point(record)
    ratio = best["over_serial"]
    return (f"The small random model: at {best['rate']:g} requests per second, batching delivered "
            f"{best['summary']['throughput_tokens_per_s']:,.0f} tokens per second, {format_ratio(ratio)} the same "
            "requests served one at a time.")


def admission_item(record: dict[str, Any]) -> str:
    by_bytes, safe, average = (policy(record, name) for name in ("kv_budget_bytes", "count_safe", "count_average"))
    b = by_bytes["server"]
    failed = average["server"]["failed_for_memory"]
    mean_count = f"let {plural(failed, 'request')} fail for memory." if failed else "happened to fail nobody this run."
    within = "within" if record["targets"]["bytes_peak_within_budget"] else "above"
    order = formulas.ttft_order(by_bytes, safe)
    started = (f"started requests {order} than" if order else
               "started requests within the spread of")  # the middle halves of the two runs' TTFTs overlap
    return (f"Admission by KV bytes {started} a count safe for the longest request (median time to first token "
            f"{format_latency(by_bytes['summary']['ttft_s']['p50'])} against "
            f"{format_latency(safe['summary']['ttft_s']['p50'])}), holding "
            f"{format_ratio(record['admission']['occupancy_bytes_over_safe'])} its mean blocks (one run each) "
            f"{within} its budget (peak {b['peak_used_blocks']} of {b['budget_blocks']}), "
            f"{plural(b['failed_for_memory'], 'request')} failed for memory; a count sized for the mean request "
            f"{mean_count}")


def cancellation_item(record: dict[str, Any]) -> str:
    h, i = mode(record, True)["server"], mode(record, False)["server"]
    held = (f", holding {record['cancellation']['block_seconds_ignored_over_honoured']:.0f} times the block-seconds "
            "of cache" if h["block_seconds_after_disconnect"] > 0 else "")
    return (f"Cancellation: honouring disconnects, the server threw away {plural(h['rows_dropped'], 'row')} for "
            f"{plural(h['cancelled'], 'departed client')} and leaked "
            f"{plural(max(h['num_used_blocks'], i['num_used_blocks']), 'block')}; ignoring them, it decoded "
            f"{plural(i['decode_rows_after_disconnect'], 'row')} for nobody{held}.")


def stall_item(record: dict[str, Any]) -> str:
    step, prefill, point = stall_times(record)
    itl = point["summary"]["itl_s"]
    return (f"The prefill stall: a prefill call (the prompts admitted together, "
            f"{point['server']['prompts_per_prefill_call']:.1f} on average) took {format_latency(prefill)}, "
            f"{point['server']['prefill_over_step']:.1f} times a {format_latency(step)} decode step, and every running "
            f"stream waits it out: at {point['rate']:g}/s the gap between tokens was {format_latency(itl['p50'])} at "
            f"the median and {format_latency(itl['p99'])} at p99.")


def key_results_view(record: dict[str, Any]) -> Block:
    return Block(css="lab-key-results", items=[trained_item(record), batching_item(record), admission_item(record),
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
    text = (f"By one prefill call: the model thread runs it between two decode steps, so every running stream's next token "
            f"comes {format_latency(stalled)} after the last instead of {format_latency(step)}. At "
            f"{point['rate']:g}/s the server spent {server['prefill_seconds']:.1f} s prefilling "
            f"{plural(server['prefills'], 'prompt')} in {plural(server['prefill_calls'], 'call')} "
            f"and {server['decode_seconds']:.1f} s in {plural(server['decode_steps'], 'decode step')} "
            f"({percent(server['prefill_share'])} of its model time in prefills)."
            + (f" A gap can span more than one call: the p99 gap was {format_latency(p99)}, longer than a step and a "
               f"call together."
               if p99 > stalled else f" The p99 gap, {format_latency(p99)}, stayed within a step and a call."))
    return answer(text)
