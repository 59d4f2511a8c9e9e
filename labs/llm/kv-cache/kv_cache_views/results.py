"""What the record establishes, in the reader's terms: the key results, the regime of each path, the takeaways
whose wording depends on the data, and the answers to the page's check-yourself questions. Every figure is
derived from the record when it is read (the sweep's statistics and regimes, labkit.summary; the cache's bytes, the real models' capacity and
the cached step's read and each mode's step shape, kv_cache.figures); every comparative word is chosen here from
those figures, and a step is called flat, growing or risen only where the derived shape says the difference exceeds
the cells' own min–max spreads (kv_cache.figures.step_shape)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kv_cache.figures import (
    BASE_FORMAT,
    CONTEXTS,
    EXAMPLE_BATCH,
    EXAMPLE_MODEL,
    MEMORY_GIB,
    SMALL_FORMAT,
    SMALL_MODEL,
    Cell,
    cells,
    mask_row,
    prefix_read,
    steady_rise_from,
)
from labkit.regimes import FLAT_BAND, OVERHEAD_GROWTH
from llm_models.published import model
from site_hooks.blocks import Block, Table, answer, takeaway
from site_hooks.formatting import format_bytes, format_ratio, join

from .capacity import gib


def ratio(entry: dict[str, Any]) -> float:
    return entry["speedup"]["cached"]["ratio_of_medians"]


def us(value: float) -> str:
    return f"{value:,.0f} µs"


def per_step_us(record: dict[str, Any], mode: str) -> dict[int, float]:
    """The median per decode step of ``mode``, derived from the record, at each length, in µs."""
    return {e["length"]: e["modes"][mode]["per_step"]["median_ns"] / 1e3 for e in record["lengths"]}


def agree(record: dict[str, Any]) -> bool:
    return all(e["equivalence"]["cached"]["within_tolerance"] for e in record["lengths"])


def grew(growth: float) -> str:
    """A derived ratio later / earlier as a signed percentage: '+15%', '−3%'."""
    return f"{growth - 1:+.0%}".replace("-", "−")


def spreads(low_high: list[float]) -> str:
    """A derived [lowest, highest] spread of cells as a range: '21–43%'."""
    low, high = low_high
    return f"{high:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low * 100:.0f}–{high:.0%}"


@dataclass(frozen=True)
class Shape:
    """What one mode's step did over the sweep, as far as its cells' own spreads let the record tell: the derived
    step_shapes figures (kv_cache.figures.step_shape) beside the cells they were derived from."""

    cells: dict[int, Cell]
    stored: dict[str, Any]

    @property
    def lengths(self) -> list[int]:
        return list(self.cells)

    @property
    def flat(self) -> tuple[int, int]:
        start, until = self.stored["flat"]
        return start, until

    @property
    def runs(self) -> list[list[int]]:
        return self.stored["runs"]

    @property
    def grows(self) -> bool:
        return self.stored["grows"]

    @property
    def overhead_bound(self) -> bool:
        return self.stored["overhead_bound"]

    @property
    def flat_to_end(self) -> bool:
        return self.stored["flat_to_end"]

    @property
    def verdict(self) -> str:
        return self.stored["verdict"]


def shape(record: dict[str, Any], mode: str) -> Shape:
    """The derived shape of ``mode``'s step (kv_cache.figures.step_shape) with its cells in µs."""
    return Shape(cells=cells(record, mode), stored=record["step_shapes"][mode])


def flat_span(s: Shape) -> str:
    """'up to 128 tokens' for a flat span from the sweep's first length, else 'from 128 to 512 tokens'."""
    start, until = s.flat
    return f"up to {until} tokens" if start == s.lengths[0] else f"from {start} to {until} tokens"


