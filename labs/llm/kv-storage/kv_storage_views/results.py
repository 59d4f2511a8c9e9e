"""What the storage record establishes, in the reader's terms: the key results, the regime of each layout's
step, the takeaways whose wording depends on the data, and the answers to the page's check-yourself questions.
Every figure comes from the record; every comparative word is chosen here from it, and a step is called flat or
growing only where the difference exceeds the cells' own min–max spreads (verdict)."""

from __future__ import annotations

from typing import Any

from kv_storage.figures import CACHED
from labkit.regimes import FLAT_BAND
from site_hooks.blocks import Block, Table, answer, takeaway
from site_hooks.formatting import format_bytes, format_ratio, join, plural

from .decode_step import Step, format_us, per_step, ranked, untold


def us(value: float) -> str:
    return f"{format_us(value)} µs"


# How far a layout's step can be called flat, held to its cells' own spreads. The min–max spread is the noise
# measure: it is the one the page's noise flag and its ties read, and with seven repetitions a quartile rests on
# about two of them, so an interquartile range would hide the very outliers that make a cell noisy.
FLAT = "flat"  # medians within FLAT_BAND of the first over a fourfold span, each cell's spread narrower than the band
NOISY = "noisy"  # medians within the band over that span, but a cell's spread too wide to tell a FLAT_BAND change
MOVED = "moved"  # the median left the band within a fourfold span, beyond both cells' min–max ranges
HIDDEN = "hidden"  # the median left the band within a fourfold span, but inside the cells' ranges
SHORT = "short"  # flat to the sweep's end, which spans less than fourfold: no regime to name


def apart(a: Step, b: Step) -> bool:
    """The record can tell these two apart: their min–max ranges do not overlap."""
    return a.high < b.low or b.high < a.low


def verdict(record: dict[str, Any], mode: str) -> tuple[str, list[int]]:
    """One of the kinds above for ``mode``'s step, with the lengths it rests on (its flat span, or up to where it
    left the band)."""
    regime, table = record["regimes"][mode], per_step(record)
    lengths = list(table)
    if regime["overhead_bound"]:
        span = [n for n in lengths if n <= regime["flat_until"]]
        return (FLAT if all(table[n][mode].spread < FLAT_BAND for n in span) else NOISY), span
    beyond = [n for n in lengths if n > regime["flat_until"]]
    if not beyond:
        return SHORT, lengths
    span = [n for n in lengths if n <= beyond[0]]
    return (MOVED if apart(table[lengths[0]][mode], table[beyond[0]][mode]) else HIDDEN), span


def verdicts(record: dict[str, Any]) -> dict[str, dict[str, list[int]]]:
    """Per kind, the cached layouts of that kind and the lengths each rests on."""
    found: dict[str, dict[str, list[int]]] = {}
    for mode in CACHED:
        kind, span = verdict(record, mode)
        found.setdefault(kind, {})[mode] = span
    return found


def spread_range(record: dict[str, Any], spans: dict[str, list[int]]) -> str:
    """The spreads of the given layouts' cells over their spans: '7–89%'."""
    table = per_step(record)
    values = [table[n][mode].spread for mode, span in spans.items() for n in span]
    low, high = min(values), max(values)
    return f"{high:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low * 100:.0f}–{high:.0%}"


def reach(spans: dict[str, list[int]]) -> str:
    """'up to 128 tokens' when every layout's span ends there, else 'concat up to 128 and paged up to 64 tokens'."""
    ends = {span[-1] for span in spans.values()}
    return (f"up to {ends.pop()} tokens" if len(ends) == 1 else
            join([f"{mode} up to {span[-1]}" for mode, span in spans.items()]) + " tokens")


def who(spans: dict[str, list[int]]) -> str:
    """'every cached layout' when the spans cover every layout, else 'the concat and paged layouts'."""
    if len(spans) == len(CACHED):
        return "every cached layout"
    return f"the {join(list(spans))} layout{'s' if len(spans) > 1 else ''}"


def growth(record: dict[str, Any], spans: dict[str, list[int]]) -> str:
    """How far the prefix grew over each layout's span, the span the verdict rests on: '4-fold' when the spans
    share it, else '4-fold (prealloc) and 8-fold (concat)'."""
    folds = {mode: record["regimes"][mode]["flat_growth"] for mode in spans}
    if len(set(folds.values())) == 1:
        return f"{next(iter(folds.values())):g}-fold"
    return join([f"{fold:g}-fold ({mode})" for mode, fold in folds.items()])


