"""Every figure of the serving record that follows from its raw data (``derive``).

Torch-free: the record holds only raw data; the site build derives every figure with ``derive`` when it reads
the record (labkit.figures.check_record), after ``check_invariants`` (invariants.py), and the views read the
figures derived there. A figure is derived only from raw data: durations, request rows, the servers' own
counters and the config, never from another derived figure; the formulas are formulas.py's.
"""

from __future__ import annotations

import statistics
from typing import Any

from kv_serving.client_stats import client_summary
from labkit.figures import Figures
from labkit.records import JsonPath
from labkit.summary import as_number, median, middle_half, paired, side_of_one
from llm_models.serving.dtypes import faster_dtype, probe_medians
from llm_models.serving.sizes import (
    blocks_for,
    budget_blocks,  # the byte server's budget, as the benchmark sized it
)

from .formulas import (
    arrival_span,
    growth_range,
    matching_solo,
    mean_batch,
    mean_prefill_call_s,
    mean_prefill_s,
    mean_step_s,
    mean_used,
    memory_noise,
    memory_verdict,
    memory_window,
    mode,
    nearest_step,
    policy,
    record_block_bytes,
    runs,
    step_regime,
    trained_block_bytes,
    trained_runs,
    waiting_share,
)


def config_figures(record: dict[str, Any], figures: Figures) -> None:
    """The pool's bytes and the byte budget from the config, and each dtype probe's median."""
    config = record["config"]["benchmark"]
    path = ("config", "benchmark")
    block = record_block_bytes(record, config["block_size"])
    figures.add((*path, "kv_bytes_per_token"), record_block_bytes(record, 1),
                "2 x layers x Hkv x D x bytes from the record's config")
    figures.add((*path, "block_bytes"), block, "the bytes per token x block_size")
    figures.add((*path, "pool_bytes"), config["num_blocks"] * block, "num_blocks x block_bytes")
    figures.add((*path, "byte_budget_blocks"), budget_blocks(config["num_blocks"], config["byte_budget_share"]),
                "num_blocks x byte_budget_share, rounded down")
    probes = config["dtype_choice"]["probes"]
    for name, value in probe_medians(probes).items():
        figures.add((*path, "dtype_choice", "probes", name, "median_ns"), as_number(value), "its raw durations")
    figures.add((*path, "dtype_choice", "faster"), faster_dtype(probes), "the probes' medians")


def step_figures(record: dict[str, Any], figures: Figures) -> None:
    """Each batch size's step and weights-alone statistics from their durations, its tokens per second, the rest of
    the step beside the weights, per token and per request; then how the step grew from the smallest batch to
    the largest, and where a larger batch stepped faster than a smaller one."""
    medians = {}
    for index, row in enumerate(record["step_times"]):
        where = ("step_times", index)
        for path, timings in ((where, row), ((*where, "weights"), row["weights"])):
            durations = timings["durations_ns"]
            for name, value in (("median_ns", median(durations)), ("min_ns", min(durations)),
                                ("max_ns", max(durations))):
                figures.add((*path, name), as_number(value), "its raw durations")
        step, weights, batch = median(row["durations_ns"]), median(row["weights"]["durations_ns"]), row["batch"]
        medians[batch] = step
        figures.add((*where, "tokens_per_s"), batch / (step / 1e9), "batch / its median step")
        for name, value in (("rest_ns", step - weights),
                            ("weights_share", weights / step), ("weights_per_request_ns", weights / batch),
                            ("per_token_median_ns", step / batch), ("per_token_min_ns", min(row["durations_ns"]) / batch),
                            ("per_token_max_ns", max(row["durations_ns"]) / batch)):
            figures.add((*where, name), value, "its raw durations and batch")
    batches = sorted(medians)
    first, last = batches[0], batches[-1]
    growth, widening = medians[last] / medians[first], last / first
    tokens_ratio = (last / (medians[last] / 1e9)) / (first / (medians[first] / 1e9))
    inversions = [(a, b) for i, a in enumerate(batches) for b in batches[i + 1:] if medians[b] < medians[a]]
    worst = max(inversions, key=lambda pair: medians[pair[0]] - medians[pair[1]]) if inversions else None
    how = "the steps' raw durations"
    durations = {row["batch"]: row["durations_ns"] for row in record["step_times"]}
    for name, value in (("growth", growth), ("widening", widening),
                        ("growth_range", list(growth_range(durations[first], durations[last]))),
                        ("regime", step_regime(durations[first], durations[last], widening)),
                        ("tokens_per_s_ratio", tokens_ratio),
                        ("inversion", None if worst is None else {"smaller_batch": worst[0], "larger_batch": worst[1]})):
        figures.add(("step_scaling", name), value, how)


