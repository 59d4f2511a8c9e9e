"""Every figure of the storage record that follows from its raw data, and what the raw data must satisfy.

Torch-free: the record holds only raw data; the benchmark holds the counts it took from its caches and pools to
``derive``'s formulas before it writes (a layout that holds other than its formula fails the run), the site build
derives every figure with ``derive`` when it reads the record (labkit.figures.check_record), and the views read
the figures derived there and import the constants below. The shared timing statistics (min/median/max,
speedups) come from labkit.summary.sweep_figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from labkit.figures import Figures, refuse, tolerance_bound
from labkit.records import JsonPath
from labkit.summary import statistics_frame
from llm_models.kv_bytes import kv_cache_bytes

MODES = ("full", "concat", "prealloc", "paged")  # full recompute, then the three cached layouts, in run order
BASELINE = "full"
CACHED = MODES[1:]
TIE_SHARE = 0.02  # medians closer than this share of the faster one count as a tie, as do overlapping ranges
SMALL_TRANSIENT = 0.05  # a peak within this share of the retained bytes draws as two bars of one length
FIXED_MAJORITY = 0.5  # the paged gap is "mostly fixed" when the line's intercept is at least this share of it


def cache_bytes(model: dict[str, Any], kv_heads: int, length: int) -> int:
    """2 x Hkv x T x D x bytes for one request (the storage lab decodes one at a time)."""
    return kv_cache_bytes(1, kv_heads, length, model["head_dim"], model["bytes_per_element"])


def blocks(positions: int, block_size: int) -> int:
    """Blocks of ``block_size`` that ``positions`` positions occupy: the last one may be partly filled."""
    return -(-positions // block_size)


def retained(model: dict[str, Any], kv_heads: int, length: int, block_size: int) -> dict[str, int]:
    """Bytes each layout holds after a loop of ``length`` positions: exact, capacity, whole blocks."""
    exact = cache_bytes(model, kv_heads, length)
    return {"concat": exact, "prealloc": exact,
            "paged": blocks(length, block_size) * cache_bytes(model, kv_heads, block_size)}


def expect(source: str, path: JsonPath, stored: Any, wanted: Any, how: str) -> None:
    if stored != wanted:
        refuse(source, path, f"is {stored}, but {how} gives {wanted}")


def check_invariants(record: dict[str, Any], source: str) -> None:
    """The raw data must describe this lab's experiment: its four modes, one request, one block size
    everywhere, a position table as long as the longest use, the timed window, peaks at least what is
    retained, every grouped-query layout within tolerance of full recompute at every position."""
    bench, model = record["config"]["benchmark"], record["config"]["model"]
    if bench["modes"] != list(MODES) or bench["baseline"] != BASELINE:
        refuse(source, ("config", "benchmark", "modes"), f"are {bench['modes']} with baseline {bench['baseline']!r}, "
               f"but this lab measures {list(MODES)} with baseline {BASELINE!r}")
    expect(source, ("config", "benchmark", "batch"), bench["batch"], 1, "the storage lab (one request at a time)")
    memory, sharing, paging = record["memory"], record["sharing"], record["paging"]
    for section in ("memory", "sharing"):
        expect(source, (section, "block_size"), record[section]["block_size"], bench["block_size"],
               "config.benchmark.block_size")
    longest = max(bench["lengths"][-1] + bench["window"], memory["length"], sharing["prompt"] + sharing["tokens"])
    expect(source, ("config", "model", "max_positions"), model["max_positions"], longest,
           "the longest prefix + window, memory loop or shared prompt + tokens")
    expect(source, ("paging", "length_range"), paging["length_range"], [1, model["max_positions"]],
           "[1, config.model.max_positions]")
    for index, entry in enumerate(record["lengths"]):
        expect(source, ("lengths", index, "steps"), entry["steps"], bench["window"],
               "the timed window (config.benchmark.window)")
    expect(source, ("memory", "variants"), sorted(memory["variants"]), sorted(CACHED), "the cached modes")
    for mode, values in memory["variants"].items():
        if values["peak_bytes"] < values["retained_bytes"]:
            refuse(source, ("memory", "variants", mode, "peak_bytes"), f"is {values['peak_bytes']}, below the "
                   f"{values['retained_bytes']} bytes retained at the end")
    grouped_query_invariants(record, source)
    low, high = paging["length_range"]
    if not all(low <= n <= high for n in paging["request_lengths"]):
        refuse(source, ("paging", "request_lengths"), f"holds a length outside length_range [{low}, {high}]")


def grouped_query_invariants(record: dict[str, Any], source: str) -> None:
    """Every variant has the model's query heads, decodes the memory loop, compares every position of it,
    covers every cached layout, and lies within the tolerance everywhere."""
    model, tolerance = record["config"]["model"], record["tolerance"]
    for index, row in enumerate(record["gqa"]):
        at = ("gqa", index)
        expect(source, (*at, "heads"), row["heads"], model["heads"], "config.model.heads")
        expect(source, (*at, "length"), row["length"], record["memory"]["length"],
               "the memory loop's length (memory.length)")
        expect(source, (*at, "positions_compared"), row["positions_compared"], row["length"],
               "every position of the loop")
        expect(source, (*at, "layouts"), sorted(row["layouts"]), sorted(CACHED),
               "the cached modes of config.benchmark.modes")
        for mode, layout in row["layouts"].items():
            bound = tolerance_bound(tolerance["atol"], tolerance["rtol"], layout["max_abs_reference"])
            if layout["max_abs_diff"] > bound:
                refuse(source, (*at, "layouts", mode, "max_abs_diff"), f"is {layout['max_abs_diff']:g}, beyond "
                       f"atol + rtol x max|reference| = {bound:g}")


def derive(record: dict[str, Any]) -> Figures:
    """The paged step's overhead over preallocation, split by a line; the byte formulas of the memory loop and
    the grouped-query variants with the ratios the page compares; the paging table's counts from its request
    lengths; and the blocks and bytes prefix sharing needs."""
    figures = Figures()
    model = record["config"]["model"]
    figures.add_each(("paged_overhead",), paged_overhead(record), "a least-squares line through the paged step's "
                "median minus the preallocated one's, per decode step, at every length")
    memory_figures(record, figures)
    block_size = record["config"]["benchmark"]["block_size"]
    multi_head = next((r for r in record["gqa"] if r["kv_heads"] == r["heads"]), record["gqa"][0])
    for index, row in enumerate(record["gqa"]):
        formula = cache_bytes(model, row["kv_heads"], row["length"])
        figures.add(("gqa", index, "formula_bytes"), formula, "2 x Hkv x T x D x bytes")
        figures.add(("gqa", index, "share_of_multi_head"),
                    formula / cache_bytes(model, multi_head["kv_heads"], multi_head["length"]),
                    "its formula bytes over the multi-head variant's")
        for mode, value in retained(model, row["kv_heads"], row["length"], block_size).items():
            figures.add(("gqa", index, "layouts", mode, "bytes"), value, f"{mode} storage")
    paging_figures(record["paging"], figures)
    sharing_figures(model, record["sharing"], figures)
    return figures


def paged_overhead(record: dict[str, Any]) -> dict[str, Any] | None:
    """Paged's median step minus prealloc's at each length (ns per step) and a least-squares line through
    it: its intercept (the part paid at zero prefix) and slope (per cached position), and the intercept's share of
    the gap at the shortest length and at the longest (None where that gap is not above zero); None for one length.

    What the page may call that gap, by the raw repetitions' min–max ranges per step: ``apart_at_first``, every
    paged step at the shortest length slower than every preallocated one; ``verdict`` 'none' (no gap by medians
    at the shortest length), 'fixed' (mostly the intercept, with the gap it is a share of apart at the shortest
    length), 'grows' (mostly the slope, with the gap apart at the shortest length and its range at the longest
    above its range at the shortest) or 'unclear' (the ranges cannot tell which)."""
    entries = record["lengths"]
    if len(entries) < 2:
        return None
    medians = statistics_frame(entries)["median_ns"]
    lengths = [entry["length"] for entry in entries]
    gaps = [float(medians[(n, "paged")] - medians[(n, "prealloc")]) / entry["steps"]
            for n, entry in zip(lengths, entries)]
    slope, intercept = (float(value) for value in np.polyfit(lengths, gaps, 1))
    fixed_share = intercept / gaps[0] if gaps[0] else None  # None: no gap at the shortest length to share out
    mostly_fixed = intercept > 0 and fixed_share is not None and fixed_share >= FIXED_MAJORITY
    # The same share at the longest length: a fixed part most of the gap at the shortest need not be at the longest.
    share_at_longest = intercept / gaps[-1] if gaps[-1] > 0 else None
    mostly_fixed_at_longest = intercept > 0 and share_at_longest is not None and share_at_longest >= FIXED_MAJORITY
    spans = [gap_range(entry) for entry in entries]  # the gap's [lowest, highest] per step, from the raw ranges
    apart_at_first = spans[0][0] > 0
    grew_apart = spans[-1][0] > spans[0][1]
    verdict = ("none" if gaps[0] <= 0 else "unclear" if not apart_at_first else "fixed" if mostly_fixed else
               "grows" if grew_apart else "unclear")
    return {"gap_per_step_ns": gaps, "intercept_ns": intercept, "slope_ns_per_position": slope,
            "fixed_share": fixed_share, "mostly_fixed": mostly_fixed, "fixed_share_at_longest": share_at_longest,
            "mostly_fixed_at_longest": mostly_fixed_at_longest, "apart_at_first": apart_at_first,
            "verdict": verdict}


def gap_range(entry: dict[str, Any]) -> list[float]:
    """Paged minus preallocated per step at one length, from their raw repetitions: [fastest paged − slowest
    preallocated, slowest paged − fastest preallocated], in ns; above zero, the two ranges do not overlap."""
    paged, prealloc = (entry["modes"][mode]["durations_ns"] for mode in ("paged", "prealloc"))
    return [(min(paged) - max(prealloc)) / entry["steps"], (max(paged) - min(prealloc)) / entry["steps"]]


def memory_figures(record: dict[str, Any], figures: Figures) -> None:
    """The memory loop's formula and retained bytes per layout, then how its peaks compare (peak_figures)."""
    model, memory = record["config"]["model"], record["memory"]
    block_size = record["config"]["benchmark"]["block_size"]
    figures.add(("memory", "formula_bytes"), cache_bytes(model, model["kv_heads"], memory["length"]),
                "2 x Hkv x T x D x bytes from the record's config")
    kept = retained(model, model["kv_heads"], memory["length"], block_size)
    for mode, value in kept.items():
        figures.add(("memory", "variants", mode, "retained_bytes"), value, f"{mode} storage of {memory['length']} positions")
    for figure in peak_figures({mode: values | {"retained_bytes": kept[mode]}
                                for mode, values in memory["variants"].items()}):
        figures.add(figure.path, figure.value, figure.how)


