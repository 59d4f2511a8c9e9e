"""One request's decode step on the trained model, as the server runs it, beside the decode lab's fastest float32
step at the same contexts and thread count (that lab's record): what a stream alone waits for per token here,
against the fastest step this site measured for the same model. Set side by side only when both records were
measured in one run (labkit.runs.same_run): one CPU model on two days is not one machine state."""

from __future__ import annotations

from typing import Any

from kv_serving.figures import formulas
from labkit.runs import same_run
from labkit.summary import MIN_PARTED
from llm_models.llama.kinds import ONE_CALL
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_ratio, join, plural
from site_hooks.other_records import reference_record

from .common import thread_counts

DECODE_LAB = "decode-bandwidth"


def ms_range(triple: tuple[float, float, float]) -> str:
    """'48.1 ms (47.0–50.2)': a median and its min–max."""
    median, low, high = (format_ms(value) for value in triple)
    return f"{median} ms ({low}–{high})"


def more_or_less(nanoseconds: float) -> str:
    """'4.30 ms more' or '1.20 ms less'."""
    return f"{format_ms(abs(nanoseconds), 2)} ms {'less' if nanoseconds < 0 else 'more'}"


def order_words(row: formulas.BesideDecode) -> str:
    """Faster or slower only where the two cells' min–max ranges lie apart; overlapping ranges, or too few timed steps
    for a range to mean anything, call neither faster."""
    if row.repeats < MIN_PARTED:
        return f"too few steps to tell (fewer than {MIN_PARTED} in a cell)"
    if not row.parted:
        return "ranges overlap: neither faster"
    return "apart: served slower" if row.ratio > 1 else "apart: served faster"


PAIRED_WORDS = {"below": "faster in its rounds", "above": "slower in its rounds", "within": "within its rounds' noise"}


def paired_words(row: formulas.BesideDecode) -> str:
    """'1.05× (1.03–1.14), slower in its rounds': the served step over the decode lab's best as that lab's paired
    rounds timed it (the median of per-round ratios and their middle half), a direction only where the middle half
    lies wholly on one side of 1; a dash where the decode record predates that measurement."""
    if row.paired is None or row.paired_side is None:
        return "–"
    ratio = row.paired
    return f"{format_ratio(ratio['median'])} ({ratio['low']:.2f}–{ratio['high']:.2f}), {PAIRED_WORDS[row.paired_side]}"


def growth_words(what: str, nanoseconds: float, first: tuple[float, float, float], last: tuple[float, float, float],
                 repeats: int, contexts: tuple[int, int]) -> str:
    """'the served step took 6.120 ms more at 1,024 positions than at 128' where the two cells lie apart; otherwise
    that their ranges overlap, with the medians' gap, never called more or less."""
    if formulas.ranges_apart(first, last, repeats):
        return f"{what} took {more_or_less(nanoseconds)} at {contexts[1]:,} positions than at {contexts[0]:,}"
    return (f"{what} at {contexts[0]:,} and at {contexts[1]:,} positions: ranges overlap, medians "
            f"{format_ms(abs(nanoseconds), 2)} ms apart")


def way_words(record: dict[str, Any]) -> str:
    """How the served steps ran, as a clause: the decode lab's one-call step, or the decoder's layer in torch."""
    if record["trained"]["decode_way"] == ONE_CALL:
        return " by the decode lab's one-call step (every layer in one C call, each block read through its table)"
    return " by the decoder's layer in torch, one operation at a time (the one-call step could not run)"


def solo_view(record: dict[str, Any]) -> Block:
    decode = reference_record(DECODE_LAB)
    rows = formulas.beside_decode(record, decode)
    steps = record["trained"]["solo_steps"]
    dtype = record["trained"]["model"]["dtype"]  # the trained model's, not the random model's probe choice
    counts = sorted({s["threads"] for s in steps})
    threads = thread_counts(counts)
    if not same_run(record, decode):  # NOTE: two runs' step times are never set side by side
        table = Table(["Threads", "Context", f"Served step, {dtype}"],
                      [(f"{s['threads']}", f"{s['context']:,}", ms_range((s["median_ns"], s["min_ns"], s["max_ns"])))
                       for s in steps])
        return Block(paragraphs=[
            f"One request alone on the trained model: the server's own decode step at each context, at {threads}, "
            f"in {dtype}, its blocks read in place{way_words(record)} (medians, with each cell's min–max). The "
            f"decode lab's "
            f"record, whose fastest float32 step this table would stand beside, comes from a different run "
            f"({formulas.cpu_of(decode)}, {decode['created_utc'][:10]}; this one: {formulas.cpu_of(record)}, "
            f"{record['created_utc'][:10]}); a step time is set beside another only when both were measured in "
            f"one run."], tables=[table])
    if not rows:
        contexts = join(list(dict.fromkeys(str(s["context"]) for s in steps)))
        return Block(paragraphs=[f"The decode lab's record times no trained step at contexts {contexts} on "
                                 f"{threads}, so there is nothing to set the served step beside."])
    paired = dtype == "float32" and any(row.paired is not None for row in rows)  # the decode lab times float32 only
    table = Table(["Threads", "Context", f"Served step, {dtype}", "Decode lab's fastest, float32", "Mode",
                   "Served ÷ fastest", "Min–max ranges", *(["Paired in the decode lab's rounds"] if paired else [])],
                  [(f"{row.threads}", f"{row.context:,}", ms_range(row.served), ms_range(row.decode), row.decode_mode,
                    format_ratio(row.ratio), order_words(row), *([paired_words(row)] if paired else []))
                   for row in rows])
    paragraphs = [
        f"One request alone on the trained model: the server's own decode step at each context, at {threads}, "
        f"in {dtype}, its blocks read in place{way_words(record)}; beside it, "
        f"the fastest float32 mode the decode lab timed on the same weights, contexts and thread count (its record "
        f"of {decode['created_utc'][:10]}, measured in the same run).",
        "Medians, with each cell's min–max: a row calls the served step slower or faster only where every one of its "
        "timed steps lies beyond every one of the other cell's."]
    if paired:
        paragraphs.append(
            "Those two cells were timed minutes apart, in two processes, so the machine's drift between them is in "
            "their ratio. The decode lab also times this same served step inside its own rounds, one step of every "
            "mode per round, and the last column is that ratio: the median of the per-round ratios to its best "
            "float32 mode, with their middle half, a direction named only where the middle half lies wholly on one "
            "side of 1. Where the two columns disagree, the paired one is the measurement to trust.")
    for count in dict.fromkeys(row.threads for row in rows):
        same = [row for row in rows if row.threads == count]
        growth = formulas.growth_over_decode(same)
        if growth is not None:
            served, fastest, _ = growth
            first, last = same[0], same[-1]
            contexts = (first.context, last.context)
            modes = (f" (its fastest mode {first.decode_mode} at {first.context:,}, {last.decode_mode} at "
                     f"{last.context:,})" if first.decode_mode != last.decode_mode else "")
            repeats = min(first.repeats, last.repeats)
            served_words = growth_words("the served step", served, first.served, last.served, repeats, contexts)
            decode_words = growth_words("the decode lab's fastest step", fastest, first.decode, last.decode, repeats, contexts)
            paragraphs.append(f"At {plural(count, 'thread')}, {served_words}; {decode_words}{modes}.")
    return Block(paragraphs=paragraphs, tables=[table])
