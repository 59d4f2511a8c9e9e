"""The storage page's generated sentences say what the record supports, and no more."""

from __future__ import annotations

import unittest
from typing import Any

from kv_storage.figures import TIE_SHARE, paged_overhead, peak_figures
from kv_storage_views import headline
from kv_storage_views.decode_step import (
    equivalence_rows,
    gap_sentences,
    paged_overhead_sentences,
    ranking_sentence,
)
from kv_storage_views.grouped_query import gqa_sentences
from kv_storage_views.memory import memory_sentences
from kv_storage_views.results import (
    FLAT,
    answer_paged_view,
    fixed_part,
    flat_sentence,
    paged_item,
    regime_item,
    regime_view,
    speed_item,
    takeaway_memory_view,
    takeaway_step_view,
    verdicts,
)
from labkit.figures import fill
from labkit.regimes import FLAT_BAND
from labkit.summary import sweep_figures
from labkit.testing import committed_record

MODES = ["full", "concat", "prealloc", "paged"]


def sweep(windows: dict[int, dict[str, tuple[int, int, int]]], steps: int = 10,
          diffs: dict[int, float] | None = None) -> dict[str, Any]:
    """A timing record: per length, each mode's (min, median, max) window in ns over seven repetitions, with the
    figures the benchmark derives from them (labkit.summary.sweep_figures, kv_storage.figures)."""
    lengths = []
    for length, modes in windows.items():
        diff = (diffs or {}).get(length, 1e-7)
        lengths.append({
            "length": length, "steps": steps, "order": [MODES] * 7,
            "modes": {mode: {"durations_ns": [low, *[median] * 5, high]} for mode, (low, median, high) in modes.items()},
            "equivalence": {mode: {"max_abs_diff": diff, "max_abs_reference": 1.0, "within_tolerance": True,
                                   "argmax_agrees_every_step": True} for mode in MODES[1:]},
        })
    record = {"config": {"benchmark": {"modes": MODES, "baseline": "full", "batch": 1}},
              "tolerance": {"atol": 1e-5, "rtol": 1e-5}, "lengths": lengths,
              "memory": memory({"concat": (2, 4, 9), "prealloc": (2, 2, 9), "paged": (2, 3, 9)}) | {"length": 512}}
    fill(record, sweep_figures(record))
    record["paged_overhead"] = paged_overhead(record)
    return record


def memory(variants: dict[str, tuple[int, int, int]]) -> dict[str, Any]:
    """$.memory from each layout's (retained, peak, allocated) bytes, with the comparisons derived from them."""
    record = {"memory": {"variants": {mode: {"retained_bytes": kept, "peak_bytes": peak, "allocated_bytes": total,
                                             "allocations": 9} for mode, (kept, peak, total) in variants.items()}}}
    fill(record, peak_figures(record["memory"]["variants"]))
    return record["memory"]


def exact(value: int) -> tuple[int, int, int]:
    return value, value, value


class Ranking(unittest.TestCase):
    def test_modes_whose_ranges_overlap_are_ranked_as_a_tie_and_the_baseline_is_ranked_too(self) -> None:
        record = sweep({16: {"full": exact(3000), "concat": (2500, 2700, 2800), "prealloc": (2400, 2600, 2750),
                             "paged": exact(3900)}})
        self.assertIn("concat = prealloc < full < paged at 16 tokens.", ranking_sentence(record))

    def test_medians_closer_than_the_tie_share_are_a_tie_even_when_the_ranges_do_not_overlap(self) -> None:
        close = round(1000 * (1 + TIE_SHARE / 2))
        record = sweep({16: {"full": exact(5000), "concat": exact(close), "prealloc": exact(1000),
                             "paged": exact(9000)}})
        self.assertIn("concat = prealloc < full < paged", ranking_sentence(record))

    def test_a_clear_gap_is_an_order_and_a_repeated_order_is_not_spelled_out_again(self) -> None:
        order = {"full": exact(4000), "concat": exact(2000), "prealloc": exact(1000), "paged": exact(3000)}
        text = ranking_sentence(sweep({16: order, 32: order, 64: order}))
        self.assertIn("prealloc < concat < paged < full at 16 tokens; the same at 32 and 64 tokens.", text)