def peak_figures(variants: dict[str, dict[str, Any]]) -> Figures:
    """Each layout's peak against the bytes it retains, concatenation against preallocation, and paged storage
    against each other layout, at their paths under $.memory."""
    figures = Figures()
    for mode, values in variants.items():
        at, peak, kept = ("memory", "variants", mode), values["peak_bytes"], values["retained_bytes"]
        figures.add((*at, "peak_ratio"), peak / kept, "its peak over its retained bytes")
        figures.add((*at, "transient_bytes"), peak - kept, "its peak minus its retained bytes")
        figures.add((*at, "transient_share"), (peak - kept) / kept, "its transient bytes over its retained ones")
    concat, prealloc = variants["concat"], variants["prealloc"]
    figures.add_each(("memory", "concat_vs_prealloc"), {name: concat[f"{name}_bytes"] / prealloc[f"{name}_bytes"]
                                                   for name in ("peak", "allocated")},
                "concat's peak and allocated bytes over prealloc's")
    figures.add_each(("memory", "paged_minus"), {mode: {name: variants["paged"][name] - variants[mode][name]
                                                   for name in ("peak_bytes", "allocated_bytes")}
                                            for mode in variants if mode != "paged"},
                "paged's peak and allocated bytes minus each other layout's")
    return figures


