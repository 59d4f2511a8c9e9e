""""What one step costs": the batched decode step against batch size, and where a larger batch stepped faster."""

from __future__ import annotations

import re
from typing import Any

from labkit.regimes import FLAT_BAND
from site_hooks.blocks import Block, Chart, Table
from site_hooks.chart import Series, line_chart
from site_hooks.formatting import format_ms, plural, spelled


def step_view(record: dict[str, Any]) -> Block:
    """The step at every batch size, charted and tabled, with the weight multiplications timed apart."""
    rows = sorted(record["step_times"], key=lambda r: r["batch"])
    first, last = rows[0], rows[-1]
    scaling = record["step_scaling"]
    chart = line_chart(
        [Series("one decode step (ms)", [r["batch"] for r in rows], [r["median_ns"] / 1e6 for r in rows],
                [r["min_ns"] / 1e6 for r in rows], [r["max_ns"] / 1e6 for r in rows]),
         Series("its weight multiplications alone (ms)", [r["batch"] for r in rows],
                [r["weights"]["median_ns"] / 1e6 for r in rows], [r["weights"]["min_ns"] / 1e6 for r in rows],
                [r["weights"]["max_ns"] / 1e6 for r in rows]),
         Series("per token (ms)", [r["batch"] for r in rows], [r["per_token_median_ns"] / 1e6 for r in rows],
                [r["per_token_min_ns"] / 1e6 for r in rows], [r["per_token_max_ns"] / 1e6 for r in rows])],
        title="One batched decode step against batch size", x_label="requests in the batch", y_label="milliseconds",
        description="; ".join(f"batch {r['batch']}: {format_ms(r['median_ns'], 2)} ms per step, {format_ms(r['weights']['median_ns'], 2)} "
                              f"ms of weight multiplications" for r in rows))
    paragraphs = [
        f"A step for {last['batch']} requests took {format_ms(last['median_ns'], 2)} ms (median), "
        f"{scaling['growth']:.1f} times the {format_ms(first['median_ns'], 2)} ms of a step for {first['batch']}, while "
        f"producing {scaling['widening']:g} times the tokens: {last['tokens_per_s']:,.0f} against "
        f"{first['tokens_per_s']:,.0f} tokens per second, measured in-process with no HTTP in the way.",
        regime_sentence(record), weights_sentence(record)]
    config = record["config"]["benchmark"]
    rows_out = [(r["batch"], format_ms(r["median_ns"], 2), f"{format_ms(r['min_ns'], 2)} – {format_ms(r['max_ns'], 2)}", format_ms(r["weights"]["median_ns"], 2),
                 format_ms(r["rest_ns"], 2), format_ms(r["weights_per_request_ns"], 2),
                 f"{r['tokens_per_s']:,.0f}") for r in rows]
    return Block(css="lab-medians", paragraphs=paragraphs,
                 charts=[Chart(chart, f"Median of {config['repeats']} timed steps after "
                                      f"{plural(config['step_warmup'], 'untimed one')}; whiskers from the fastest to "
                                      f"the slowest.")],
                 tables=[Table(["Batch", "Median step (ms)", "Range (ms)", "Weights alone (ms)", "Rest of the step (ms)",
                                "Weights per request (ms)", "Tokens per second"], rows_out)],
                notes=["“Weights alone” times the step's multiplications by weight matrices (every layer's fused "
                       "projection, output projection and feed-forward network, and the output head) on a batch of "
                       "that many rows, without attention or the cache writes. “Rest of the step” is "
                       "the median step minus that median: attention over the blocks, the writes, and "
                       "Python."
                       + (" The two medians come from separate timings, so where the rest is small their difference "
                          "can fall below zero, as it does here." if any(r["median_ns"] < r["weights"]["median_ns"]
                                                                         for r in rows) else "")])


def regime_sentence(record: dict[str, Any]) -> str:
    """How much of a step the batch shares, by the regime the figures derived from the step's growth."""
    scaling = record["step_scaling"]
    low, high = scaling["growth_range"]
    grew = (f"From the smallest batch to the largest ({scaling['widening']:g}× the rows) the step grew "
            f"{low:.2f}–{high:.2f}× (the middle halves of their timed steps)")
    said = {"flat": (f"{grew}: flat within {FLAT_BAND:.0%}, a fixed cost per step (reading the weights, per-call "
                     "overhead) that the whole batch shares."),
            "shared": f"{grew}, under half as fast as the rows: most of a step is a cost the batch shares (reading "
                      "the weights, per-call overhead).",
            "per-row": f"{grew}, at least half as fast as the rows: little of a step is shared.",
            "unresolved": f"{grew}: a span wide enough to read two ways, so this run cannot say how much of a step "
                          "the batch shares."}
    return said[scaling["regime"]]


def weights_sentence(record: dict[str, Any]) -> str:
    """What share of a one-request step its weight multiplications take, and what that does and does not name."""
    one = min(record["step_times"], key=lambda r: r["batch"])
    share = one["weights_share"]
    took = (f"took {share:.0%} of the step" if share < 1 else
            f"took about all of the step ({share:.0%}: two separate timings, the weights' with no attention around "
            "them)")
    return (f"For {plural(one['batch'], 'request')}, the weight multiplications alone {took}: "
            + ("a one-request step is mostly a pass over the weights, which more rows can share. Whether that pass is "
               "limited by memory bandwidth needs a floor measured on the same machine, as the decode page does."
               if share >= 0.5 else
               "most of a one-request step is attention, the gather, the writes and Python, which each row pays again."))


