"""What the record establishes, in the reader's terms: the key results, the regime of each path, the takeaways
whose wording depends on the data, and the answers to the page's check-yourself questions. Every figure is a
stored one (the sweep's statistics and regimes, labkit.summary; the cache's bytes, the real models' capacity and
the cached step's read, kv_cache.figures); every comparative word is chosen here from those figures."""

from __future__ import annotations

from typing import Any

from kv_cache.figures import (
    BASE_FORMAT,
    CONTEXTS,
    EXAMPLE_BATCH,
    EXAMPLE_MODEL,
    MEMORY_GIB,
    SMALL_FORMAT,
    SMALL_MODEL,
    mask_row,
    model,
)
from labkit.regimes import FLAT_BAND
from site_hooks.blocks import Block, Table, answer, takeaway
from site_hooks.formatting import format_bytes, format_ratio

from .capacity import gib


def ratio(entry: dict[str, Any]) -> float:
    return entry["speedup"]["cached"]["ratio_of_medians"]


def us(value: float) -> str:
    return f"{value:,.0f} µs"


def per_step_us(record: dict[str, Any], mode: str) -> dict[int, float]:
    """The stored median per decode step of ``mode`` at each length, in µs."""
    return {e["length"]: e["modes"][mode]["per_step"]["median_ns"] / 1e3 for e in record["lengths"]}


def agree(record: dict[str, Any]) -> bool:
    return all(e["equivalence"]["cached"]["within_tolerance"] for e in record["lengths"])


def grew(growth: float) -> str:
    """A stored ratio later / earlier as a signed percentage: '+15%', '−3%'."""
    return f"{growth - 1:+.0%}".replace("-", "−")


def flat_sentence(record: dict[str, Any]) -> str:
    cached, steps = record["regimes"]["cached"], per_step_us(record, "cached")
    lengths = list(steps)
    first, last = lengths[0], lengths[-1]
    if not cached["overhead_bound"]:
        return (f"A cached step took {us(steps[first])} at {first} tokens and {us(steps[last])} at {last}: it grew "
                f"with the prefix, so this record shows no overhead-bound span.")
    return (f"From {first} to {cached['flat_until']} tokens a cached step stayed within {FLAT_BAND:.0%} of "
            f"{us(steps[first])} while the prefix it attends to grew {cached['flat_growth']:g}-fold: that span is "
            f"overhead-bound, a fixed cost per call rather than work that scales with the cache.")


def read_sentence(record: dict[str, Any]) -> str:
    """What the growing read of the prefix did to the cached step beyond its flat span, as the record shows it."""
    read, steps = record["cached_read"], per_step_us(record, "cached")
    lengths = list(steps)
    last = lengths[-1]
    left = read["left_band_at"]
    if left is None:
        return (f"In this record the cached step never left its flat band: up to {last} tokens the read of the "
                f"prefix is too small a part of a step to see.")
    if read["longest_is_slowest"]:
        return (f"Beyond {record['regimes']['cached']['flat_until']} tokens the step rose out of its band, "
                f"{us(steps[left])} at {left} tokens and {us(steps[last])} at {last}, the slowest of the sweep: there "
                f"the growing read of the prefix starts to lift it.")
    return (f"The step left its band at {left} tokens ({us(steps[left])}) but was no slower at {last} "
            f"({us(steps[last])}): the read of the prefix shows, but at this width it is a small share of a step "
            f"that does not yet grow steadily.")


def speed_item(first: dict[str, Any], last: dict[str, Any]) -> str:
    """The whole loop's ratio of medians at both ends, worded by which side of 1 each is on."""
    def side(entry: dict[str, Any]) -> str:
        value = ratio(entry)
        return (f"{format_ratio(value)} faster" if value > 1 else f"slower ({format_ratio(value)})" if value < 1
                else "as fast") + f" at {entry['length']} tokens"
    more = ratio(last) > ratio(first)
    return (f"{'Faster, and more so with length' if ratio(first) > 1 and more else 'Speed'}: the whole cached "
            f"loop ran {side(first)} and {side(last)} than recomputing the prefix at every step.")