def flat_sentence(record: dict[str, Any]) -> str:
    s = shape(record, "cached")
    c, lengths = s.cells, s.lengths
    first, last = lengths[0], lengths[-1]
    if s.overhead_bound:
        start, until = s.flat
        return (f"From {start} to {until} tokens a cached step stayed within {FLAT_BAND:.0%} of {us(c[start].median)}, "
                f"each cell's min–max spread under that, while the prefix it attends to grew "
                f"{s.stored['flat_growth']:g}-fold: that span is overhead-bound, a fixed cost per call rather than work "
                f"that scales with the cache.")
    if s.grows:
        return (f"A cached step took {us(c[first].median)} at {first} tokens and {us(c[last].median)} at {last}: it "
                f"grew beyond its cells' min–max ranges across every fourfold span of the prefix, so this record "
                f"shows no overhead-bound span.")
    (start, until), growth = s.stored["longest_run"], s.stored["longest_run_growth"]
    if growth < OVERHEAD_GROWTH:
        return (f"No fourfold span of the sweep either stayed within {FLAT_BAND:.0%} with narrow cells or grew beyond "
                f"its cells' min–max ranges (they spread {spreads(s.stored['spread_range'])} of their medians): this "
                f"run cannot say whether any span of the cached step is overhead-bound.")
    return (f"From {start} to {until} tokens ({growth:g}-fold) no two cached steps differ beyond "
            f"{FLAT_BAND:.0%} and both their min–max ranges, whose {spreads(s.stored['longest_run_spread_range'])} "
            f"spreads are too wide to tell a {FLAT_BAND:.0%} change: this run cannot say whether that span is flat "
            f"(overhead-bound) or still growing.")


def attribution(rise: dict[str, Any], bandwidth: float | None) -> str:
    """Whether the record lets a derived rise (kv_cache.figures.departure) be put down to reading the prefix: only
    when the bytes the cache grew by take about as long (kv_cache.figures.prefix_read) at a bandwidth the record
    measured."""
    extra = rise["extra_bytes"]
    if bandwidth is None:
        return (f"; this run measured no memory bandwidth, so the page does not put that rise ({extra:,} more bytes "
                f"of cache) down to reading the prefix")
    read = prefix_read(extra, rise["rise_us"], bandwidth)
    rate = f"the {bandwidth / 1e9:,.1f} GB/s this run measured"
    if read["is_read"]:
        return (f": reading the {extra:,} bytes the cache grew by takes about {read['read_us']:,.1f} µs at {rate}, so "
                f"that rise is the read of the prefix")
    return (f"; reading the {extra:,} bytes the cache grew by takes {read['read_us']:,.1f} µs at {rate}, not "
            f"{rise['rise_us']:,.0f} µs, so the read of the prefix does not account for that rise")


def read_sentence(record: dict[str, Any], bandwidth: float | None = None) -> str:
    """What the cached step did beyond its flat span, by its derived departure; a rise is put down to the read of
    the prefix only as attribution allows. ``bandwidth`` (bytes/s): this lab's record measures none (its benchmark
    times no memory floor, as the decode lab's does), so the page passes none and never makes that attribution."""
    s = shape(record, "cached")
    c, lengths = s.cells, s.lengths
    last = lengths[-1]
    if s.flat_to_end:
        return (f"In this record the cached step never left its flat band: up to {last} tokens the read of the "
                f"prefix is too small a part of a step to see.")
    moved = s.stored["departure"]
    if moved is None:
        return (f"No two cached steps differ beyond {FLAT_BAND:.0%} and both their min–max ranges: this run shows "
                f"no rise to put down to the read of the prefix.")
    after, since = moved["after"], moved["since"]  # the first length that moved; the nearest step it moved from
    if moved["rises_to_end"]:
        lead = "rose out of its band" if moved["banded"] else "rose past its cells' min–max ranges"
        return (f"Beyond {s.runs[0][-1]} tokens the step {lead}, {us(c[after].median)} at {after} tokens and "
                f"{us(c[last].median)} at {last}, the slowest of the sweep: there work that grows with the prefix "
                f"starts to lift it{attribution(moved['rise'], bandwidth)}.")
    lead = (f"The step left its band at {after} tokens ({us(c[after].median)})" if moved["banded"] else
            f"Between {since} and {after} tokens the step {'rose' if moved['up'] else 'fell'} beyond {FLAT_BAND:.0%} "
            f"and both cells' min–max ranges ({c[since].median:,.0f} → {us(c[after].median)})")
    then = (f", and moved that way again at {join([str(r[0]) for r in s.runs[2:]])} tokens" if len(s.runs) > 2 else
            "" if after == last else
            f" but was no slower at {last} ({us(c[last].median)})" if moved["no_slower_at_end"] else
            f", and no further that way up to {last} ({us(c[last].median)})")
    told = attribution(moved["rise"], bandwidth) if moved["up"] else ""
    return f"{lead}{then}{told}."


