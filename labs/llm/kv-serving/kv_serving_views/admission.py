""""Admission by count against admission by bytes": the same workload under three policies."""

from __future__ import annotations

from typing import Any

from kv_serving.figures.formulas import policy
from site_hooks.blocks import Block, Chart, Table
from site_hooks.formatting import format_latency, plural

from .common import blocks_timeline, pct, percent, short_label, spread


def admission_view(record: dict[str, Any]) -> Block:
    """The same workload under three policies: blocks in use over time, what each server did, latencies."""
    admission = record["admission"]
    pool = admission["pool_blocks"]
    runs_ = admission["policies"]
    budget = policy(record, "kv_budget_bytes")["server"]["budget_blocks"]
    chart = blocks_timeline([(p["label"], p) for p in runs_],
                     [(pool, f"pool: {pool} blocks"), (budget, f"byte budget: {budget} blocks")],
                     "KV blocks in use under three admission policies, same workload, same pool",
                     "; ".join(f"{p['label']}: peak {p['server']['peak_used_blocks']} blocks, mean {p['mean_used_blocks']:.0f}"
                               for p in runs_))
    memory, latency = [], []
    for p in runs_:
        s, server = p["summary"], p["server"]
        limit = server["budget_blocks"]
        memory.append((short_label(p), f"{s['completed']} / {s['failed']} / {s['refused']}",
                       f"{server['peak_used_blocks']} of {limit} ({'budget' if p['name'] == 'kv_budget_bytes' else 'pool'})",
                       f"{p['mean_used_blocks']:.0f} ({percent(p['mean_used_share'])})",
                       f"{s['output_tokens']:,}", f"{s['throughput_tokens_per_s']:,.0f}"))
        latency.append((short_label(p), f"{s['completed']} of {s['requests']} ({s['failed']} failed)",
                        *(spread(s, name) for name in ("ttft_s", "itl_s", "e2e_s"))))
    return Block(css="lab-medians", paragraphs=[workload_sentence(record)],
                 charts=[Chart(chart, f"Sampled from /metrics every "
                               f"{record['config']['benchmark']['metrics_interval_s'] * 1000:.0f} ms by the load "
                               f"generator. The count limits have no budget of their own: the pool is their only limit.")],
                 tables=[Table(["Admission", "Completed / failed / refused", "Peak blocks in use (of limit)",
                               "Mean blocks in use (of limit)", "Tokens delivered", "Tokens/s"], memory,
                              caption="What each server did with the same requests"),
                        Table(["Admission", "Requests measured", "Time to first token p50 / p99",
                               "Between tokens p50 / p99", "End to end p50 / p99"], latency,
                              caption="Latency of completed requests only: a request that failed has no first token "
                                      "and is in none of these percentiles")])


def outcome_sentences(record: dict[str, Any]) -> list[str]:
    """What the two count limits did in this run, from their servers' counters: the safe count's blocks beside the
    byte server's, and whether the count sized for the mean request over-committed, filled the pool, or neither."""
    pool = record["admission"]["pool_blocks"]
    by_bytes, safe, average = (policy(record, n) for n in ("kv_budget_bytes", "count_safe", "count_average"))
    s, a = safe["server"], average["server"]
    safe_text = (
        f"The count safe for the longest request ({safe['options'][-1]} running) "
        + ("never ran out of memory" if s["failed_for_memory"] == 0 else
           f"still saw {plural(s['failed_for_memory'], 'request')} fail for memory")
        + f": it peaked at {s['peak_used_blocks']} of the pool's {pool} blocks and held "
          f"{safe['mean_used_blocks']:.0f} on average, against {by_bytes['mean_used_blocks']:.0f} admitted by bytes "
          f"within a budget of {by_bytes['server']['budget_blocks']}.")
    count = f"The count sized for the mean request ({average['options'][-1]} running)"
    if a["failed_for_memory"]:
        average_text = (f"{count} over-committed: {plural(a['failed_for_memory'], 'request')} found the pool without "
                        f"their blocks and failed at admission, before any token.")
    elif a["peak_used_blocks"] >= pool:
        average_text = (f"{count} filled all {pool} blocks of the pool at its peak, yet no request failed for memory "
                        f"in this run.")
    else:
        average_text = (f"{count} can over-commit when long requests arrive together, but in this run it peaked at "
                        f"{a['peak_used_blocks']} of the pool's {pool} blocks and no request failed for memory: the "
                        f"risk it takes did not come due.")
    return [safe_text, average_text]


def admission_outcome_view(record: dict[str, Any]) -> Block:
    """The admission table's two count rows in words, as this run's counters show them."""
    return Block(paragraphs=outcome_sentences(record))


def admission_detail_view(record: dict[str, Any]) -> Block:
    """The admission experiment in sentences: the workload and budget, each policy's outcome, what the latency
    table leaves out."""
    return Block(css="lab-findings", paragraphs=admission_sentences(record), notes=[completed_only_sentence(record)])