def flat_sentence(record: dict[str, Any]) -> str:
    """Where each cached layout's step stayed flat, as far as its cells' spreads let the record tell, in one
    sentence per kind (a span shared by all is said once)."""
    first = record["lengths"][0]["length"]
    found, table = verdicts(record), per_step(record)
    sentences = []
    if FLAT in found:
        flat = found[FLAT]
        sentences.append(
            f"From {first} tokens {reach(flat)}, the step of {who(flat)} stayed within {FLAT_BAND:.0%} of its "
            f"{first}-token time, each cell's min–max spread under that, while the prefix it attends to grew "
            f"{growth(record, flat)}: overhead-bound, a fixed cost per call "
            f"rather than work that scales with the cache.")
    if NOISY in found:
        noisy = found[NOISY]
        sentences.append(
            f"From {first} tokens {reach(noisy)}, the median step of {who(noisy)} stayed within {FLAT_BAND:.0%} of "
            f"its {first}-token one while the prefix grew {growth(record, noisy)}, but the cells spread "
            f"{spread_range(record, noisy)} of their medians (min–max), too wide to tell a "
            f"{FLAT_BAND:.0%} change: this run cannot say whether {'they' if len(noisy) > 1 else 'it'} stayed flat "
            f"(overhead-bound).")
    if MOVED in found:
        moved = found[MOVED]
        up = all(table[span[-1]][m].median > table[first][m].median for m, span in moved.items())
        sentences.append(
            f"The step of {who(moved)} moved more than {FLAT_BAND:.0%} from its {first}-token time, beyond both "
            f"cells' min–max ranges, within a fourfold growth of the prefix: in this record it "
            f"{'grows' if up else 'changes'} with the cache.")
    if HIDDEN in found:
        hidden = found[HIDDEN]
        sentences.append(
            f"The median step of {who(hidden)} moved more than {FLAT_BAND:.0%} from its {first}-token one within a "
            f"fourfold growth of the prefix, but inside the cells' min–max ranges (they spread "
            f"{spread_range(record, hidden)}): this run cannot say whether it stayed flat.")
    if SHORT in found:
        sentences.append("The sweep spans less than a fourfold growth of the prefix: too short to name a regime.")
    return " ".join(sentences)


def all_agree(record: dict[str, Any]) -> bool:
    """Every cached layout matched full recomputation at every measured length (the appendix has the tolerance)."""
    return all(e["equivalence"][m]["within_tolerance"] for e in record["lengths"] for m in CACHED)


def speed_item(record: dict[str, Any]) -> str:
    length, steps = list(per_step(record).items())[-1]
    order = sorted(CACHED, key=lambda mode: steps[mode].median)
    full = steps["full"].median
    # Both modes of one length time the same steps: the ratio of medians is the per-step one.
    speedup = record["lengths"][-1]["speedup"][order[0]]["ratio_of_medians"]
    checked = ("every layout first matched full recomputation's logits" if all_agree(record) else
               "not every layout matched full recomputation's logits; see the appendix")
    return (f"Speed at {length} tokens ({checked}): a decode step took "
            + join([f"{us(steps[m].median)} {m}" for m in order])
            + f", against {us(full)} recomputing the prefix; {order[0]}, the fastest, was "
            + (f"{format_ratio(speedup)} faster than recomputation" if full > steps[order[0]].median else
               f"not faster than recomputation ({format_ratio(speedup)})") + ".")


