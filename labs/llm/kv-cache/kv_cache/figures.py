"""Every figure of the KV-cache record that follows from its raw data, and what the raw data must satisfy.

Torch-free: the record holds only raw data; the site build derives every figure from it with ``derive`` when it
reads the record (labkit.figures.check_record, after ``check_invariants``), the views read the figures derived
there and import the constants below, and the benchmark's summary lines read them the same way
(labkit.harness.run).
The shared timing statistics (min/median/max, speedups) come from labkit.summary.sweep_figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.figures import Figures, refuse, tolerance_bound
from labkit.regimes import FLAT_BAND, OVERHEAD_GROWTH
from llm_models.generations import first_departure
from llm_models.kv_bytes import kv_bytes_per_token, kv_cache_bytes, tokens_that_fit
from llm_models.published import model, models, weight_bytes

from .memory import KV_FORMATS

MODES = ("full", "cached")  # the benchmark's modes, in its run order: recompute the prefix, or read the cache
BASELINE = "full"
WORKED_EXAMPLE = 128  # positions: the article's worked example of the byte formula
MASK_EXAMPLE = (5, 7)  # (new queries, cached prefix): the chunked-prefill test's chunk, drawn on the page

# Real models' caches, priced by kv_cache.memory from the published configurations (llm_models.published, shared
# with the accelerator arithmetic of the decode and serving pages).
TABLE_FORMATS = ("float16", "fp8", "q4_0")  # the formats the page's table prices (the calculator offers them all)
BASE_FORMAT, SMALL_FORMAT = "float16", "q4_0"  # the capacity question's two caches: 16-bit, and llama.cpp's 4.5 bits
CONTEXTS = (8 * 1024, 128 * 1024)  # tokens: "8k" and "128k"
GIB = 2**30
MEMORY_GIB = 80  # one accelerator's memory, in GiB
EXAMPLE_MODEL = "Llama-3-8B"  # the model the key results and the capacity question price
EXAMPLE_BATCH = 16  # the capacity question: 16 sequences of CONTEXTS[0] tokens in float16, beside the weights
SMALL_MODEL = "GPT-2 small"  # what the example model's bytes per token are set against: 12 heads, no grouping


def causal_visible(query_len: int, offset: int) -> set[tuple[int, int]]:
    """(row, key) pairs a query may see: row i sits at absolute position offset + i and sees keys 0..offset + i.
    The torch-free twin of llm_models.attention.causal_mask (test_attention checks they agree)."""
    if query_len < 1 or offset < 0:
        raise ValueError(f"need query_len >= 1 and offset >= 0, got {query_len} and {offset}")
    return {(row, key) for row in range(query_len) for key in range(offset + row + 1)}


def top_left_visible(query_len: int, keys: int) -> set[tuple[int, int]]:
    """The wrong mask on a rectangular score matrix: a lower triangle anchored at the top-left corner, as
    scaled_dot_product_attention(is_causal=True) builds it (row i sees keys 0..i)."""
    return {(row, key) for row in range(query_len) for key in range(min(row + 1, keys))}


@dataclass(frozen=True)
class MaskRow:
    """One query row of the mask example: its absolute position, the keys it must see, the keys the wrong
    top-left triangle shows it."""

    position: int
    sees: list[int]
    shown: list[int]

    @property
    def hidden(self) -> int:
        return len(self.sees) - len(self.shown)


def mask_row(row: int, example: tuple[int, int] = MASK_EXAMPLE) -> MaskRow:
    queries, offset = example
    right, wrong = causal_visible(queries, offset), top_left_visible(queries, offset + queries)
    return MaskRow(position=offset + row, sees=sorted(c for r, c in right if r == row),
                   shown=sorted(c for r, c in wrong if r == row))


def cache_bytes(model: dict[str, Any], batch: int, length: int) -> int:
    """The byte formula for a record's model config (llm_models.kv_bytes.kv_cache_bytes)."""
    return kv_cache_bytes(batch, model["kv_heads"], length, model["head_dim"], model["bytes_per_element"])


def vector_bytes(model: dict[str, Any]) -> int:
    """Bytes of one head's keys (or values) at one position: D x bytes per element."""
    return model["head_dim"] * model["bytes_per_element"]