def speed_item(record: dict[str, Any]) -> str:
    """The whole loop's ratio of medians at both ends, worded by the derived order of the two loops' raw
    repetitions (kv_cache.figures.loop_order): faster or slower only where their min–max ranges do not overlap."""
    entries, orders = record["lengths"], record["loop_order"]
    ends = [(entries[0], orders[0]), (entries[-1], orders[-1])]

    def side(entry: dict[str, Any], order: str) -> str:
        value = format_ratio(ratio(entry))
        return (f"{value} faster" if order == "faster" else f"slower ({value})") + f" at {entry['length']} tokens"
    told = [side(entry, order) for entry, order in ends if order != "unclear"]
    untold = [f"{entry['length']} tokens ({format_ratio(ratio(entry))})" for entry, order in ends if order == "unclear"]
    more = ratio(entries[-1]) > ratio(entries[0])
    lead = ("Faster, and more so with length" if orders[0] == orders[-1] == "faster" and more else
            "Faster with length" if orders[0] == "unclear" and orders[-1] == "faster" else "Speed")
    ran = f"the whole cached loop ran {' and '.join(told)} than recomputing the prefix at every step" if told else ""
    tie = (f"at {' and '.join(untold)} the two loops' min–max ranges overlap, so this run cannot tell them apart"
           if untold else "")
    return f"{lead}: {'; '.join(part for part in (ran, tie) if part)}."


def step_item(record: dict[str, Any]) -> str:
    """How much a cached step grew over the sweep, set against how much the prefix it reads grew, worded by shape."""
    s, steps, read = shape(record, "cached"), per_step_us(record, "cached"), record["cached_read"]
    lengths = list(steps)
    first, last = lengths[0], lengths[-1]
    growth = record["regimes"]["cached"]["step_growth"]
    span = f"{us(steps[first])} at {first} tokens, {us(steps[last])} at {last} ({grew(growth)})"
    if s.flat_to_end:
        return (f"Flat: a cached step took {span} while the prefix it reads grew {read['prefix_growth']:g}-fold; "
                f"its cost is per call, not per cached token.")
    if s.overhead_bound:
        return (f"Mostly a cost per call: a cached step took {span} while the prefix it reads grew "
                f"{read['prefix_growth']:g}-fold, flat within {FLAT_BAND:.0%} {flat_span(s)}.")
    if s.grows:
        return (f"Growing with the prefix: a cached step took {span}, flat within {FLAT_BAND:.0%} over no fourfold "
                f"span, so a part of it is work per cached token.")
    return (f"Flat or growing, this run cannot tell: a cached step took {span} while the prefix grew "
            f"{read['prefix_growth']:g}-fold, but its cells spread {spreads(s.stored['spread_range'])} of their medians.")


def key_results_view(record: dict[str, Any]) -> Block:
    example = record["capacity"]["models"][EXAMPLE_MODEL]["formats"]
    base, small = example[BASE_FORMAT], example[SMALL_FORMAT]
    items = [
        (f"Same logits: at each of the {record['compared_steps']:,} decode steps compared, the cached path's "
         f"next-token logits " + ("matched" if agree(record) else "did not always match")
         + " full recomputation's, within the tolerance the appendix states."),
        speed_item(record),
        step_item(record),
        (f"Bytes: {EXAMPLE_MODEL} keeps {format_bytes(base['bytes_per_token'], binary=True)} per token in a "
         f"{BASE_FORMAT} cache, {gib(base['context_bytes'][1])} GiB for one {CONTEXTS[1] // 1024}k-token sequence "
         f"(this page's toy block: {record['cache_formula']['per_position_bytes']:,} bytes per token)."),
        (f"Capacity: beside its 16-bit weights, {MEMORY_GIB} GiB holds {base['tokens_fit']:,} {EXAMPLE_MODEL} "
         f"tokens in {BASE_FORMAT} and {small['tokens_fit']:,} in {SMALL_FORMAT} "
         f"({format_ratio(record['capacity']['example']['base_over_small'])} as many)."),
    ]
    return Block(css="lab-key-results", items=items)


def regime_view(record: dict[str, Any]) -> Block:
    full, recompute = record["regimes"]["full"], shape(record, "full")
    steps = {mode: per_step_us(record, mode) for mode in ("full", "cached")}
    lengths = list(steps["full"])
    took = (f"{us(steps['full'][lengths[-1]])} at {lengths[-1]} tokens, {full['step_growth']:.1f} times its "
            f"{lengths[0]}-token step")
    full_sentence = recompute_sentence(record, recompute, took, lengths[0])
    # A loop of one length runs as many steps in either mode, so the ratio of medians is the per-step one.
    table = Table(headings=["Prefix (tokens)", "Full: µs per step", "Cached: µs per step", "Full / cached"],
                  rows=[(e["length"], f"{steps['full'][e['length']]:,.0f}", f"{steps['cached'][e['length']]:,.0f}",
                         format_ratio(ratio(e))) for e in record["lengths"]])
    return Block(paragraphs=[flat_sentence(record), read_sentence(record), full_sentence], tables=[table])