def regime_item(record: dict[str, Any]) -> str:
    """The regime bullet: flat only where the cells could show a FLAT_BAND change, else the spread that hides it."""
    found, regimes = verdicts(record), record["regimes"]
    first = record["lengths"][0]["length"]
    if set(found) == {MOVED}:
        return (f"No flat span: every cached layout's step moved more than {FLAT_BAND:.0%} from its {first}-token "
                f"time, beyond both cells' min–max ranges, within a fourfold growth of the prefix, so this record "
                f"names no overhead-bound regime.")
    parts = []
    if FLAT in found:
        flat = found[FLAT]
        shortest = min(flat.values(), key=len)
        parts.append(
            f"Overhead-bound: from {first} to {shortest[-1]} tokens "
            f"{'every' if len(flat) == len(CACHED) else join(list(flat))} cached step stayed within {FLAT_BAND:.0%} "
            f"of its {first}-token time, each cell's spread under that, while the prefix grew "
            f"{min(regimes[m]['flat_growth'] for m in flat):g}-fold"
            + ("; the layouts differ by what each call does, not by how much they copy." if len(flat) == len(CACHED)
               else "."))
    unclear = {**found.get(NOISY, {}), **found.get(HIDDEN, {})}
    if unclear:
        said = (f"from {first} tokens {reach(unclear)} the cells of {who(unclear)} spread "
                f"{spread_range(record, unclear)} of their medians (min–max), too wide to tell whether the step stayed "
                f"within {FLAT_BAND:.0%}.")
        parts.append(f"{said[:1].upper()}{said[1:]}" if parts else f"Flat or not, this run cannot tell: {said}")
    if MOVED in found:
        parts.append(f"The step of {who(found[MOVED])} moved beyond its cells' ranges within a fourfold span.")
    if SHORT in found:
        parts.append("The sweep spans less than fourfold: too short to name a regime.")
    return " ".join(parts)


def paged_item(record: dict[str, Any]) -> str | None:
    fit = record["paged_overhead"]
    if fit is None:
        return None
    first, gap = record["lengths"][0]["length"], fit["gap_per_step_ns"][0]
    if gap <= 0:
        return f"Paging cost nothing measurable at {first} tokens: the paged step was not slower than preallocation."
    if fit["verdict"] == "unclear":
        return (f"Paging's price, fixed or growing, this run cannot split: {untold(fit, first, last_length(record))}; "
                f"by medians {us(gap / 1e3)} more per step at {first} tokens, and a line through every length "
                f"{fixed_part(fit)}.")
    last = last_length(record)
    if fit["verdict"] == "fixed":
        kind = ("here is mostly a fixed cost per step (table to index tensors, scatter, gather setup), not copying, "
                f"at {first} tokens and at {last}" if fit["mostly_fixed_at_longest"] else
                f"is mostly a fixed cost per step (table to index tensors, scatter, gather setup) at {first} tokens, "
                f"not at {last}")
    else:
        kind = "here is mostly the per-step gather, which grows with the prefix"
    return (f"Paging's price {kind}: {us(gap / 1e3)} more per step than preallocation at {first} "
            f"tokens; a line through every length {fixed_part(fit)}{longest_part(record)}.")


def last_length(record: dict[str, Any]) -> int:
    return record["lengths"][-1]["length"]


def longest_part(record: dict[str, Any]) -> str:
    """The line's intercept against the gap at the longest length, where a part fixed per step weighs least:
    '; at 1024 tokens those 59.7 µs are 48% of a 124.4 µs gap'; nothing where the line puts nothing fixed."""
    fit = record["paged_overhead"]
    fixed, gap, share = fit["intercept_ns"], fit["gap_per_step_ns"][-1], fit["fixed_share_at_longest"]
    if fixed <= 0:
        return ""
    last = last_length(record)
    if share is None:
        return f"; at {last} tokens the median paged step was not slower than preallocation"
    if share >= 1:
        return f"; at {last} tokens those {us(fixed / 1e3)} are no less than the whole {us(gap / 1e3)} gap"
    return f"; at {last} tokens those {us(fixed / 1e3)} are {share:.0%} of a {us(gap / 1e3)} gap"


def fixed_part(fit: dict[str, Any]) -> str:
    """What the line's intercept says about the gap at the shortest length, in words the numbers allow: an
    intercept at or above that gap is not "a share" of it (the line rises from there), one at or below zero is none."""
    gap, fixed = fit["gap_per_step_ns"][0], fit["intercept_ns"]
    if fixed >= gap:
        return (f"starts at {us(fixed / 1e3)} at zero prefix, no less than that whole gap, and rises "
                f"{fit['slope_ns_per_position']:,.0f} ns per cached position")
    if fixed <= 0:
        return (f"puts nothing at zero prefix ({us(fixed / 1e3)}) and rises {fit['slope_ns_per_position']:,.0f} ns per "
                f"cached position: the whole gap grows with the prefix")
    return (f"puts {us(fixed / 1e3)} of it ({fit['fixed_share']:.0%}) at zero prefix and adds "
            f"{fit['slope_ns_per_position']:,.0f} ns per cached position")