def run_figures(path: JsonPath, run: dict[str, Any], figures: Figures) -> dict[str, Any]:
    """One run's client summary from its request rows; its server's mean batch, step and prefill, and how it
    spent the run; its blocks in use and queue from the /metrics samples; returns the summary."""
    summary = client_summary(run["requests"])
    for name, value in summary.items():
        if isinstance(value, dict):
            for key, number in value.items():
                figures.add((*path, "summary", name, key), number, "client_summary of its completed requests")
        else:
            figures.add((*path, "summary", name), value, "client_summary of its request rows")
    server, duration = run["server"], summary["duration_s"]
    step, prefill, call = mean_step_s(server), mean_prefill_s(server), mean_prefill_call_s(server)
    model_s = server["decode_seconds"] + server["prefill_seconds"]
    figures.add((*path, "server", "mean_batch"), mean_batch(server), "decode_rows / decode_steps")
    for name, value in (
            ("mean_step_s", step), ("mean_prefill_s", prefill), ("mean_prefill_call_s", call),
            ("prompts_per_prefill_call", server["prefills"] / server["prefill_calls"] if server["prefill_calls"] else 0.0),
            ("stalled_gap_s", step + call), ("prefill_over_step", call / step if step > 0 else None),
            ("prefill_share", server["prefill_seconds"] / model_s if model_s > 0 else None),
            ("decode_rows_per_s", server["decode_rows"] / server["decode_seconds"] if server["decode_seconds"] > 0 else 0.0),
            ("peak_share_of_pool", server["peak_used_blocks"] / server["num_blocks"]),
            ("budget_share_of_pool", server["budget_blocks"] / server["num_blocks"])):
        figures.add((*path, "server", name), value, "its server's counters")
    used = mean_used(run)
    span = arrival_span(run)
    for name, value in (
            ("mean_used_blocks", used), ("mean_used_share", used / server["budget_blocks"]),
            ("waiting_share", waiting_share(run)), ("arrival_span_s", span),
            ("arrival_share", span / duration if duration else 1.0),
            ("busy_share", model_s / duration if duration > 0 else 0.0), ("idle_s", duration - model_s),
            ("idle_share", (duration - model_s) / duration if duration > 0 else None)):
        figures.add((*path, name), value, "its requests, samples and server counters")
    return summary


def admission_figures(record: dict[str, Any], figures: Figures) -> None:
    admission, config = record["admission"], record["config"]["benchmark"]
    workload = admission["workload"]
    longest = workload["prompt_tokens"][1] + workload["output_tokens"][1] - 1
    block = record_block_bytes(record, config["block_size"])
    budget = budget_blocks(config["num_blocks"], config["byte_budget_share"])
    figures.add(("admission", "longest_request_positions"), longest,
                "the workload's longest prompt + output - 1 positions")
    figures.add(("admission", "longest_request_blocks"), blocks_for(longest, config["block_size"]),
                "the workload's longest prompt + output - 1 positions, in blocks")
    figures.add(("admission", "longest_request_bytes"), blocks_for(longest, config["block_size"]) * block,
                "its blocks x block_bytes")
    figures.add(("admission", "mean_request_blocks"), statistics.mean(admission["request_blocks"]),
                "the mean of request_blocks")
    figures.add(("admission", "kv_budget_bytes"), budget * block, "byte_budget_blocks x block_bytes")
    figures.add(("admission", "blocks_above_budget"), config["num_blocks"] - budget, "num_blocks - byte_budget_blocks")
    figures.add(("admission", "occupancy_bytes_over_safe"),
                mean_used(policy(record, "kv_budget_bytes")) / mean_used(policy(record, "count_safe")),
                "the two servers' /metrics samples")