def step_item(record: dict[str, Any]) -> str:
    """How much a cached step grew over the sweep, set against how much the prefix it reads grew."""
    cached, steps, read = record["regimes"]["cached"], per_step_us(record, "cached"), record["cached_read"]
    lengths = list(steps)
    first, last = lengths[0], lengths[-1]
    growth = cached["step_growth"]
    span = f"{us(steps[first])} at {first} tokens, {us(steps[last])} at {last} ({grew(growth)})"
    if abs(growth - 1) <= FLAT_BAND:
        return (f"Flat: a cached step took {span} while the prefix it reads grew {read['prefix_growth']:g}-fold; "
                f"its cost is per call, not per cached token.")
    if cached["overhead_bound"]:
        return (f"Mostly a cost per call: a cached step took {span} while the prefix it reads grew "
                f"{read['prefix_growth']:g}-fold, flat within {FLAT_BAND:.0%} up to {cached['flat_until']} tokens.")
    return (f"Growing with the prefix: a cached step took {span}, flat within {FLAT_BAND:.0%} over no fourfold "
            f"span, so a part of it is work per cached token.")


def key_results_view(record: dict[str, Any]) -> Block:
    entries = record["lengths"]
    first, last = entries[0], entries[-1]
    example = record["capacity"]["models"][EXAMPLE_MODEL]["formats"]
    base, small = example[BASE_FORMAT], example[SMALL_FORMAT]
    items = [
        (f"Same logits: at each of the {record['compared_steps']:,} decode steps compared, the cached path's "
         f"next-token logits " + ("matched" if agree(record) else "did not always match")
         + " full recomputation's, within the tolerance the appendix states."),
        speed_item(first, last),
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
    full = record["regimes"]["full"]
    steps = {mode: per_step_us(record, mode) for mode in ("full", "cached")}
    lengths = list(steps["full"])
    growing = full["step_growth"] > 1 + FLAT_BAND
    full_sentence = (f"The full path's step stayed flat only up to {full['flat_until']} tokens and then grew with the "
                     f"prefix it recomputes, to {us(steps['full'][lengths[-1]])} at {lengths[-1]} tokens, "
                     f"{full['step_growth']:.1f} times its {lengths[0]}-token step: work that scales. Whether "
                     f"arithmetic or memory traffic limits that work at these sizes, this record cannot tell."
                     if growing else
                     f"The full path's step took {us(steps['full'][lengths[-1]])} at {lengths[-1]} tokens, "
                     f"{full['step_growth']:.2f} times its {lengths[0]}-token step: over this sweep even recomputing "
                     f"the prefix did not grow beyond {FLAT_BAND:.0%}.")
    # A loop of one length runs as many steps in either mode, so the ratio of medians is the per-step one.
    table = Table(headings=["Prefix (tokens)", "Full: µs per step", "Cached: µs per step", "Full / cached"],
                  rows=[(e["length"], f"{steps['full'][e['length']]:,.0f}", f"{steps['cached'][e['length']]:,.0f}",
                         format_ratio(ratio(e))) for e in record["lengths"]])
    return Block(paragraphs=[flat_sentence(record), read_sentence(record), full_sentence], tables=[table])


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
    cached = record["regimes"]["cached"]
    why = ("Because at these sizes the step's own work is small next to what every call costs anyway. "
           if cached["overhead_bound"] else
           "It does: at these sizes the read of the prefix is a visible part of each step. ")
    return answer(f"{why}{flat_sentence(record)} {read_sentence(record)} Over the whole sweep it went from "
                  f"{us(steps[first])} at {first} tokens to {us(steps[last])} at {last} "
                  f"({grew(cached['step_growth'])}), while the prefix grew {record['cached_read']['prefix_growth']:g}-fold. "
                  f"More work per step (more layers, a wider model, a bigger batch, a longer prefix) moves it out of "
                  f"that regime.")


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
    wins = ("the cached loop wins by more as the prefix grows" if ratio(last) > ratio(first) else
            "the cached loop's lead does not grow with the prefix here")
    step = ("but its single step costs what a call costs" if record["regimes"]["cached"]["overhead_bound"] else
            "and its single step grows with the prefix it reads")
    return takeaway(f"{proven}, {wins} ({format_ratio(ratio(first))} at {first['length']} tokens, "
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
    cached = record["regimes"]["cached"]
    if cached["overhead_bound"]:
        return takeaway(f"at toy size the cached step is overhead-bound (flat to {cached['flat_until']} tokens); the "
                        f"saving grows only where the recomputed prefix outweighs what every call costs anyway.")
    return takeaway("even at toy size the cached step grows with its prefix here; the saving is the recomputation "
                    "avoided, less the read of the prefix that every step still pays.")