def memory_item(record: dict[str, Any]) -> str:
    memory = record["memory"]
    variants = memory["variants"]
    ratios = join([f"{mode} {format_ratio(v['peak_ratio'])}" for mode, v in variants.items()])
    kept = {v["retained_bytes"] for v in variants.values()}
    held = (f"all three end holding {format_bytes(kept.pop(), binary=True)}" if len(kept) == 1 else
            "they end holding " + join([f"{format_bytes(v['retained_bytes'], binary=True)} ({m})"
                                        for m, v in variants.items()]))
    return (f"Peak is not retained: after a {memory['length']}-step loop {held}, but the allocator's peak was, as a "
            f"multiple of that, {ratios}.")


def sharing_item(record: dict[str, Any]) -> str:
    sharing = record["sharing"]
    without, shared = sharing["without"], sharing["with"]
    return (f"Prefix sharing: {sharing['requests']} requests on one {sharing['prompt']}-token prompt held "
            f"{shared['blocks']} blocks instead of {without['blocks']} ({sharing['saved_share']:.0%}"
            f" fewer bytes); {plural(shared['copied_blocks'], 'request')} copied the prompt's partly filled last "
            f"block on first write.")


def key_results_view(record: dict[str, Any]) -> Block:
    """At most five claims, each with its number; the equivalence's tolerance is in the appendix's view."""
    items = [speed_item(record), regime_item(record), paged_item(record), memory_item(record), sharing_item(record)]
    return Block(css="lab-key-results", items=[item for item in items if item])


def regime_view(record: dict[str, Any]) -> Block:
    """Median µs per decode step per mode and length, the flat span of each cached layout, the paged gap."""
    table = per_step(record)
    modes = record["config"]["benchmark"]["modes"]
    lengths = list(table)
    # full ÷ the fastest cached layout: the largest of the derived ratios (both time the same steps)
    rows = [(entry["length"], *(format_us(table[entry["length"]][m].median) for m in modes),
             format_ratio(max(entry["speedup"][m]["ratio_of_medians"] for m in CACHED))) for entry in record["lengths"]]
    steps = Table(headings=["Prefix (tokens)", *(f"{m}: µs per step" for m in modes), "full ÷ fastest cached"],
                  rows=rows)
    grew = record["regimes"]["full"]["step_growth"]
    ends = [table[lengths[0]]["full"], table[lengths[-1]]["full"]]
    took = (f"Recomputing the prefix took {us(table[lengths[-1]]['full'].median)} per step at {lengths[-1]} tokens, "
            f"{grew:.2f} times its {lengths[0]}-token step")
    full_sentence = (f"Recomputing the prefix grew {grew:.1f}-fold from {lengths[0]} to {lengths[-1]} tokens, beyond "
                     f"both cells' min–max ranges: work that scales. Whether arithmetic or memory traffic limits it at "
                     f"this size, this record cannot tell." if grew > 1 + FLAT_BAND and apart(*ends) else
                     f"{took}: over so short a sweep it did not grow."
                     if abs(grew - 1) <= FLAT_BAND and all(step.spread < FLAT_BAND for step in ends) else
                     f"{took}, but its cells spread {ends[0].spread:.0%} and {ends[1].spread:.0%} of their medians: "
                     f"this run cannot tell whether it grew.")
    fit = record["paged_overhead"]
    extra = []
    if fit is not None and fit["gap_per_step_ns"][0] > 0:
        gaps = fit["gap_per_step_ns"]
        extra.append(f"Paged minus preallocated: {us(gaps[0] / 1e3)} per step at {lengths[0]} tokens and "
                     f"{us(gaps[-1] / 1e3)} at {lengths[-1]}; a least-squares line puts {us(fit['intercept_ns'] / 1e3)} "
                     f"at zero prefix and adds {fit['slope_ns_per_position']:,.0f} ns per cached position.")
    return Block(paragraphs=[flat_sentence(record), *extra, full_sentence], tables=[steps])


def answer_sharing_view(record: dict[str, Any]) -> Block:
    s = record["sharing"]
    size, prompt, tokens, n = s["block_size"], s["prompt"], s["tokens"], s["requests"]
    full, own = s["prompt_full_blocks"], s["own_blocks"]
    return answer(f"Alone, each request needs ⌈({prompt} + {tokens}) / {size}⌉ = {s['per_request_blocks']} blocks: "
                  f"{s['without']['blocks']} for {n}. Shared, the prompt's {plural(full, 'full block')} "
                  f"{'is' if full == 1 else 'are'} stored once; each request then holds its own {plural(own, 'block')}, "
                  f"the last prompt block (holding {s['prompt_last_block_positions']} of {size} positions) and its "
                  f"continuation: {full} + {n} × {own} = {s['with']['blocks']}. That last block is shared and partly "
                  f"filled, so every request but the one left as its sole holder copies it on first write: "
                  f"{s['with']['copied_blocks']} copies.")