def paging_figures(paging: dict[str, Any], figures: Figures) -> None:
    """Per block size: the blocks the request lengths occupy, one table entry each, and the empty slots."""
    lengths = paging["request_lengths"]
    used = sum(lengths)
    figures.add(("paging", "requests"), len(lengths), "the number of request_lengths")
    figures.add(("paging", "used_slots"), used, "the sum of request_lengths")
    for index, row in enumerate(paging["rows"]):
        size, at = row["block_size"], ("paging", "rows", index)
        in_use = sum(blocks(n, size) for n in lengths)
        figures.add((*at, "blocks_in_use"), in_use, f"blocks of {size} for request_lengths")
        figures.add((*at, "table_entries"), in_use, "one table entry per block")
        figures.add((*at, "allocated_slots"), in_use * size, "blocks x block_size")
        figures.add((*at, "wasted_slots"), in_use * size - used, "allocated - used slots")
        figures.add((*at, "waste_share"), (in_use * size - used) / (in_use * size), "wasted / allocated slots")


def sharing_figures(model: dict[str, Any], sharing: dict[str, Any], figures: Figures) -> None:
    """Blocks and bytes of N requests that each keep their own prompt, and of N forks of one prompt."""
    n, prompt, tokens, size = sharing["requests"], sharing["prompt"], sharing["tokens"], sharing["block_size"]
    per_request = blocks(prompt + tokens, size)
    full_prompt_blocks, partial = divmod(prompt, size)
    # Every request but the last copies a partly filled shared block on its first write; the last one
    # finds itself its sole owner and writes in place.
    copying = bool(partial and tokens)
    block_bytes = cache_bytes(model, model["kv_heads"], size)
    shared_total = full_prompt_blocks + n * (per_request - full_prompt_blocks)
    how = f"{n} requests, a {prompt}-token prompt, {tokens} tokens each and blocks of {size}"
    for path, value in (
        (("block_bytes",), block_bytes),
        (("per_request_blocks",), per_request),
        (("prompt_full_blocks",), full_prompt_blocks),
        (("prompt_last_block_positions",), partial),
        (("own_blocks",), per_request - full_prompt_blocks),
        (("without", "blocks"), n * per_request),
        (("without", "bytes"), n * per_request * block_bytes),
        (("with", "prompt_blocks"), blocks(prompt, size)),
        (("with", "shared_blocks"), full_prompt_blocks if copying else blocks(prompt, size)),
        (("with", "copied_blocks"), n - 1 if copying else 0),
        (("with", "blocks"), shared_total),
        (("with", "bytes"), shared_total * block_bytes),
        (("saved_bytes",), (n * per_request - shared_total) * block_bytes),
        (("saved_share",), (n * per_request - shared_total) / (n * per_request)),
    ):
        figures.add(("sharing", *path), value, how)