def cancellation_figures(record: dict[str, Any], summaries: dict[JsonPath, dict[str, Any]], figures: Figures) -> None:
    """Per server the tokens streamed that no client received, and how many before it noticed a departure; the
    rows decoded per cancelled request, and the cache held for departed clients, ignored over honoured."""
    before = 0
    for index, run in enumerate(record["cancellation"]["modes"]):
        server = run["server"]
        unread = server["tokens_generated"] - summaries[("cancellation", "modes", index)]["output_tokens"]
        before += unread - server["tokens_after_disconnect"]
        figures.add(("cancellation", "modes", index, "tokens_unread"), unread,
                    "its server's tokens_generated - its clients' output_tokens")
        figures.add(("cancellation", "modes", index, "tokens_unread_before_noticed"),
                    unread - server["tokens_after_disconnect"], "tokens_unread - tokens_after_disconnect")
    honoured, ignored = mode(record, True)["server"], mode(record, False)["server"]
    held = honoured["block_seconds_after_disconnect"]
    for name, value in (
            ("tokens_before_noticed", before),
            ("rows_per_cancelled",
             honoured["decode_rows_after_disconnect"] / honoured["cancelled"] if honoured["cancelled"] else None),
            ("block_seconds_ignored_over_honoured", ignored["block_seconds_after_disconnect"] / held if held > 0 else None)):
        figures.add(("cancellation", name), value, "the two servers' counters and their clients' rows")


def target_figures(record: dict[str, Any], summaries: dict[JsonPath, dict[str, Any]], figures: Figures) -> None:
    """Each rate over serial and the in-process step nearest its batch; the best rate, the speedup over serial
    there and the targets' verdicts, from the raw measurements."""
    points = record["rates"]["points"]
    serial = summaries[("rates", "serial")]["throughput_tokens_per_s"]
    throughput = [summaries[("rates", "points", i)]["throughput_tokens_per_s"] for i in range(len(points))]
    for index, point in enumerate(points):
        figures.add(("rates", "points", index, "over_serial"), throughput[index] / serial,
                    "its throughput / the serial run's")
        figures.add(("rates", "points", index, "nearest_step_batch"),
                    nearest_step(record["step_times"], mean_batch(point["server"]))["batch"],
                    "the in-process batch nearest its mean batch")
    best = max(range(len(points)), key=throughput.__getitem__)
    speedup = throughput[best] / serial
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


def trained_figures(record: dict[str, Any], summaries: dict[JsonPath, dict[str, Any]], figures: Figures) -> None:
    """The trained model's runs: each batched run's requests that wrote what they wrote alone, its peak and budget
    in KV bytes, and batched over one at a time at the highest rate."""
    trained, size = record["trained"], record["config"]["benchmark"]["block_size"]
    block = trained_block_bytes(record, size)
    figures.add(("trained", "block_bytes"), block, "2 x layers x Hkv x D x bytes x block_size of the trained model")
    compared = matching = unfinished = 0
    for path, run in trained_runs(record):
        server = run["server"]
        figures.add((*path, "peak_kv_bytes"), server["peak_used_blocks"] * block, "peak_used_blocks x block_bytes")
        figures.add((*path, "budget_kv_bytes"), server["budget_blocks"] * block, "budget_blocks x block_bytes")
        figures.add((*path, "stopped"), sum(r.get("finish_reason") == "stop" for r in run["requests"]),
                    "its requests that ended at the end of their turn, before max_tokens")
        if path[1] != "serial":
            same = matching_solo(run, trained["serial"])
            figures.add((*path, "matching_solo"), same, "its requests whose tokens equal the one-at-a-time run's")
            completed = sum(r["outcome"] == "completed" for r in run["requests"])
            figures.add((*path, "completed_compared"), completed, "its completed requests, each compared with alone")
            compared, matching = compared + completed, matching + same
            unfinished += len(run["requests"]) - completed
    highest = max(range(len(trained["points"])), key=lambda i: trained["points"][i]["rate"])
    batched = summaries[("trained", "points", highest)]["throughput_tokens_per_s"]
    serial = summaries[("trained", "serial")]["throughput_tokens_per_s"]
    speedup = batched / serial
    figures.add(("trained", "speedup_over_serial"), speedup, "the highest rate's throughput over the serial run's")
    figures.add(("trained", "requests_compared"), compared, "the batched runs' completed requests")
    figures.add(("trained", "requests_unfinished"), unfinished,
                "the batched runs' requests that did not complete (refused or failed): no tokens to compare")
    figures.add(("trained", "requests_matching_solo"), matching, "those whose tokens equal the serial run's")
    figures.add(("trained", "speedup_met"), speedup >= record["targets"]["speedup_target"],
                "the speedup against its target")
    figures.add(("trained", "equivalence", "tokens_identical"), not trained["equivalence"]["ties"],
                "no step where alone chose another token")
    for index, row in enumerate(trained["solo_steps"]):
        durations = row["durations_ns"]
        for name, value in (("median_ns", median(durations)), ("min_ns", min(durations)), ("max_ns", max(durations))):
            figures.add(("trained", "solo_steps", index, name), as_number(value), "its raw durations")
    batching_figures(trained, figures)
    chunked_figures(trained, figures)
    for index, row in enumerate(trained.get("client_steps", {}).get("rows", [])):
        client_figures(row, ("trained", "client_steps", "rows", index), figures)