def answer_peak_view(record: dict[str, Any]) -> Block:
    memory = record["memory"]
    v = memory["variants"]
    concat, prealloc = v["concat"], v["prealloc"]
    text = (f"At its last step torch.cat builds the new {memory['length']}-position cache while the old one is "
            f"still alive, so for a moment both exist: a peak of {concat['peak_bytes']:,} bytes against "
            f"{concat['retained_bytes']:,} kept ({format_ratio(concat['peak_ratio'])}). "
            f"Preallocation writes into buffers it already holds; its peak, {prealloc['peak_bytes']:,} bytes, is the "
            f"buffers plus one step's activations. Over the loop concatenation allocated "
            f"{memory['concat_vs_prealloc']['allocated']:.0f}× as many bytes: every step copies the whole prefix.")
    if "paged" in v:
        text += (f" Paged storage peaked at {format_ratio(v['paged']['peak_ratio'])} its blocks for a different "
                 f"reason: this lab's read gathers the whole request into a temporary copy each step.")
    return answer(text)


def answer_paged_view(record: dict[str, Any]) -> Block:
    fit = record["paged_overhead"]
    if fit is None:
        return answer("This record has too few lengths to split the paged step's cost.")
    lengths = [entry["length"] for entry in record["lengths"]]
    gaps = fit["gap_per_step_ns"]
    fixed = (f"Most of it is bookkeeping per call, not copying that grows with the cache, at {lengths[0]} tokens and "
             f"at {lengths[-1]}." if fit["mostly_fixed_at_longest"] else
             f"At {lengths[0]} tokens most of it is bookkeeping per call; at {lengths[-1]} most of it is not.")
    lead = (fixed if fit["verdict"] == "fixed" else
            "Most of it grows with the prefix, as the gather's copy does." if fit["verdict"] == "grows" else
            f"This run cannot say which part dominates: {untold(fit, lengths[0], lengths[-1])}.")
    return answer(f"{lead} At {lengths[0]} tokens the median paged step cost {us(gaps[0] / 1e3)} more than preallocation; "
                  f"a line through the gap at every length {fixed_part(fit)}; at zero prefix there is nothing to "
                  f"copy{longest_part(record)}. The fixed part is Python bookkeeping per call (index tensors from the "
                  f"table, a scatter, the gather's setup); the growing part is the gather's copy, which takes the gap to "
                  f"{us(gaps[-1] / 1e3)} at {lengths[-1]} tokens. A kernel that reads blocks in place avoids the "
                  f"gather, and batching many requests per call spreads the fixed part.")


# --- takeaways whose wording depends on the record ---------------------------------------------------------

def takeaway_step_view(record: dict[str, Any]) -> Block:
    """Which layout the record shows fastest at the longest prefix, and what paging's extra time is made of."""
    length, steps = list(per_step(record).items())[-1]
    fastest = ranked(steps, list(CACHED)).split(" < ")[0].split(" = ")
    who = (f"{fastest[0]} was the fastest layout" if len(fastest) == 1 else
           f"{join(fastest)} tied as the fastest layouts")
    fit = record["paged_overhead"]
    paged = ("" if fit is None or fit["gap_per_step_ns"][0] <= 0 else
             "; paging's extra time is mostly bookkeeping fixed per step"
             + ("" if fit["mostly_fixed_at_longest"] else f" at {record['lengths'][0]['length']} tokens, not at {length}")
             if fit["verdict"] == "fixed" else
             "; paging's extra time mostly grows with the prefix, as its gather's copy does"
             if fit["verdict"] == "grows" else
             "; whether paging's extra time is fixed per step or grows, this run's ranges cannot tell")
    return takeaway(f"at {length} tokens {who} (median {us(steps[fastest[0]].median)} per step){paged}.")


def takeaway_memory_view(record: dict[str, Any]) -> Block:
    variants = record["memory"]["variants"]
    order = sorted(variants, key=lambda mode: variants[mode]["peak_ratio"], reverse=True)
    return takeaway("budget by peak, not by retained bytes: over the loop the allocator's peak was "
                    + join([f"{format_ratio(variants[m]['peak_ratio'])} what {m} retains" for m in order]) + ".")