class Gaps(unittest.TestCase):
    def test_gaps_are_stated_per_decode_step_in_microseconds(self) -> None:
        record = sweep({16: {"full": exact(3_000_000), "concat": exact(2_000_000), "prealloc": exact(1),
                             "paged": exact(1)},
                        1024: {"full": exact(80_000_000), "concat": exact(3_000_000), "prealloc": exact(1),
                               "paged": exact(1)}}, steps=10)
        text = " ".join(gap_sentences(record, "concat"))
        self.assertIn("grew at every length of the sweep", text)
        self.assertIn("took 100.0 µs more than the concat step at 16 tokens, and 7,700 µs more at 1024 tokens", text)

    def test_a_ratio_resting_on_a_noisy_timing_says_so(self) -> None:
        record = sweep({16: {"full": exact(3000), "concat": exact(2000), "prealloc": exact(1), "paged": exact(1)},
                        1024: {"full": exact(90000), "concat": (2000, 3000, 5000), "prealloc": exact(1),
                               "paged": exact(1)}})
        text = " ".join(gap_sentences(record, "concat"))
        self.assertIn("30.00× at 1024 tokens (flagged as noisy: concat, spread 100%)", text)
        self.assertNotIn("16 tokens (flagged", text)

    def test_a_paged_gap_that_does_not_grow_with_length_is_called_a_fixed_per_step_cost(self) -> None:
        windows = {n: {"full": exact(9_000_000), "concat": exact(1_000_000), "prealloc": exact(1_000_000 + 1000 * n),
                       "paged": exact(1_800_000 + 2000 * n)} for n in (16, 256, 1024)}  # gap: 800 µs + 1 µs per position
        text = " ".join(paged_overhead_sentences(sweep(windows, steps=1)))
        self.assertIn("rises by 1,000 ns per cached position", text)
        self.assertIn("most of the gap at 16 tokens is a cost each step pays whatever the prefix length", text)

    def test_a_paged_gap_that_grows_with_length_is_not_called_fixed(self) -> None:
        windows = {n: {"full": exact(90000), "concat": exact(1000), "prealloc": exact(1000),
                       "paged": exact(1000 + 50 * n)} for n in (16, 256, 1024)}
        text = " ".join(paged_overhead_sentences(sweep(windows, steps=1)))
        self.assertIn("most of the gap at 16 tokens grows with the prefix", text)


