"""What the record establishes, in the reader's terms: the key results, the regime of each path, and the
answers to the page's check-yourself questions. Every figure is a stored one (the sweep's statistics and
regimes, labkit.summary; the cache's bytes and the real models' capacity, kv_cache.figures)."""

from __future__ import annotations

from typing import Any

from kv_cache.figures import CONTEXTS, EXAMPLE_BATCH, EXAMPLE_MODEL, MEMORY_GIB, mask_row, model
from labkit.regimes import FLAT_BAND
from site_hooks.blocks import Block, Table, answer
from site_hooks.formatting import format_bytes, format_ratio, format_sci, power_of_ten

from .capacity import gib


def ratio(entry: dict[str, Any]) -> float:
    return entry["speedup"]["cached"]["ratio_of_medians"]


def us(value: float) -> str:
    return f"{value:,.0f} µs"


def per_step_us(record: dict[str, Any], mode: str) -> dict[int, float]:
    """The stored median per decode step of ``mode`` at each length, in µs."""
    return {e["length"]: e["modes"][mode]["per_step"]["median_ns"] / 1e3 for e in record["lengths"]}


def flat_sentence(record: dict[str, Any]) -> str:
    cached, steps = record["regimes"]["cached"], per_step_us(record, "cached")
    lengths = list(steps)
    first, last = lengths[0], lengths[-1]
    if not cached["overhead_bound"]:
        return (f"A cached step took {us(steps[first])} at {first} tokens and {us(steps[last])} at {last}: it grew "
                f"with the prefix, so this record shows no overhead-bound span.")
    after = [n for n in steps if n > cached["flat_until"]]
    tail = (f" At {after[0]} tokens it reached {us(steps[after[0]])}: there the growing attention starts to show."
            if after else "")
    return (f"From {first} to {cached['flat_until']} tokens a cached step stayed within {FLAT_BAND:.0%} of "
            f"{us(steps[first])} while the prefix it attends to grew {cached['flat_growth']:g}-fold: that span is "
            f"overhead-bound, a fixed cost per call rather than work that scales with the cache.{tail}")


def speed_item(first: dict[str, Any], last: dict[str, Any]) -> str:
    """The whole loop's ratio of medians at both ends, worded by which side of 1 each is on."""
    def side(entry: dict[str, Any]) -> str:
        value = ratio(entry)
        return (f"{format_ratio(value)} faster" if value > 1 else f"slower ({format_ratio(value)})" if value < 1
                else "as fast") + f" at {entry['length']} tokens"
    grows = ratio(last) > ratio(first)
    return (f"{'Faster, and more so with length' if ratio(first) > 1 and grows else 'Speed'}: the whole cached "
            f"loop ran {side(first)} and {side(last)} than recomputing the prefix (ratio of medians, full / cached).")


def regime_item(record: dict[str, Any]) -> str:
    cached, steps = record["regimes"]["cached"], per_step_us(record, "cached")
    first, last = list(steps)[0], list(steps)[-1]
    if cached["overhead_bound"]:
        return (f"Overhead-bound: a cached step took about {us(steps[first])} from {first} to "
                f"{cached['flat_until']} tokens, flat within {FLAT_BAND:.0%}; its cost is per call, not per cached token.")
    return (f"A cached step grew from {us(steps[first])} at {first} tokens to {us(steps[last])} at "
            f"{last}: no span of this record is flat enough to call overhead-bound.")


def shrink_text(precision: dict[str, Any]) -> str:
    """How float64 changed the difference, from the stored float64_shrink (none: float64's difference was 0)."""
    shrink = precision["float64_shrink"]
    return ("float64 removes the difference entirely" if shrink is None else
            f"float64 shrinks the difference about {power_of_ten(shrink)} times")