def steps_detail_view(record: dict[str, Any]) -> Block:
    """Where a larger batch stepped faster than a smaller one, and what the weight multiplications show."""
    return Block(css="lab-findings", paragraphs=step_order_sentences(record))


def step_order_sentences(record: dict[str, Any]) -> list[str]:
    """Where a larger batch stepped faster than a smaller one: whether that is noise, and what the weight
    multiplications alone show about it."""
    rows = sorted(record["step_times"], key=lambda r: r["batch"])
    inversion = record["step_scaling"]["inversion"]
    if inversion is None:
        return [f"The median step grew with the batch at every measured size, from {format_ms(rows[0]['median_ns'], 2)} ms "
                f"for {rows[0]['batch']} to {format_ms(rows[-1]['median_ns'], 2)} ms for {rows[-1]['batch']}."]
    slow, fast = (next(r for r in rows if r["batch"] == inversion[which]) for which in ("smaller_batch", "larger_batch"))
    separate = slow["min_ns"] > fast["max_ns"]
    repeats = len(slow["durations_ns"])
    sentences = [
        f"The step time does not grow with the batch everywhere: a step for {slow['batch']} requests took "
        f"{format_ms(slow['median_ns'], 2)} ms ({format_ms(slow['min_ns'], 2)} to {format_ms(slow['max_ns'], 2)}), longer than one for "
        f"{fast['batch']} at {format_ms(fast['median_ns'], 2)} ms ({format_ms(fast['min_ns'], 2)} to {format_ms(fast['max_ns'], 2)}). "
        + (f"Even the fastest of the {repeats} timed steps for {slow['batch']} was slower than the slowest for "
           f"{fast['batch']}, so this is not noise between repeats." if separate else
           f"The two ranges of {repeats} timed steps overlap, so the order may be noise between repeats.")]
    one = rows[0]
    w_slow, w_fast, w_one = (r["weights"]["median_ns"] for r in (slow, fast, one))
    # NOTE: the weights' own order counts only where their timed repeats part, as the step's does above
    weights_apart = min(slow["weights"]["durations_ns"]) > max(fast["weights"]["durations_ns"])
    if w_slow > w_fast and not weights_apart:
        sentences.append(
            f"The weight multiplications alone took {format_ms(w_slow, 2)} ms for {slow['batch']} rows and "
            f"{format_ms(w_fast, 2)} ms for {fast['batch']} ({format_ms(w_one, 2)} ms for {one['batch']}), but their "
            f"timed repeats overlap, so they cannot say whether the matrix library treats these row counts "
            f"differently: at these sizes reading the weights costs about the same whatever the batch.")
    elif w_slow > w_fast:
        per_slow, per_fast, per_one = (r["weights_per_request_ns"] for r in (slow, fast, one))
        rest = [slow["rest_ns"], fast["rest_ns"]]
        sentences.append(
            f"The weight multiplications alone show the same inversion: {format_ms(w_slow, 2)} ms for {slow['batch']} rows "
            f"against {format_ms(w_fast, 2)} ms for {fast['batch']}, and {format_ms(w_one, 2)} ms for {one['batch']}. Per request, they "
            f"cost {format_ms(per_slow, 2)} ms at batch {slow['batch']}, against {format_ms(per_one, 2)} ms at batch {one['batch']} and "
            f"{format_ms(per_fast, 2)} ms at batch {fast['batch']}: with {spelled(slow['batch'])} rows the matrix library "
            f"({blas(record)}, as this PyTorch build names it, on "
            f"{plural(record['config']['benchmark']['threads'], 'thread')}) shares "
            f"{'little' if per_slow > 0.6 * per_one else 'some'} of the reading of the weights between the rows, "
            f"and with {spelled(fast['batch'])} it shares {'far ' if per_fast < 0.5 * per_slow else ''}more. It "
            f"evidently multiplies these two row counts in different ways, and the step inherits that. "
            + (f"The rest of the step (attention, the gather, the writes) took {format_ms(rest[0], 2)} and {format_ms(rest[1], 2)} ms at "
               f"these two sizes, so it is not the cause." if min(rest) > 0 else
               "The rest of the step (attention, the gather, the writes) is within the noise of the two timings at "
               "these sizes, so it is not the cause."))
    else:
        sentences.append(
            f"The weight multiplications alone do not show it ({format_ms(w_slow, 2)} ms for {slow['batch']} rows, "
            f"{format_ms(w_fast, 2)} ms for {fast['batch']}), so the difference lies in the rest of the step.")
    return sentences


def blas(record: dict[str, Any]) -> str:
    """The matrix library the record's PyTorch build names, if it names one."""
    found = re.search(r"BLAS_INFO=(\w+)", record["environment"]["torch"].get("build_config") or "")
    return found.group(1) if found else "unknown"