class PagedVerdict(unittest.TestCase):
    """Paging's price is called fixed or growing only where the raw repetitions' min–max ranges tell the paged step
    from the preallocated one (kv_storage.figures.paged_overhead); the same medians with wider ranges are not split."""

    LENGTHS = (16, 256, 1024)

    def fixed(self, spread: int, per_position: int = 100) -> dict[str, Any]:
        """A gap of 800 µs + ``per_position`` ns per position by medians (mostly fixed at 16 tokens; at 1024 too for
        the default 0.1 µs, not for 1 µs), each step's range ``spread`` ns either side."""
        return sweep({n: {"full": exact(9_000_000), "concat": exact(1_000_000),
                          "prealloc": widen(1_000_000 + 1000 * n, spread),
                          "paged": widen(1_800_000 + (1000 + per_position) * n, spread)} for n in self.LENGTHS}, steps=1)

    def test_a_gap_mostly_fixed_at_16_and_at_1024_tokens_is_called_a_fixed_cost_at_both(self) -> None:
        record = self.fixed(100_000)
        self.assertTrue(paged_item(record).startswith("Paging's price here is mostly a fixed cost per step"))
        self.assertIn("not copying, at 16 tokens and at 1024:", paged_item(record))
        self.assertIn("at 1024 tokens those 800.0 µs are 89% of a 902.4 µs gap", paged_item(record))
        self.assertTrue(answer_paged_view(record).paragraphs[0].startswith("Most of it is bookkeeping per call"))
        self.assertIn("paging's extra time is mostly bookkeeping fixed per step.", takeaway_step_view(record).paragraphs[0])

    def test_a_gap_mostly_fixed_at_16_tokens_but_not_at_1024_is_called_fixed_only_at_16(self) -> None:
        record = self.fixed(100_000, per_position=1000)  # 800 µs of 816 at 16 tokens, of 1,824 at 1024
        item, takeaway = paged_item(record), takeaway_step_view(record).paragraphs[0]
        self.assertIn("is mostly a fixed cost per step (table to index tensors, scatter, gather setup) at 16 tokens, "
                      "not at 1024", item)
        self.assertIn("at 1024 tokens those 800.0 µs are 44% of a 1,824 µs gap", item)
        self.assertIn("paging's extra time is mostly bookkeeping fixed per step at 16 tokens, not at 1024", takeaway)
        self.assertTrue(answer_paged_view(record).paragraphs[0].startswith(
            "At 16 tokens most of it is bookkeeping per call; at 1024 most of it is not."))
        self.assertIn("at 1024 tokens that intercept is 44% of the gap, not most of it",
                      " ".join(paged_overhead_sentences(record)))
        for text in (item, takeaway):
            self.assertNotIn("at 16 tokens and at 1024", text)

    def test_the_same_medians_with_ranges_overlapping_at_16_tokens_are_not_split(self) -> None:
        record = self.fixed(500_000)
        said = " ".join([paged_item(record), *paged_overhead_sentences(record),
                         answer_paged_view(record).paragraphs[0], takeaway_step_view(record).paragraphs[0]])
        self.assertTrue(paged_item(record).startswith("Paging's price, fixed or growing, this run cannot split: at 16 "
                                                      "tokens the paged and preallocated steps' min–max ranges overlap"))
        self.assertIn("so this run cannot tell whether most of it is fixed or grows", said)
        self.assertIn("This run cannot say which part dominates", said)
        self.assertIn("whether paging's extra time is fixed per step or grows, this run's ranges cannot tell", said)
        for claim in ("mostly a fixed cost", "is a cost each step pays", "bookkeeping per call, not copying",
                      "mostly bookkeeping fixed", "grows with the prefix, as"):
            self.assertNotIn(claim, said)

    def test_a_gap_growing_by_medians_whose_longest_range_does_not_clear_the_shortest_is_not_called_growing(
            self) -> None:
        windows = {n: {"full": exact(90000), "concat": exact(1000), "prealloc": exact(1000),
                       "paged": exact(1000 + 50 * n)} for n in self.LENGTHS}
        windows[1024]["paged"] = (1000, 1000 + 50 * 1024, 60000)  # its fastest step no slower than prealloc's
        record = sweep(windows, steps=1)
        self.assertIn("but the gap's min–max range at 1024 tokens does not clear its range at 16, so this run cannot "
                      "tell whether most of it is fixed or grows", " ".join(paged_overhead_sentences(record)))
        self.assertNotIn("mostly the per-step gather", paged_item(record))

    def test_the_committed_record_names_paging_fixed_only_where_every_paged_step_was_slower_at_the_shortest(
            self) -> None:
        record = committed_record(__file__)
        first = record["lengths"][0]
        paged, prealloc = (first["modes"][mode]["durations_ns"] for mode in ("paged", "prealloc"))
        named = "mostly a fixed cost" in paged_item(record) or "mostly the per-step gather" in paged_item(record)
        self.assertEqual(named, min(paged) > max(prealloc) and record["paged_overhead"]["verdict"] != "unclear",
                         paged_item(record))

    def test_the_committed_record_calls_paging_mostly_fixed_at_the_longest_only_where_the_intercept_is_half_its_gap(
            self) -> None:
        record = committed_record(__file__)
        fit, first, last = record["paged_overhead"], record["lengths"][0], record["lengths"][-1]
        gap = (last["modes"]["paged"]["per_step"]["median_ns"] - last["modes"]["prealloc"]["per_step"]["median_ns"])
        both = f"at {first['length']} tokens and at {last['length']}" in paged_item(record)
        self.assertEqual(both, fit["verdict"] == "fixed" and fit["intercept_ns"] >= gap / 2, paged_item(record))