# --- The page's concept diagrams: the block pool's bookkeeping without tensors -----------------------
# kv_storage.paged keeps these same rules beside the tensors; test_storage_pictures.py replays every
# script below (and random ones) on a real BlockPool and requires the same tables, counts and free list.

TABLE_EXAMPLE = {"block_size": 4, "pool": 8, "lengths": {"A": 10, "B": 7}}  # two requests, decoded in alternation
FORK_EXAMPLE = {"block_size": 4, "pool": 8, "prompt": 10}  # a 10-token prompt: two full blocks and half of a third


def locate(position: int, block_size: int) -> tuple[int, int]:
    """Logical block and slot of a position: the table entry ``position // S`` and slot ``position % S``."""
    return divmod(position, block_size)


class TableModel:
    """Block tables, reference counts and the free stack of a BlockPool, with the same allocation order."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.refcount = [0] * num_blocks
        self.free = list(range(num_blocks - 1, -1, -1))  # a stack: last released, first reused
        self.tables: dict[str, list[int]] = {}
        self.lengths: dict[str, int] = {}
        self.copies: list[tuple[str, int, int]] = []  # (request, shared block, its private copy)

    def admit(self, name: str) -> None:
        self.tables[name], self.lengths[name] = [], 0

    def _allocate(self) -> int:
        if not self.free:
            raise ValueError(f"all {len(self.refcount)} blocks are in use")
        block = self.free.pop()
        self.refcount[block] = 1
        return block

    def _release(self, block: int) -> None:
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self.free.append(block)

    def append(self, name: str, count: int = 1) -> None:
        """Copy a shared, partly filled last block first (copy-on-write), then take blocks as positions need."""
        table, length = self.tables[name], self.lengths[name]
        if count and length % self.block_size and self.refcount[table[-1]] > 1:
            shared = table[-1]
            table[-1] = self._allocate()
            self._release(shared)
            self.copies.append((name, shared, table[-1]))
        while len(table) * self.block_size < length + count:
            table.append(self._allocate())
        self.lengths[name] = length + count

    def fork(self, parent: str, child: str) -> None:
        for block in self.tables[parent]:
            self.refcount[block] += 1
        self.tables[child], self.lengths[child] = list(self.tables[parent]), self.lengths[parent]

    def release(self, name: str) -> None:
        for block in self.tables.pop(name):
            self._release(block)
        del self.lengths[name]

    def empty_slots(self) -> int:
        """Slots reserved in the requests' last blocks that hold no position yet."""
        return sum(len(table) * self.block_size - self.lengths[name] for name, table in self.tables.items())

    def filled(self, name: str) -> list[int]:
        """Positions held in each of the request's blocks, in table order (the last may be partial)."""
        length, size = self.lengths[name], self.block_size
        return [min(size, length - i * size) for i in range(len(self.tables[name]))]


def interleaved(example: dict[str, Any] = TABLE_EXAMPLE) -> TableModel:
    """Requests admitted together and decoded one position each in turn, until each has its length."""
    model = TableModel(example["pool"], example["block_size"])
    lengths = example["lengths"]
    for name in lengths:
        model.admit(name)
    for step in range(max(lengths.values())):
        for name, length in lengths.items():
            if step < length:
                model.append(name)
    return model


def forked(example: dict[str, Any] = FORK_EXAMPLE, child_tokens: int = 0, parent_tokens: int = 0) -> TableModel:
    """A parent prefills the prompt and forks a child; then the child appends, then the parent."""
    model = TableModel(example["pool"], example["block_size"])
    model.admit("parent")
    model.append("parent", example["prompt"])
    model.fork("parent", "child")
    model.append("child", child_tokens)
    model.append("parent", parent_tokens)
    return model
