""""The trained model under load": real prompts against the one engine serving SmolLM2-135M, the batch it ran,
its latencies, batched against one at a time, and whether every request wrote what it writes alone."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Chart, Table, answer
from site_hooks.formatting import format_bytes, plural
from site_hooks.timeline_chart import timeline

from .common import spread


def speedup_sentence(trained: dict[str, Any]) -> str:
    """Batched over one at a time at the highest rate, and whether batching gained anything at all."""
    speedup, serial = trained["speedup_over_serial"], trained["serial"]
    verdict = "" if speedup > 1 else ": no gain at all, on this run batching bought nothing"
    return (f"At {serial['rate']:g} arrivals per second, batching the requests wrote {speedup:.1f}× the output tokens "
            f"per second of the same server admitting one request at a time{verdict}.")


def matching_sentence(trained: dict[str, Any]) -> str:
    """Whether every batched request wrote, token for token, what it wrote alone."""
    compared, matching = trained["requests_compared"], trained["requests_matching_solo"]
    unfinished = trained["requests_unfinished"]
    aside = (f" ({plural(unfinished, 'other request')} did not complete, so wrote nothing to compare: the "
             f"admission table shows where a policy ran out of memory.)" if unfinished else "")
    if matching == compared:
        return (f"Every one of the {compared} completed requests of the batched runs wrote, token for token, what the "
                f"same prompt wrote alone in the one-at-a-time run.{aside}")
    return (f"{matching} of the {compared} completed requests of the batched runs wrote, token for token, what the "
            f"same prompt wrote alone; the others parted from their solo run at some token. A batch adds its floats "
            f"in another order than a row alone, and where two logits are nearly equal that can change a greedy "
            f"choice; the record keeps both runs' tokens, not the logits at the parting.{aside}")


def admission_note(trained: dict[str, Any]) -> str | None:
    """Where the count safe for the longest request and the count sized for the mean one came out the same (a prompt
    set of requests of nearly one size), say so: the two count rows are then one policy run twice."""
    counts = {p["name"]: p["options"][p["options"].index("--max-running") + 1]
              for p in trained["admission"]["policies"] if "--max-running" in p["options"]}
    if counts.get("count_safe") is None or counts.get("count_safe") != counts.get("count_average"):
        return None
    blocks = trained["request_blocks"]
    return (f"On these prompts the count safe for the longest request and the count sized for the mean one are the "
            f"same, {counts['count_safe']} running: each request needs {min(blocks)} to {max(blocks)} blocks, so the "
            f"two count rows run one policy twice. The random model's workload below, whose requests differ far more "
            f"in length, is where the two counts part.")


def answer_concurrent_view(record: dict[str, Any]) -> Block:
    """Whether clients asking at once waited for each other, from the highest rate's batch and its solo runs."""
    trained = record["trained"]
    top = max(trained["points"], key=lambda p: p["rate"])
    server = top["server"]
    together = server["peak_running"] > 1
    text = ((f"No: at {top['rate']:g} arrivals per second up to {server['peak_running']} requests ran in one decode "
             f"step, {server['mean_batch']:.1f} on average, each at its own position over its own blocks. "
             if together else
             f"On this run they did: at {top['rate']:g} arrivals per second no decode step carried more than one "
             f"request. ")
            + f"{top['matching_solo']} of its {top['completed_compared']} completed requests wrote the same tokens as "
              f"alone.")
    return answer(text)


def trained_view(record: dict[str, Any]) -> Block:
    trained = record["trained"]
    points, serial = trained["points"], trained["serial"]
    model = trained["model"]
    lead = (f"{plural(trained['requests'], 'real prompt')} from {trained['prompt_file']} (SHA-256 "
            f"{trained['prompts_sha256'][:12]}…), chat questions through the model's chat template and text "
            f"continuations, each up to {trained['max_tokens']} tokens, sent by the load generator to "
            f"kv_serving.server --model smollm2 ({model['layers']} layers, {model['dtype']}) at each rate, a fresh "
            f"server per run.")
    rows, latencies = [], []
    for p in [*points, serial]:
        s, server = p["summary"], p["server"]
        name = f"one at a time, {p['rate']:g}" if p is serial else f"{p['rate']:g}"
        rows.append((name, s["completed"], p["stopped"], f"{server['mean_batch']:.1f}", server["peak_running"],
                     f"{format_bytes(p['peak_kv_bytes'])} of {format_bytes(p['budget_kv_bytes'])}",
                     f"{s['throughput_tokens_per_s']:,.1f}",
                     "(the solo run)" if p is serial else f"{p['matching_solo']} of {p['completed_compared']}"))
        latencies.append((name, spread(s, "ttft_s"), spread(s, "itl_s")))
    batch_chart = timeline([(f"one at a time, {p['rate']:g}/s" if p is serial else f"{p['rate']:g}/s",
                             [(x["t_s"], x["running"]) for x in p["occupancy"]]) for p in [*points, serial]],
                           [(max(p["server"]["peak_running"] for p in points), "largest batch")],
                           "Requests in the decode batch over time, per arrival rate",
                           "; ".join(f"{p['rate']:g}/s: peak {p['server']['peak_running']} running" for p in points),
                           x_label="seconds since the first request", y_label="requests running")
    policies = [(run["label"], run["summary"]["completed"], run["server"]["peak_running"],
                 f"{format_bytes(run['peak_kv_bytes'])} of {format_bytes(run['budget_kv_bytes'])}",
                 run["server"]["failed_for_memory"], f"{run['summary']['throughput_tokens_per_s']:,.1f}",
                 spread(run["summary"], "ttft_s")) for run in trained["admission"]["policies"]]
    return Block(css="lab-medians",
                 paragraphs=[lead, speedup_sentence(trained),
                             matching_sentence(trained), *filter(None, [admission_note(trained)])],
                 charts=[Chart(batch_chart, "Each run's own /metrics samples: how many requests one decode step "
                                            "carried as the prompts arrived and finished.")],
                 tables=[Table(["Rate (/s)", "Completed", "Ended their turn", "Mean batch", "Peak running",
                                "Peak KV of budget", "Tokens/s", "Same tokens as alone"], rows,
                               caption="The trained model under load: batching and throughput per run"),
                         Table(["Rate (/s)", "Time to first token p50 / p99", "Between tokens p50 / p99"], latencies,
                               caption="The trained model under load: latency measured by the client"),
                         Table(["Admission", "Completed", "Peak running", "Peak KV of budget", "Failed for memory",
                                "Tokens/s", "Time to first token p50 / p99"], policies,
                               caption=f"Admission on the trained model, a pool of {trained['admission_blocks']} "
                                       f"blocks, at {serial['rate']:g} arrivals per second")])