def widen(median: int, spread: int) -> tuple[int, int, int]:
    return median - spread, median, median + spread


class Equivalence(unittest.TestCase):
    def test_a_maximum_reached_at_several_lengths_names_each_of_them(self) -> None:
        windows = {n: {mode: exact(1000) for mode in MODES} for n in (16, 32, 64, 256)}
        record = sweep(windows, diffs={16: 4e-7, 32: 4e-7, 64: 3e-7, 256: 4e-7})
        self.assertEqual(equivalence_rows(record)[0][1:3], ("4.00e-07", "first at 16 tokens, again at 32 and 256 tokens"))


def layouts(concat: int, prealloc: int, paged: int) -> dict[str, dict[str, Any]]:
    return {mode: {"bytes": value, "max_abs_diff": 1e-7, "max_abs_reference": 1.0, "within_tolerance": True,
                   "argmax_agrees_every_step": True}
            for mode, value in (("concat", concat), ("prealloc", prealloc), ("paged", paged))}


class Memory(unittest.TestCase):
    def test_paged_storage_is_placed_among_the_layouts_by_peak_and_by_bytes_allocated(self) -> None:
        text = " ".join(memory_sentences(memory({"concat": (100, 200, 900), "prealloc": (100, 102, 90),
                                                 "paged": (100, 201, 950)})))
        self.assertIn("Paged storage's peak was 201 bytes, the highest of all layouts (1 bytes above concat's and "
                      "99 bytes above prealloc's)", text)
        self.assertIn("did not give the lowest peak: concat and prealloc peaked lower", text)
        self.assertIn("(peak ÷ retained: 2.00×)", text)
        self.assertIn("concat peak ÷ prealloc peak: 1.96×", text)


class GroupedQuery(unittest.TestCase):
    def test_one_head_is_singular_and_equal_byte_counts_are_not_repeated(self) -> None:
        rows = [{"kv_heads": k, "heads": 4, "length": 8, "positions_compared": 8, "layouts": layouts(b, b, b),
                 "share_of_multi_head": k / 4} for k, b in ((4, 400), (1, 100))]
        text = " ".join(gqa_sentences(rows))
        self.assertIn("With 1 key/value head for 4 query heads", text)
        self.assertIn("prealloc and paged storage hold exactly the same", text)
        self.assertNotIn("1 key/value heads", text)

    def test_different_byte_counts_are_each_stated(self) -> None:
        rows = [{"kv_heads": k, "heads": 4, "length": 8, "positions_compared": 8, "layouts": layouts(b, b, 2 * b),
                 "share_of_multi_head": k / 4} for k, b in ((4, 400), (2, 200))]
        self.assertIn("prealloc storage holds 200 bytes; paged storage holds 400 bytes", " ".join(gqa_sentences(rows)))


class Headline(unittest.TestCase):
    def test_every_headline_ratio_names_what_is_divided_by_what(self) -> None:
        record = sweep({1024: {"full": exact(8000), "concat": exact(2000), "prealloc": exact(1000),
                               "paged": exact(4000)}})
        labels = dict(headline(record))
        self.assertEqual(labels["full ÷ prealloc, median step time at 1024 tokens"], 8.0)
        self.assertEqual(labels["concat ÷ prealloc, peak allocation in the 512-step loop"], 2.0)


def gap_fit(gap_ns: float, intercept_ns: float, slope: float) -> dict[str, Any]:
    """A paged-overhead line as kv_storage.figures.paged_overhead stores it, from its three numbers."""
    return {"gap_per_step_ns": [gap_ns], "intercept_ns": intercept_ns, "slope_ns_per_position": slope,
            "fixed_share": intercept_ns / gap_ns, "mostly_fixed": intercept_ns >= gap_ns / 2}