def projections(steps: int) -> tuple[int, int]:
    """Positions whose keys and values each path projects over a loop of ``steps`` steps: the full path
    projects positions 0 to t again at step t (1 + 2 + ... + steps), the cached path one per step."""
    return steps * (steps + 1) // 2, steps


def per_token(entry: dict[str, Any], fmt: str) -> float:
    """Bytes one token adds to a real model's cache in ``fmt`` (llm_models.kv_bytes.kv_bytes_per_token)."""
    return kv_bytes_per_token(entry["layers"], entry["kv_heads"], entry["head_dim"], KV_FORMATS[fmt])


def fit(entry: dict[str, Any], fmt: str, memory_gib: float = MEMORY_GIB) -> int:
    """Cached tokens in ``fmt`` that fit in ``memory_gib`` GiB beside the model's fp16 weights."""
    return tokens_that_fit(memory_gib * GIB, weight_bytes(entry), per_token(entry, fmt))


def capacity() -> dict[str, Any]:
    """Every real model's bytes per token, cache at each context and tokens that fit, per table format, and what
    it would keep with one key/value head per query head; the capacity question's sums for the example model
    (``spare_bytes`` negative: the cache does not fit); and the example model set against SMALL_MODEL."""
    priced = {m["name"]: {"weight_bytes": weight_bytes(m), "multi_head_bytes_per_token": multi_head(m),
                          "formats": {fmt: {"bytes_per_token": per_token(m, fmt),
                                            "context_bytes": [per_token(m, fmt) * n for n in CONTEXTS],
                                            "tokens_fit": fit(m, fmt)} for fmt in TABLE_FORMATS}} for m in models()}
    example, small = model(EXAMPLE_MODEL), model(SMALL_MODEL)
    base, narrow = (per_token(example, fmt) * EXAMPLE_BATCH * CONTEXTS[0] for fmt in (BASE_FORMAT, SMALL_FORMAT))
    room = MEMORY_GIB * GIB - weight_bytes(example)
    return {"models": priced, "example": {
        "base_bytes": base, "small_bytes": narrow, "room_bytes": room, "spare_bytes": room - base,
        "base_over_small": per_token(example, BASE_FORMAT) / per_token(example, SMALL_FORMAT),
        "cache_over_weights": base / weight_bytes(example),
        "grouping": example["heads"] / example["kv_heads"],
        "over_small_model": per_token(example, BASE_FORMAT) / per_token(small, BASE_FORMAT)}}


def multi_head(entry: dict[str, Any]) -> float:
    """Bytes per token in BASE_FORMAT with one key/value head per query head: the cache without grouping."""
    return kv_bytes_per_token(entry["layers"], entry["heads"], entry["head_dim"], KV_FORMATS[BASE_FORMAT])


def cached_read(record: dict[str, Any]) -> dict[str, Any]:
    """How the cached step moved beyond its flat span: the first length whose step left FLAT_BAND of the first
    (None: none did), and whether the longest length was the slowest step of the sweep (the growing read of the
    prefix still rising at the end) or not (it left the band, then stopped climbing)."""
    steps = {e["length"]: e["modes"]["cached"]["per_step"]["median_ns"] for e in record["lengths"]}
    lengths = list(steps)
    flat_until = record["regimes"]["cached"]["flat_until"]
    beyond = [n for n in lengths if n > flat_until]
    return {"left_band_at": beyond[0] if beyond else None,
            "longest_is_slowest": steps[lengths[-1]] == max(steps.values()),
            "prefix_growth": lengths[-1] / lengths[0]}


READ_FACTOR = 2  # a rise is put down to reading the prefix only when the bytes it adds, at the bandwidth the record
# measured, take between half and twice the rise: a step of the longer loop reads up to that many more bytes of cache
# and concatenation copies them once more, so an exact match is not expected, an order of magnitude apart is no match


@dataclass(frozen=True)
class Cell:
    """One mode's decode step at one length, in µs: the derived median and min–max range, and the derived spread,
    (max − min) / median of the raw repetitions (labkit.summary). The min–max range is the page's measure of a
    cell's noise: the noise flag reads it too, and with seven repetitions a quartile rests on about two of them,
    so an interquartile range would hide the very outliers that make a cell noisy."""

    median: float
    low: float
    high: float
    spread: float