def key_results_view(record: dict[str, Any]) -> Block:
    entries = record["lengths"]
    first, last = entries[0], entries[-1]
    worst = max(e["equivalence"]["cached"]["max_abs_diff"] for e in entries)
    tol = record["tolerance"]
    agree = all(e["equivalence"]["cached"]["within_tolerance"] for e in entries)
    llama = record["capacity"]["models"][EXAMPLE_MODEL]["formats"]
    fp16, int4 = llama["fp16"], llama["int4"]
    items = [
        (f"Same logits: over {record['compared_steps']:,} decode steps at {len(entries)} lengths, the cached path "
         + ("matched" if agree else "did not always match")
         + f" full recomputation within atol = {tol['atol']:g}, rtol = {tol['rtol']:g} (largest difference "
         f"{format_sci(worst)}); {shrink_text(record['precision'])}, as rounding does."),
        speed_item(first, last),
        regime_item(record),
        (f"Bytes: this toy block keeps {record['cache_formula']['per_position_bytes']:,} bytes per token; "
         f"{EXAMPLE_MODEL} keeps {format_bytes(fp16['bytes_per_token'], binary=True)} per token in fp16, "
         f"{gib(fp16['context_bytes'][1])} GiB for one {CONTEXTS[1] // 1024}k-token sequence."),
        (f"Capacity: beside its fp16 weights, {MEMORY_GIB} GiB holds {fp16['tokens_fit']:,} "
         f"{EXAMPLE_MODEL} tokens in an fp16 cache and {int4['tokens_fit']:,} in int4 "
         f"({format_ratio(record['capacity']['example']['fp16_over_int4'])} as many)."),
    ]
    return Block(css="lab-key-results", items=items)


def regime_view(record: dict[str, Any]) -> Block:
    full = record["regimes"]["full"]
    steps = {mode: per_step_us(record, mode) for mode in ("full", "cached")}
    lengths = list(steps["full"])
    full_sentence = (f"The full path's step stayed flat only up to {full['flat_until']} tokens and then grew with the "
                     f"prefix it recomputes, to {us(steps['full'][lengths[-1]])} at {lengths[-1]} tokens, "
                     f"{full['step_growth']:.1f} times its {lengths[0]}-token step: work that scales. Whether "
                     f"arithmetic or memory traffic limits that work at these sizes, this record cannot tell.")
    # A loop of one length runs as many steps in either mode, so the ratio of medians is the per-step one.
    table = Table(headings=["Prefix (tokens)", "Full: µs per step", "Cached: µs per step", "Full / cached"],
                  rows=[(e["length"], f"{steps['full'][e['length']]:,.0f}", f"{steps['cached'][e['length']]:,.0f}",
                         format_ratio(ratio(e))) for e in record["lengths"]])
    return Block(paragraphs=[flat_sentence(record), full_sentence], tables=[table])


def answer_overhead_view(record: dict[str, Any]) -> Block:
    steps = per_step_us(record, "cached")
    first, last = list(steps)[0], list(steps)[-1]
    return answer(f"Because at these sizes the step's own work is small next to what every call costs anyway. "
                  f"{flat_sentence(record)} Making the work per step larger (more layers, a wider model, a bigger "
                  f"batch, a longer prefix) moves the step out of that regime; at {last} tokens it took "
                  f"{us(steps[last])}, against {us(steps[first])} at {first}.")


def answer_capacity_view(record: dict[str, Any]) -> Block:
    llama = model(EXAMPLE_MODEL)
    priced = record["capacity"]["models"][EXAMPLE_MODEL]
    example = record["capacity"]["example"]
    fits = example["spare_bytes"] >= 0
    return answer(f"2 × {llama['layers']} layers × {llama['kv_heads']} KV heads × {llama['head_dim']} × 2 bytes = "
                  f"{priced['formats']['fp16']['bytes_per_token']:,.0f} bytes per token; × {EXAMPLE_BATCH} × "
                  f"{CONTEXTS[0]:,} tokens = {gib(example['fp16_bytes'])} GiB. The fp16 weights take "
                  f"{gib(priced['weight_bytes'])} GiB, leaving {gib(example['room_bytes'])} GiB of {MEMORY_GIB}: it "
                  f"{'fits' if fits else 'does not fit'}, with {gib(abs(example['spare_bytes']))} GiB "
                  f"{'to spare' if fits else 'missing'} before any activation or workspace. In int4 the same cache "
                  f"takes {gib(example['int4_bytes'])} GiB.")


def answer_mask_view(record: dict[str, Any]) -> Block:
    row = mask_row(2)
    return answer(f"The third new query sits at absolute position {row.position} and must see keys {row.sees[0]} to "
                  f"{row.sees[-1]}: {len(row.sees)} keys. The top-left triangle shows it keys {row.shown[0]} to "
                  f"{row.shown[-1]}, {len(row.shown)} keys, hiding {row.hidden} it needs. A one-token step cannot "
                  f"show the bug: its single row sees every key under the correct mask, and the chunked-prefill "
                  f"test is the one that catches it.")