class Wording(unittest.TestCase):
    def test_an_intercept_above_the_gap_is_not_called_a_share_of_it(self) -> None:
        above = fixed_part(gap_fit(75_562.6, 76_186.2, 80.4))  # the reference record's numbers
        self.assertIn("starts at 76.2 µs at zero prefix, no less than that whole gap", above)
        self.assertNotIn("%", above)
        below = fixed_part(gap_fit(80_000, 60_000, 80))
        self.assertIn("puts 60.0 µs of it (75%) at zero prefix", below)
        self.assertIn("puts nothing at zero prefix", fixed_part(gap_fit(80_000, -5_000, 300)))

    def test_the_speed_bullet_says_whether_every_layout_matched_before_it_was_timed(self) -> None:
        record = sweep({1024: {"full": exact(8000), "concat": exact(2000), "prealloc": exact(1000),
                               "paged": exact(4000)}})
        self.assertIn("every layout first matched full recomputation's logits", speed_item(record))
        record["lengths"][0]["equivalence"]["paged"]["within_tolerance"] = False
        self.assertIn("not every layout matched", speed_item(record))

    def test_the_step_takeaway_names_the_fastest_layout_or_the_tie(self) -> None:
        windows = {n: {"full": exact(9000 * n), "concat": exact(2000 * 16 + n), "prealloc": exact(1000 * 16 + n),
                       "paged": exact(3000 * 16 + 10 * n)} for n in (16, 256, 1024)}
        text = takeaway_step_view(sweep(windows, steps=1)).paragraphs[0]
        self.assertIn("at 1024 tokens prealloc was the fastest layout", text)
        tie = {n: {"full": exact(9000 * n), "concat": exact(1000 * 16), "prealloc": exact(1000 * 16),
                   "paged": exact(3000 * 16)} for n in (16, 256, 1024)}
        self.assertIn("concat and prealloc tied as the fastest layouts", takeaway_step_view(sweep(tie, steps=1)).paragraphs[0])

    def test_the_memory_takeaway_orders_the_layouts_by_their_peak(self) -> None:
        record = {"memory": memory({"concat": (2, 4, 9), "prealloc": (2, 2, 9), "paged": (2, 3, 9)})}
        self.assertIn("peak was 2.00× what concat retains, 1.50× what paged retains and 1.00× what prealloc retains",
                      takeaway_memory_view(record).paragraphs[0])


def cached(windows: dict[int, tuple[int, int, int]], paged: dict[int, tuple[int, int, int]] | None = None,
           full: dict[int, tuple[int, int, int]] | None = None) -> dict[str, Any]:
    """A one-step sweep whose concat and prealloc windows (and paged's, unless given) are ``windows`` per length,
    with full recomputation ten times slower than the slowest cached step unless given."""
    return sweep({n: {"full": (full or {}).get(n, exact(10 * window[2])), "concat": window, "prealloc": window,
                      "paged": (paged or windows)[n]} for n, window in windows.items()}, steps=1)