def batching_figures(trained: dict[str, Any], figures: Figures) -> None:
    """Batched against one at a time in paired rounds (where the record has them): per round the batching server's
    output tokens per second over the serial server's, paired (labkit.summary.paired) with the side of 1 its middle
    half lies on ('above': batching wrote faster in most rounds)."""
    rounds = trained.get("batching_rounds")
    if rounds is None:
        return
    throughput = {side: [tokens / seconds for tokens, seconds in zip(rounds[side]["tokens"], rounds[side]["seconds"],
                                                                       strict=True)]
                  for side in ("batched", "serial")}
    ratio = paired(throughput["batched"], throughput["serial"])
    figures.add(("trained", "batching_rounds", "paired"), ratio, "per round, the batching server's output tokens per "
                "second / the serial server's: median and middle half")
    figures.add(("trained", "batching_rounds", "side"), side_of_one(ratio), "whether its rounds' middle half lies "
                "wholly below 1, wholly above, or holds it")


def chunked_figures(trained: dict[str, Any], figures: Figures) -> None:
    """Chunked prefill against whole (where the record has it): per round and server, the streams' longest gap
    between tokens during the long prompt's wait for its first token (gaps_during; every gap where none overlaps
    it), their median gap and the long prompt's time to first token; whether every stream decoded from
    before the long prompt arrived until after its first token (else the gaps do not cover its prefill); and the
    chunked server's longest gap and time to first token over the whole one's, paired by round."""
    section = trained.get("chunked_prefill")
    if section is None:
        return
    where, streams = ("trained", "chunked_prefill"), section["streams"]
    values: dict[str, dict[str, list[Any]]] = {name: {} for name in ("longest_gap_s", "median_gap_s", "long_ttft_s",
                                                                      "spanned")}
    for name in ("whole", "chunked"):
        for figure in values.values():
            figure[name] = []
        for run in (round_["runs"][name] for round_ in section["rounds"]):
            gaps, long = [gap for request in run[:streams] for gap in request["itl_s"]], run[streams]
            during = [gap for request in run[:streams] for gap in gaps_during(request, long)]
            values["longest_gap_s"][name].append(max(during or gaps))
            values["median_gap_s"][name].append(median(gaps))
            values["long_ttft_s"][name].append(long["ttft_s"])
            values["spanned"][name].append(all(stream_spans(request, long) for request in run[:streams]))
    how = "each round's client-side times of the streams and of the long prompt"
    for figure, by_server in values.items():
        figures.add((*where, figure), by_server, how)
    for figure in ("longest_gap_s", "median_gap_s", "long_ttft_s"):
        figures.add((*where, "medians", figure), {name: median(rounds) for name, rounds in values[figure].items()},
                    "the median over rounds of each server's " + figure)
    figures.add((*where, "long_prompt_tokens"), section["rounds"][0]["runs"]["whole"][streams]["prompt_tokens"],
                "the server's usage of the long prompt")
    figures.add((*where, "all_spanned"), all(all(flags) for flags in values["spanned"].values()),
                "every round's streams decoded across the long prompt's prefill")
    for name, figure in (("gap", "longest_gap_s"), ("ttft", "long_ttft_s")):
        ratio = paired(values[figure]["chunked"], values[figure]["whole"])
        figures.add((*where, f"{name}_paired"), ratio, f"per round, the chunked server's {figure} / the whole one's: "
                    "median and middle half")
        figures.add((*where, f"{name}_side"), side_of_one(ratio), "whether its rounds' middle half lies wholly below "
                    "1, wholly above, or holds it")
    stalls = [longest / usual for longest, usual in zip(values["longest_gap_s"]["whole"],
                                                         values["median_gap_s"]["whole"], strict=True)]
    figures.add((*where, "whole_stall_over_gap"), median(stalls), "per round, the whole server's longest gap / its "
                "median gap: the median over rounds")


def gaps_during(stream: dict[str, Any], long: dict[str, Any]) -> list[float]:
    """A stream's gaps between tokens that overlap the long prompt's wait for its first token (from its sending to
    that token): the pauses its prefill can have caused, not a stall at another moment of the run."""
    start, end = long["sent_s"], long["sent_s"] + long["ttft_s"]
    during, last = [], stream["sent_s"] + stream["ttft_s"]
    for gap in stream["itl_s"]:
        if last < end and last + gap > start:
            during.append(gap)
        last += gap
    return during