def cells(record: dict[str, Any], mode: str) -> dict[int, Cell]:
    """``mode``'s derived per-step statistics (labkit.summary) at each length, in µs, with the derived spread."""
    return {e["length"]: Cell(*(e["modes"][mode]["per_step"][name] / 1e3 for name in ("median_ns", "min_ns", "max_ns")),
                              e["modes"][mode]["spread"]) for e in record["lengths"]}


def moved(a: Cell, b: Cell) -> int:
    """+1 where ``b`` lies above ``a`` by more than FLAT_BAND and beyond both min–max ranges, −1 where it lies below
    them the same way, 0 where this record cannot tell the two apart."""
    if b.median > (1 + FLAT_BAND) * a.median and b.low > a.high:
        return 1
    if b.median < (1 - FLAT_BAND) * a.median and b.high < a.low:
        return -1
    return 0


def steady_rise_from(found: dict[int, Cell]) -> int | None:
    """The shortest length from which every next length's step lies above the one before beyond both cells' min–max
    ranges (``moved`` = +1 at every step to the end), if that covers at least two steps; else None."""
    lengths = sorted(found)
    start = None
    for earlier, later in zip(lengths, lengths[1:]):
        start = (earlier if start is None else start) if moved(found[earlier], found[later]) == 1 else None
    return start if start is not None and lengths.index(start) <= len(lengths) - 3 else None


def spread_range(found: list[Cell]) -> list[float]:
    """[lowest, highest] spread of the given cells."""
    return [min(c.spread for c in found), max(c.spread for c in found)]


def step_shape(record: dict[str, Any], held: dict[int, int], mode: str) -> dict[str, Any]:
    """What ``mode``'s step did over the sweep, as far as its cells' own spreads let the record tell.

    labkit.regimes' flat rule (medians within FLAT_BAND of the span's first), looked for from every length and held
    to the cells' spreads: ``flat`` is the widest span whose medians stay within FLAT_BAND of its first, each cell's
    spread under it (``flat_growth`` its last length over its first; ``overhead_bound`` where that reaches
    OVERHEAD_GROWTH). ``runs``: consecutive lengths no two of which moved apart (moved), each new run starting at a
    move; ``grows``: every two lengths OVERHEAD_GROWTH-fold apart moved up, so no fourfold span can be flat;
    ``verdict``: 'flat' (an overhead-bound span), 'grows' or 'unclear' (the spreads hide which). ``longest_run``:
    the run of the largest growth, its growth and its cells' spreads. ``departure``: where the step first moved
    beyond a length before it (None: it never did), and the rise the page may put down to reading the prefix, with
    the bytes ``held`` (per length) grew by over it."""
    found = cells(record, mode)
    lengths = list(found)
    flat = (lengths[0], lengths[0])
    for index, start in enumerate(lengths):
        until = start
        for length in lengths[index:]:
            if found[length].spread >= FLAT_BAND or abs(found[length].median / found[start].median - 1) > FLAT_BAND:
                break
            until = length
        if until / start > flat[1] / flat[0]:
            flat = (start, until)
    runs = [[lengths[0]]]
    for length in lengths[1:]:
        if any(moved(found[earlier], found[length]) for earlier in runs[-1]):
            runs.append([length])
        else:
            runs[-1].append(length)
    pairs = [(a, b) for a in lengths for b in lengths if b >= OVERHEAD_GROWTH * a]
    grows = bool(pairs) and all(moved(found[a], found[b]) == 1 for a, b in pairs)
    flat_growth = flat[1] / flat[0]
    overhead_bound = flat_growth >= OVERHEAD_GROWTH
    run = max(runs, key=lambda r: r[-1] / r[0])
    return {"flat": list(flat), "flat_growth": flat_growth, "overhead_bound": overhead_bound,
            "flat_to_end": flat == (lengths[0], lengths[-1]), "runs": runs, "grows": grows,
            "verdict": "flat" if overhead_bound else "grows" if grows else "unclear",
            "spread_range": spread_range(list(found.values())),
            "longest_run": [run[0], run[-1]], "longest_run_growth": run[-1] / run[0],
            "longest_run_spread_range": spread_range([found[n] for n in run]),
            "departure": departure(found, runs, flat, held)}