def recompute_sentence(record: dict[str, Any], recompute: Any, took: str, first: int) -> str:
    """What the full path's step did over the sweep, as far as its cells' min–max ranges let the record tell."""
    if recompute.grows:
        return (f"The full path's step grew beyond its cells' min–max ranges across every fourfold span of the prefix "
                f"it recomputes, to {took}: work that scales. Whether arithmetic or memory traffic limits that work "
                f"at these sizes, this record cannot tell.")
    if recompute.flat_to_end:
        return (f"The full path's step took {took}: over this sweep even recomputing the prefix stayed within "
                f"{FLAT_BAND:.0%}, each cell's spread under that.")
    rise = steady_rise_from(cells(record, "full"))
    if rise is not None:
        below = "" if rise == first else "; below that its cells' spreads hide any change"
        return (f"The full path's step took {took}: from {rise:,} tokens on it grew beyond both cells' min–max ranges "
                f"at every step of the sweep, work that scales with the prefix it recomputes{below}.")
    return (f"The full path's step took {took}, but its cells spread {spreads(recompute.stored['spread_range'])} of "
            f"their medians: this run cannot say whether, or over which span, it grew with the prefix it recomputes.")


def read_view(record: dict[str, Any]) -> Block:
    """The "what limits it" section's claim about the growing read, from the record."""
    return Block(paragraphs=[read_sentence(record)])


def grouping_view(record: dict[str, Any]) -> Block:
    """What grouped-query attention saves the example model, and how it still compares with the small one."""
    example = record["capacity"]["example"]
    priced = record["capacity"]["models"]
    big, small = model(EXAMPLE_MODEL), model(SMALL_MODEL)
    kept = priced[EXAMPLE_MODEL]["formats"][BASE_FORMAT]["bytes_per_token"]
    other = priced[SMALL_MODEL]["formats"][BASE_FORMAT]["bytes_per_token"]
    times = example["over_small_model"]
    compared = (f"{format_ratio(times)} more than {SMALL_MODEL} ({format_bytes(other, binary=True)})" if times > 1 else
                f"{format_ratio(1 / times)} less than {SMALL_MODEL} ({format_bytes(other, binary=True)})"
                if times < 1 else f"as much as {SMALL_MODEL}")
    return Block(paragraphs=[
        f"Grouped-query attention keeps {EXAMPLE_MODEL} at {format_bytes(kept, binary=True)} per token in "
        f"{BASE_FORMAT}: {big['kv_heads']} key/value heads serve its {big['heads']} query heads, so the cache is "
        f"1/{example['grouping']:g} of the {format_bytes(priced[EXAMPLE_MODEL]['multi_head_bytes_per_token'], binary=True)} "
        f"one key/value head per query head would keep. It is still {compared}: {big['layers']} layers of "
        f"{big['kv_heads']} × {big['head_dim']} against {small['layers']} layers of {small['kv_heads']} × "
        f"{small['head_dim']}."])


def answer_step_view(record: dict[str, Any]) -> Block:
    steps = per_step_us(record, "cached")
    first, last = list(steps)[0], list(steps)[-1]
    cached, verdict = record["regimes"]["cached"], shape(record, "cached").verdict
    why = {"flat": "Because at these sizes the step's own work is small next to what every call costs anyway. ",
           "grows": "It does: at these sizes work that grows with the prefix is a visible part of each step. ",
           "unclear": "This run cannot fully tell: its cells spread too widely. "}[verdict]
    return answer(f"{why}{flat_sentence(record)} {read_sentence(record)} Over the whole sweep it went from "
                  f"{us(steps[first])} at {first} tokens to {us(steps[last])} at {last} "
                  f"({grew(cached['step_growth'])}), while the prefix grew {record['cached_read']['prefix_growth']:g}-fold. "
                  f"More work per step (more layers, a wider model, a bigger batch, a longer prefix) moves a step out "
                  f"of the overhead-bound regime.")