def stream_spans(stream: dict[str, Any], long: dict[str, Any]) -> bool:
    """Whether a stream had its first token before the long prompt was sent and its last after the long prompt's
    first token: only then do its gaps cover the long prompt's whole prefill."""
    first = stream["sent_s"] + stream["ttft_s"]
    return first <= long["sent_s"] and first + sum(stream["itl_s"]) >= long["sent_s"] + long["ttft_s"]


def client_figures(row: dict[str, Any], where: JsonPath, figures: Figures) -> None:
    """One context's rounds of what a client sees per token: per round the client's median gap between tokens
    over the in-process step's median, paired (labkit.summary.paired) with the side of 1 its middle half lies on;
    and each side's median over every round, this run's absolute times."""
    steps = [median(durations) for durations in row["in_process_ns"]]
    gaps = [median(durations) for durations in row["client_gaps_ns"]]
    ratio = paired(gaps, steps)
    figures.add((*where, "paired"), ratio, "per round, the client's median gap / the in-process step's median: "
                "median and middle half")
    figures.add((*where, "side"), side_of_one(ratio), "whether its rounds' middle half lies wholly below 1, wholly "
                "above, or holds it")
    every = {"client_median_ns": [gap for gaps_ in row["client_gaps_ns"] for gap in gaps_],
             "in_process_median_ns": [ns for durations in row["in_process_ns"] for ns in durations],
             "client_ttft_median_ns": row["client_ttft_ns"]}
    medians = {name: as_number(median(values)) for name, values in every.items()}
    for name, value in medians.items():
        figures.add((*where, name), value, "every round's raw values")
    figures.add((*where, "added_ns"), medians["client_median_ns"] - medians["in_process_median_ns"],
                "the client's median gap - the in-process step's median")


def memory_figures(record: dict[str, Any], figures: Figures) -> None:
    """Resident memory while the trained model prefilled prompts of distinct lengths: its growth after each prompt,
    what the packed kernel's prompts added, and the window's growth in all and per prompt with the spread of its
    prompts' moves, its noise and the verdict (formulas.memory_window, memory_noise). A record made before the
    section was measured has none."""
    section = record.get("memory")
    if section is None:
        return
    window, how = memory_window(section), "the resident bytes read before the first prompt and after each"
    levels, steps, growth = window.levels, window.steps, window.growth
    largest = max(abs(step) for step in steps)
    noise = memory_noise(largest)
    # NOTE: the chart's levels stand over the lowest reading, not the first: a process can hand memory back to the
    # system during the run (the allocator trimming what earlier work freed), and a fall is no state kept per length.
    lowest = min(levels)
    for name, value in (
            ("growth_bytes", [level - lowest for level in levels]), ("lowest_bytes", lowest - levels[0]),
            ("tokens", sum(section["lengths"])),
            ("packed_prompts", window.packed),
            ("packed_growth_bytes", levels[window.packed] - levels[0] if window.packed else None),
            ("window_start", window.start), ("window_prompts", len(steps)), ("window_growth_bytes", growth),
            ("per_length_bytes", growth / len(steps)), ("step_median_bytes", as_number(median(steps))),
            ("step_middle_half_bytes", [as_number(value) for value in middle_half(steps)]),
            ("largest_step_bytes", largest), ("peak_growth_bytes", max(levels) - lowest)):
        figures.add(("memory", name), value, how)
    judged = "the window's growth against NOISE_JUMPS x its largest step, at least MEMORY_FLOOR_BYTES"
    figures.add(("memory", "noise_bytes"), as_number(noise), judged)
    figures.add(("memory", "grows_above_bytes"), as_number(levels[window.start] - lowest + noise), judged)
    figures.add(("memory", "verdict"), memory_verdict(growth, noise), judged)


def derive(record: dict[str, Any]) -> Figures:
    """Every derivable figure, each computed from raw data only (durations, request rows, server counters)."""
    figures = Figures()
    config_figures(record, figures)
    step_figures(record, figures)
    summaries = {path: run_figures(path, run, figures) for path, run in runs(record)}
    admission_figures(record, figures)
    cancellation_figures(record, summaries, figures)
    target_figures(record, summaries, figures)
    trained_figures(record, summaries, figures)
    memory_figures(record, figures)
    figures.add(("equivalence", "tokens_identical"), not record["equivalence"]["ties"],
                "no step where alone chose another token (equivalence.ties)")
    return figures