def departure(found: dict[int, Cell], runs: list[list[int]], flat: tuple[int, int],
              held: dict[int, int]) -> dict[str, Any] | None:
    """Where the step first moved beyond a step before it (None: it never did): ``after``, the first length that
    moved; ``since``, the nearest earlier length it moved from; ``up``, whether it rose; ``banded``, whether the
    flat span ran from the first length to the move; ``rises_to_end``, whether it rose again by the last length
    and the last was the slowest of the sweep; ``no_slower_at_end``, whether the last length's median is no
    higher than the first moved one's; and ``rise``, the rise a bandwidth could account for (None: the step fell), with
    the bytes the cache grew by over it and its size in µs."""
    if len(runs) == 1:
        return None
    lengths = list(found)
    first, last = lengths[0], lengths[-1]
    after = runs[1][0]
    since = next(n for n in reversed(runs[0]) if moved(found[n], found[after]))
    up = moved(found[since], found[after]) == 1
    slowest = found[last].median == max(cell.median for cell in found.values())
    rises_to_end = up and after != last and moved(found[after], found[last]) == 1 and slowest
    until = last if rises_to_end else after
    rise = ({"from": since, "to": until, "extra_bytes": held[until] - held[since],
             "rise_us": found[until].median - found[since].median} if up else None)
    return {"after": after, "since": since, "up": up, "banded": flat == (first, runs[0][-1]) and flat[1] > first,
            "rises_to_end": rises_to_end, "no_slower_at_end": found[last].median <= found[after].median,
            "rise": rise}


def prefix_read(extra_bytes: int, rise_us: float, bandwidth: float) -> dict[str, Any]:
    """How long reading ``extra_bytes`` takes at ``bandwidth`` (bytes/s), in µs, and whether that accounts for a
    rise of ``rise_us`` (within READ_FACTOR either way). This lab's record measures no bandwidth, so derive yields
    none of this; a page given a measured bandwidth words it from here."""
    read_us = extra_bytes / bandwidth * 1e6
    return {"read_us": read_us, "is_read": 1 / READ_FACTOR <= read_us / rise_us <= READ_FACTOR}


def loop_order(entry: dict[str, Any]) -> str:
    """The cached loop against the full one at one length, by their raw repetitions: 'faster' where every cached
    loop beat every full one (their min–max ranges do not overlap), 'slower' where every one lost, 'unclear' where
    the ranges overlap and this run cannot tell the two apart."""
    full, cached = (entry["modes"][mode]["durations_ns"] for mode in ("full", "cached"))
    if max(cached) < min(full):
        return "faster"
    if min(cached) > max(full):
        return "slower"
    return "unclear"


def check_invariants(record: dict[str, Any], source: str) -> None:
    """The raw data must describe this lab's experiment: its two modes, one decode step per position, the
    precision check at the longest length, and cache tensors as large as the formula."""
    bench = record["config"]["benchmark"]
    if bench["modes"] != list(MODES) or bench["baseline"] != BASELINE:
        refuse(source, ("config", "benchmark", "modes"), f"are {bench['modes']} with baseline {bench['baseline']!r}, "
               f"but this lab measures {list(MODES)} with baseline {BASELINE!r}")
    last = record["lengths"][-1]["length"]
    if record["precision"]["length"] != last:
        refuse(source, ("precision", "length"), f"is {record['precision']['length']}, but the precision check "
               f"runs at the longest length, {last}")
    check_trained(record, source)
    model, batch = record["config"]["model"], bench["batch"]
    for index, entry in enumerate(record["lengths"]):
        if entry["steps"] != entry["length"]:
            refuse(source, ("lengths", index, "steps"), f"is {entry['steps']}, but a loop over {entry['length']} "
                   f"positions makes {entry['length']} decode steps")
        formula = cache_bytes(model, batch, entry["length"])
        if entry["cache_bytes"]["measured"] != formula:
            refuse(source, ("lengths", index, "cache_bytes", "measured"), f"is {entry['cache_bytes']['measured']}, "
                   f"but the cache tensors of 2 x B x Hkv x T x D x bytes hold {formula} from the record's config")