class Flatness(unittest.TestCase):
    NARROW = {n: (980, 1000, 1020) for n in (16, 64, 256)}  # medians equal, each cell spread 4%
    WIDE = {n: (850, 1000, 1150) for n in (16, 64, 256)}  # the same medians, each cell spread 30%

    def test_cached_steps_within_10_percent_with_cells_spread_4_percent_are_called_flat(self) -> None:
        record = cached(self.NARROW)
        self.assertTrue(regime_item(record).startswith(
            "Overhead-bound: from 16 to 256 tokens every cached step stayed within 10% of its 16-token time, each "
            "cell's spread under that, while the prefix grew 16-fold"), regime_item(record))
        self.assertIn("From 16 tokens up to 256 tokens, the step of every cached layout stayed within 10% of its "
                      "16-token time, each cell's min–max spread under that", flat_sentence(record))

    def test_each_flat_span_is_said_to_grow_the_prefix_as_far_as_it_reaches_and_no_further(self) -> None:
        lengths = (16, 64, 256, 1024)
        paged = {n: (980, 1000, 1020) if n <= 64 else (1980, 2000, 2020) for n in lengths}  # flat to 64 only
        sentence = flat_sentence(cached({n: (980, 1000, 1020) for n in lengths}, paged=paged))
        self.assertIn("while the prefix it attends to grew 64-fold (concat), 64-fold (prealloc) and 4-fold (paged):",
                      sentence)
        self.assertNotIn("or more", sentence)
        wide = flat_sentence(cached(self.WIDE))
        self.assertIn("while the prefix grew 16-fold, but the cells spread 30%", wide)
        self.assertNotIn("or more", wide)

    def test_the_same_medians_with_cells_spread_30_percent_are_not_called_flat(self) -> None:
        record = cached(self.WIDE)
        self.assertEqual(regime_item(record), "Flat or not, this run cannot tell: from 16 tokens up to 256 tokens the "
                         "cells of every cached layout spread 30% of their medians (min–max), too wide to tell whether "
                         "the step stayed within 10%.")
        sentence = flat_sentence(record)
        self.assertIn("too wide to tell a 10% change: this run cannot say whether they stayed flat", sentence)
        self.assertNotIn("overhead-bound, a fixed cost", sentence)

    def test_a_layout_whose_cells_spread_30_percent_is_named_apart_from_the_flat_ones(self) -> None:
        text = regime_item(cached(self.NARROW, paged=self.WIDE))
        self.assertIn("Overhead-bound: from 16 to 256 tokens concat and prealloc cached step stayed within 10%", text)
        self.assertIn("From 16 tokens up to 256 tokens the cells of the paged layout spread 30% of their medians", text)
        self.assertNotIn("the layouts differ by what each call does", text)

    def test_steps_rising_beyond_their_cells_are_said_to_grow(self) -> None:
        record = cached({n: (980 * n, 1000 * n, 1020 * n) for n in (16, 64, 256)})
        self.assertTrue(regime_item(record).startswith("No flat span"))
        self.assertIn("beyond both cells' min–max ranges, within a fourfold growth of the prefix: in this record it "
                      "grows with the cache.", flat_sentence(record))

    def test_a_median_leaving_the_band_inside_the_cells_ranges_is_not_called_growth(self) -> None:
        record = cached({16: (600, 1000, 1400), 64: (800, 1200, 1600), 256: (1000, 1400, 1800)})  # +20%, ranges overlap
        sentence = flat_sentence(record)
        self.assertIn("but inside the cells' min–max ranges (they spread 67–80%): this run cannot say whether it "
                      "stayed flat.", sentence)
        self.assertNotIn("grows with the cache", sentence)
        self.assertTrue(regime_item(record).startswith("Flat or not, this run cannot tell"))

    def test_the_committed_record_calls_a_layout_flat_only_over_cells_narrower_than_the_band(self) -> None:
        record = committed_record(__file__)
        found = verdicts(record)
        for mode, span in found.get(FLAT, {}).items():
            for entry in record["lengths"]:
                if entry["length"] in span:
                    durations = entry["modes"][mode]["durations_ns"]
                    self.assertLess((max(durations) - min(durations)) / entry["modes"][mode]["per_step"]["median_ns"]
                                    / entry["steps"], FLAT_BAND, (mode, entry["length"]))
        self.assertEqual(regime_item(record).startswith("Overhead-bound"), FLAT in found, regime_item(record))

    def test_recomputation_is_said_to_grow_only_beyond_its_cells_ranges(self) -> None:
        growing = cached(self.NARROW, full={n: (9_800 * n, 10_000 * n, 10_200 * n) for n in (16, 64, 256)})
        self.assertIn("Recomputing the prefix grew 16.0-fold from 16 to 256 tokens, beyond both cells' min–max ranges: "
                      "work that scales.", regime_view(growing).paragraphs[-1])
        noisy = cached(self.NARROW, full={16: (500, 1000, 1500), 64: (700, 1200, 1700), 256: (1000, 1500, 2000)})
        sentence = regime_view(noisy).paragraphs[-1]
        self.assertIn("but its cells spread 100% and 67% of their medians: this run cannot tell whether it grew.",
                      sentence)
        self.assertNotIn("work that scales", sentence)


if __name__ == "__main__":
    unittest.main()