def answer_capacity_view(record: dict[str, Any]) -> Block:
    llama = model(EXAMPLE_MODEL)
    priced = record["capacity"]["models"][EXAMPLE_MODEL]
    example = record["capacity"]["example"]
    fits = example["spare_bytes"] >= 0
    return answer(f"2 × {llama['layers']} layers × {llama['kv_heads']} KV heads × {llama['head_dim']} × 2 bytes = "
                  f"{priced['formats'][BASE_FORMAT]['bytes_per_token']:,.0f} bytes per token; × {EXAMPLE_BATCH} × "
                  f"{CONTEXTS[0]:,} tokens = {gib(example['base_bytes'])} GiB. The 16-bit weights take "
                  f"{gib(priced['weight_bytes'])} GiB, leaving {gib(example['room_bytes'])} GiB of {MEMORY_GIB}: it "
                  f"{'fits' if fits else 'does not fit'}, with {gib(abs(example['spare_bytes']))} GiB "
                  f"{'to spare' if fits else 'missing'} before any activation or workspace. In {SMALL_FORMAT} the "
                  f"same cache takes {gib(example['small_bytes'])} GiB.")


def answer_mask_view(record: dict[str, Any]) -> Block:
    row = mask_row(2)
    return answer(f"The third new query sits at absolute position {row.position} and must see keys {row.sees[0]} to "
                  f"{row.sees[-1]}: {len(row.sees)} keys. The top-left triangle shows it keys {row.shown[0]} to "
                  f"{row.shown[-1]}, {len(row.shown)} keys, hiding {row.hidden} it needs. A one-token step cannot "
                  f"show the bug: its single row sees every key under the correct mask, and the chunked-prefill "
                  f"test is the one that catches it.")


# --- takeaways whose wording depends on the record ---------------------------------------------------------

def takeaway_bytes_view(record: dict[str, Any]) -> Block:
    example = record["capacity"]["example"]
    share = example["cache_over_weights"]
    weights = gib(record["capacity"]["models"][EXAMPLE_MODEL]["weight_bytes"])
    against = (f"{format_ratio(share)} its {weights} GiB of weights" if share >= 1 else
               f"{share:.0%} of its {weights} GiB of weights")
    return takeaway(f"per token, a cache costs 2 × layers × KV heads × head dim × bytes; {EXAMPLE_BATCH} "
                    f"{EXAMPLE_MODEL} sequences of {CONTEXTS[0] // 1024}k tokens in {BASE_FORMAT} take "
                    f"{gib(example['base_bytes'])} GiB, {against}.")


def takeaway_result_view(record: dict[str, Any]) -> Block:
    entries = record["lengths"]
    first, last = entries[0], entries[-1]
    proven = "proven equal first" if agree(record) else "not equal at every step (see the appendix)"
    orders = record["loop_order"]
    wins = ("the cached loop wins by more as the prefix grows" if ratio(last) > ratio(first) and orders[-1] == "faster"
            else "the cached loop's lead does not grow with the prefix here")
    untold = ", within both loops' ranges" if orders[0] == "unclear" else ""
    if untold and orders[-1] == "faster":
        wins = "the cached loop pulls ahead as the prefix grows"
    step = {"flat": "but its single step costs what a call costs",
            "grows": "and its single step grows with the prefix it reads",
            "unclear": "and whether its single step grows with the prefix, this run's spread cannot tell"}[
        shape(record, "cached").verdict]
    return takeaway(f"{proven}, {wins} ({format_ratio(ratio(first))} at {first['length']} tokens{untold}{';' if untold else ','} "
                    f"{format_ratio(ratio(last))} at {last['length']}), {step}.")


def takeaway_trained_view(record: dict[str, Any]) -> Block:
    t = record["trained"]
    cache = ("the cache changed how much was computed, not what" if t["same_answer_without_cache"] else
             "with these weights the cache changed the greedy answer")
    parts = t["bfloat16_parts_at"]
    dtype = ("bfloat16 gave the same answer too" if parts is None else
             f"a narrower dtype did change it: bfloat16 parted from float32 at new token {parts + 1}")
    return takeaway(f"{cache}; {dtype}.")


def takeaway_limits_view(record: dict[str, Any]) -> Block:
    s = shape(record, "cached")
    if s.overhead_bound:
        flat = f"flat to {s.flat[1]} tokens" if s.flat[0] == s.lengths[0] else f"flat from {s.flat[0]} to {s.flat[1]} tokens"
        return takeaway(f"at toy size the cached step is overhead-bound ({flat}); the saving grows only where the "
                        f"recomputed prefix outweighs what every call costs anyway.")
    if s.grows:
        return takeaway("even at toy size the cached step grows with its prefix here; the saving is the recomputation "
                        "avoided, less the read of the prefix that every step still pays.")
    return takeaway("at toy size this run's spread hides whether the cached step is overhead-bound; the saving is the "
                    "recomputation avoided, less what every step still pays.")