def check_trained(record: dict[str, Any], source: str) -> None:
    """The trained model's answers are as long as asked (or end at a stop token), and the cached logits equal
    the full recompute's within the stated tolerance at every position."""
    section = record["trained"]
    for dtype in ("float32", "bfloat16"):
        count = len(section[dtype]["ids"])
        if not 1 <= count <= section["new_tokens"]:
            refuse(source, ("trained", dtype, "ids"), f"holds {count} tokens, but the answer was {section['new_tokens']} "
                   f"tokens at most")
    forced = section["teacher_forced"]
    if forced["positions"] != section["prompt_tokens"] + len(section["float32"]["ids"]):
        refuse(source, ("trained", "teacher_forced", "positions"), f"is {forced['positions']}, but the prompt's "
               f"{section['prompt_tokens']} tokens and the float32 answer's {len(section['float32']['ids'])} make "
               f"{section['prompt_tokens'] + len(section['float32']['ids'])}")
    if forced["bfloat16_argmax_agrees"] > forced["positions"]:
        refuse(source, ("trained", "teacher_forced", "bfloat16_argmax_agrees"), f"is {forced['bfloat16_argmax_agrees']}, "
               f"more than the {forced['positions']} positions compared")
    tolerance = section["tolerance"]
    bound = tolerance_bound(tolerance["atol"], tolerance["rtol"], forced["max_abs_reference"])
    if forced["cached_vs_full_max_abs_diff"] > bound:
        refuse(source, ("trained", "teacher_forced", "cached_vs_full_max_abs_diff"), f"is "
               f"{forced['cached_vs_full_max_abs_diff']:g}, beyond atol + rtol x max|reference| = {bound:g}")


def derive(record: dict[str, Any]) -> Figures:
    """Per length, the byte formula's count for the record's config; the bytes per position and at the worked
    example; the decode steps compared; the positions each path projects over the longest loop; the trained
    model's answers compared; and the real models' caches priced from the published configurations."""
    config, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    figures = Figures()
    for index, entry in enumerate(record["lengths"]):
        figures.add(("lengths", index, "cache_bytes", "formula"), cache_bytes(config, batch, entry["length"]),
                    "2 x B x Hkv x T x D x bytes from the record's config")
    how = "2 x B x Hkv x D x bytes from the record's config"
    figures.add(("cache_formula", "per_position_bytes"), cache_bytes(config, batch, 1), how)
    figures.add(("cache_formula", "worked_example_bytes"), cache_bytes(config, batch, WORKED_EXAMPLE),
                f"{how}, at {WORKED_EXAMPLE} positions")
    figures.add(("compared_steps",), sum(entry["steps"] for entry in record["lengths"]), "the steps of every length")
    full, cached = projections(record["lengths"][-1]["steps"])
    figures.add_each(("projections",), {"full": full, "cached": cached}, "the longest loop's steps")
    section = record["trained"]
    exact = section["float32"]
    figures.add(("trained", "same_answer_without_cache"), exact["ids"] == exact["full_recompute_ids"],
                "comparing the cached and the full-recompute float32 answers")
    figures.add(("trained", "bfloat16_parts_at"), first_departure(exact["ids"], section["bfloat16"]["ids"]),
                "the first token where the bfloat16 answer differs from the float32 one")
    figures.add_each(("capacity",), capacity(), "llm_models/published/models.toml priced by kv_cache.memory")
    figures.add_each(("cached_read",), cached_read(record), "the cached mode's per-step medians and stored regime")
    figures.add(("loop_order",), [loop_order(entry) for entry in record["lengths"]],
                "per length, the cached and full loops' raw repetitions: whether their min–max ranges overlap")
    held = {entry["length"]: cache_bytes(config, batch, entry["length"]) for entry in record["lengths"]}
    for mode in MODES:
        shape = step_shape(record, held, mode)
        how = f"the {mode} mode's per-step statistics and spreads, and the byte formula per length"
        figures.add_each(("step_shapes", mode), {key: value for key, value in shape.items() if key != "departure"}, how)
        # One figure, not one per leaf: it is null or an object (with a rise null or an object) as the data moves,
        # and a record filled again must be able to replace either by the other.
        figures.add(("step_shapes", mode, "departure"), shape["departure"], how)
    return figures