def workload_sentence(record: dict[str, Any]) -> str:
    admission, config = record["admission"], record["config"]["benchmark"]
    workload = admission["workload"]
    return (f"{workload['requests']} requests at {workload['rate']:g} per second, each needing "
            f"{min(admission['request_blocks'])} to {max(admission['request_blocks'])} blocks "
            f"({admission['mean_request_blocks']:.1f} on average; the longest the workload allows needs "
            f"{admission['longest_request_blocks']}); a pool of {admission['pool_blocks']} blocks for every server, and "
            f"a byte budget of {config['byte_budget_blocks']} of them.")


def admission_sentences(record: dict[str, Any]) -> list[str]:
    admission, config = record["admission"], record["config"]["benchmark"]
    pool, workload = admission["pool_blocks"], admission["workload"]
    by_bytes, safe, average = (policy(record, n) for n in ("kv_budget_bytes", "count_safe", "count_average"))
    first = (f"{workload['requests']} requests arrived at {workload['rate']:g} per second, prompts of "
             f"{workload['prompt_tokens'][0]} to {workload['prompt_tokens'][1]} tokens and outputs of "
             f"{workload['output_tokens'][0]} to {workload['output_tokens'][1]}: one needs "
             f"{min(admission['request_blocks'])} to {max(admission['request_blocks'])} blocks, "
             f"{admission['mean_request_blocks']:.1f} on average, and the longest the workload allows needs "
             f"{admission['longest_request_blocks']}.")
    budget = (f"Every server had the same pool of {pool} blocks. The byte "
             f"server's budget was {config['byte_budget_share']:g} of it, {config['byte_budget_blocks']} blocks "
             f"({admission['kv_budget_bytes']:,} bytes), so the "
             f"{admission['blocks_above_budget']} blocks above the budget were free in the allocator all along and "
             f"only the admission policy kept reservations out of them; the count limits had no budget but the pool.")
    b = by_bytes["server"]
    bytes_sentence = (
        f"Admitted by KV bytes, reservations peaked at {b['peak_used_blocks']} of the {b['budget_blocks']} budgeted "
        f"blocks ({'never above' if b['peak_used_blocks'] <= b['budget_blocks'] else 'above'} the budget, "
        f"{percent(b['peak_share_of_pool'])} of the pool), held {by_bytes['mean_used_blocks']:.0f} blocks on average "
        f"({percent(by_bytes['mean_used_share'])} of the budget), ran up to {b['peak_running']} requests at "
        f"once, and " + ("no request failed for memory." if b["failed_for_memory"] == 0 else
                         f"{plural(b['failed_for_memory'], 'request')} failed for memory."))
    s, sp = safe["summary"], by_bytes["summary"]
    safe_ttft, bytes_ttft = pct(s, "ttft_s", "p50"), pct(sp, "ttft_s", "p50")
    comparison = ("longer than" if safe_ttft > bytes_ttft else "no longer than") if None not in (safe_ttft, bytes_ttft) else "against"
    safe_sentence = (
        f"A count limit that is safe for the longest request ({safe['options'][-1]} running) "
        + ("never ran out of memory" if safe["server"]["failed_for_memory"] == 0 else
           f"still saw {plural(safe['server']['failed_for_memory'], 'request')} fail for memory")
        + f" but held only {safe['mean_used_blocks']:.0f} blocks on average, {percent(safe['mean_used_share'])} of its "
        f"pool, against {by_bytes['mean_used_blocks']:.0f} by bytes with a smaller budget; its median time to first token, "
        f"{format_latency(safe_ttft)}, was {comparison} the {format_latency(bytes_ttft)} of admission by bytes.")
    a = average["server"]
    average_sentence = (
        f"A count limit sized for the mean request ({average['options'][-1]} running) admitted whenever a slot was "
        f"free, whatever the request's length: "
        + (f"{plural(a['failed_for_memory'], 'request')} of {average['summary']['requests']} found the pool without "
           f"their blocks and failed (reserve-at-admission turns over-commitment into failures at admission, "
           f"before any token is computed)." if a["failed_for_memory"] else
           "this time the pool happened to have the blocks for every admitted request, so nothing failed."))
    return [first, budget, bytes_sentence, safe_sentence, average_sentence]


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
            f"completed and {s['failed']} failed. Its median time to first token, {format_latency(pct(s, 'ttft_s', 'p50'))}, "
            f"and its other percentiles describe only the {s['completed']} that got in; the {s['failed']} that failed "
            f"got no token at all, which no percentile shows. Its {s['throughput_tokens_per_s']:,.0f} tokens per "
            f"second count the {s['output_tokens']:,} tokens it delivered, against {b['output_tokens']:,} by bytes "
            f"({b['completed']} of {b['requests']} completed, median time to first token "
            f"{format_latency(pct(b, 'ttft_s', 'p50'))}, including each request's wait in the queue)."
            + (" Its shorter times to first token come with failed requests, so they do not compare like with like."
               if None not in (pct(s, "ttft_s", "p50"), pct(b, "ttft_s", "p50"))
               and pct(s, "ttft_s", "p50") < pct(b, "ttft_s", "p50") else ""))
    if not parts:
        return ("Every server completed every request it did not refuse, so the latency percentiles compare the same "
                "requests.")
    return " ".join(parts)
