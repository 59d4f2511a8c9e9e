"""What the record establishes, in the reader's terms: the key results, the regime of each path, and the
answers to the page's check-yourself questions. Every figure comes from the record or from capacity.py."""

from __future__ import annotations

from typing import Any

from kv_cache.figures import MASK_EXAMPLE, causal_visible, top_left_visible
from labkit.regimes import FLAT_BAND, regime
from site_hooks.blocks import Block, Table, answer
from site_hooks.formatting import format_bytes, format_ratio, format_sci
from site_hooks.prose import power_of_ten

from . import capacity

EXAMPLE_MODEL = "Llama-3-8B"


def ratio(entry: dict[str, Any]) -> float:
    return entry["speedup"]["cached"]["ratio_of_medians"]


def us(value: float) -> str:
    return f"{value:,.0f} µs"


def flat_sentence(record: dict[str, Any]) -> str:
    cached = regime(record, "cached")
    steps = cached.per_step_us
    first, last = cached.first, list(steps)[-1]
    if not cached.overhead_bound:
        return (f"A cached step took {us(steps[first])} at {first} tokens and {us(steps[last])} at {last}: it grew "
                f"with the prefix, so this record shows no overhead-bound span.")
    after = [n for n in steps if n > cached.flat_until]
    tail = (f" At {after[0]} tokens it reached {us(steps[after[0]])}: there the growing attention starts to show."
            if after else "")
    return (f"From {first} to {cached.flat_until} tokens a cached step stayed within {FLAT_BAND:.0%} of "
            f"{us(steps[first])} while the prefix it attends to grew {cached.growth:g}-fold: that span is "
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
    cached = regime(record, "cached")
    steps = cached.per_step_us
    if cached.overhead_bound:
        return (f"Overhead-bound: a cached step took about {us(steps[cached.first])} from {cached.first} to "
                f"{cached.flat_until} tokens, flat within {FLAT_BAND:.0%}; its cost is per call, not per cached token.")
    last = list(steps)[-1]
    return (f"A cached step grew from {us(steps[cached.first])} at {cached.first} tokens to {us(steps[last])} at "
            f"{last}: no span of this record is flat enough to call overhead-bound.")


def key_results_view(record: dict[str, Any]) -> Block:
    entries = record["lengths"]
    first, last = entries[0], entries[-1]
    worst = max(e["equivalence"]["cached"]["max_abs_diff"] for e in entries)
    tol, precision = record["tolerance"], record["precision"]
    shrink = precision["float32"]["max_abs_diff"] / max(precision["float64"]["max_abs_diff"], 1e-300)
    steps = sum(e["steps"] for e in entries)
    agree = all(e["equivalence"]["cached"]["within_tolerance"] for e in entries)
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    toy = 2 * batch * model["kv_heads"] * model["head_dim"] * model["bytes_per_element"]
    llama = capacity.model(EXAMPLE_MODEL)
    fp16, int4 = capacity.per_token(llama, "fp16"), capacity.per_token(llama, "int4")
    items = [
        (f"Same logits: over {steps:,} decode steps at {len(entries)} lengths, the cached path "
         + ("matched" if agree else "did not always match")
         + f" full recomputation within atol = {tol['atol']:g}, rtol = {tol['rtol']:g} (largest difference "
         f"{format_sci(worst)}); float64 shrinks the difference about {power_of_ten(shrink)} times, as rounding does."),
        speed_item(first, last),
        regime_item(record),
        (f"Bytes: this toy block keeps {toy:,} bytes per token; {EXAMPLE_MODEL} keeps "
         f"{format_bytes(fp16, binary=True)} per token in fp16, "
         f"{capacity.gib(fp16 * capacity.CONTEXTS[1])} GiB for one {capacity.CONTEXTS[1] // 1024}k-token sequence."),
        (f"Capacity: beside its fp16 weights, {capacity.MEMORY_GIB} GiB holds {capacity.fit(llama, 'fp16'):,} "
         f"{EXAMPLE_MODEL} tokens in an fp16 cache and {capacity.fit(llama, 'int4'):,} in int4 "
         f"({format_ratio(fp16 / int4)} as many)."),
    ]
    return Block(css="lab-key-results", items=items)


def regime_view(record: dict[str, Any]) -> Block:
    full, cached = regime(record, "full"), regime(record, "cached")
    lengths = list(full.per_step_us)
    grew = full.per_step_us[lengths[-1]] / full.per_step_us[lengths[0]]
    full_sentence = (f"The full path's step stayed flat only up to {full.flat_until} tokens and then grew with the "
                     f"prefix it recomputes, to {us(full.per_step_us[lengths[-1]])} at {lengths[-1]} tokens, "
                     f"{grew:.1f} times its {lengths[0]}-token step: work that scales. Whether arithmetic or memory "
                     f"traffic limits that work at these sizes, this record cannot tell.")
    table = Table(headings=["Prefix (tokens)", "Full: µs per step", "Cached: µs per step", "Full / cached"],
                  rows=[(n, f"{full.per_step_us[n]:,.0f}", f"{cached.per_step_us[n]:,.0f}",
                         format_ratio(full.per_step_us[n] / cached.per_step_us[n])) for n in lengths])
    return Block(css="lab-regime", paragraphs=[flat_sentence(record), full_sentence], tables=[table])


def answer_overhead_view(record: dict[str, Any]) -> Block:
    cached = regime(record, "cached")
    steps = cached.per_step_us
    first = cached.first
    return answer(f"Because at these sizes the step's own work is small next to what every call costs anyway. "
            f"{flat_sentence(record)} Making the work per step larger (more layers, a wider model, a bigger batch, "
            f"a longer prefix) moves the step out of that regime; at {list(steps)[-1]} tokens it took "
            f"{us(steps[list(steps)[-1]])}, against {us(steps[first])} at {first}.")


def answer_capacity_view(record: dict[str, Any]) -> Block:
    llama = capacity.model(EXAMPLE_MODEL)
    batch, context = 16, capacity.CONTEXTS[0]
    per = capacity.per_token(llama, "fp16")
    total = per * batch * context
    room = capacity.MEMORY_GIB * capacity.GIB - capacity.weight_bytes(llama)
    fits = total <= room
    return answer(f"2 × {llama['layers']} layers × {llama['kv_heads']} KV heads × {llama['head_dim']} × 2 bytes = "
            f"{per:,.0f} bytes per token; × {batch} × {context:,} tokens = {capacity.gib(total)} GiB. The fp16 "
            f"weights take {capacity.gib(capacity.weight_bytes(llama))} GiB, leaving {capacity.gib(room)} GiB of "
            f"{capacity.MEMORY_GIB}: it {'fits' if fits else 'does not fit'}, with "
            f"{capacity.gib(abs(room - total))} GiB {'to spare' if fits else 'missing'} before any activation or "
            f"workspace. In int4 the same cache takes {capacity.gib(capacity.per_token(llama, 'int4') * batch * context)} GiB.")


def answer_mask_view(record: dict[str, Any]) -> Block:
    queries, offset = MASK_EXAMPLE
    keys = offset + queries
    right, wrong = causal_visible(queries, offset), top_left_visible(queries, keys)
    row = 2
    sees = sorted(c for r, c in right if r == row)
    shown = sorted(c for r, c in wrong if r == row)
    return answer(f"The third new query sits at absolute position {offset + row} and must see keys {sees[0]} to {sees[-1]}: "
            f"{len(sees)} keys. The top-left triangle shows it keys {shown[0]} to {shown[-1]}, {len(shown)} keys, "
            f"hiding {len(sees) - len(shown)} it needs. A one-token step cannot show the bug: its single row "
            f"sees every key under the correct mask, and the chunked-prefill test is the one that catches it.")
