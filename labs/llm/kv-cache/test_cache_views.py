"""The page's step sentences say flat, grew or rose only where the difference exceeds the cells' own spreads, and
put a rise down to reading the prefix only where a measured bandwidth makes the added bytes take as long."""

from __future__ import annotations

import copy
import re
import unittest
from typing import Any

from kv_cache import figures
from kv_cache_views import VIEWS
from kv_cache_views.results import flat_sentence, read_sentence, regime_view, speed_item, step_item
from labkit.figures import fill
from labkit.regimes import FLAT_BAND
from labkit.summary import sweep_figures
from labkit.testing import committed_record

RECORD = committed_record(__file__)
LENGTHS = (16, 32, 64, 128, 256, 512)
Window = tuple[float, float, float]  # (min, median, max) µs per decode step


def timed(cached: dict[int, Window], full: dict[int, Window] | None = None) -> dict[str, Any]:
    """A copy of the committed record whose raw repetitions give each length's (min, median, max) per step: one at
    the min, one at the max, the rest at the median; every figure derived again, as the benchmark stores them."""
    record = copy.deepcopy(RECORD)
    for entry in record["lengths"]:
        for mode, windows in (("cached", cached), ("full", full or {})):
            if entry["length"] in windows:
                low, median, high = (round(us * 1000 * entry["steps"]) for us in windows[entry["length"]])
                count = len(entry["modes"][mode]["durations_ns"])
                entry["modes"][mode]["durations_ns"] = [low, *[median] * (count - 2), high]
    fill(record, sweep_figures(record))
    fill(record, figures.derive(record))
    return record


def around(median: float, spread: float) -> Window:
    """A window of ``spread`` (max − min over the median) centred on ``median``."""
    return median * (1 - spread / 2), median, median * (1 + spread / 2)


def text(view: str, record: dict[str, Any]) -> str:
    return " ".join(VIEWS[view](record).paragraphs)


class FlatOrGrowing(unittest.TestCase):
    def test_steps_within_10_percent_with_cells_spread_4_percent_are_called_overhead_bound(self) -> None:
        record = timed({n: around(165, 0.04) for n in LENGTHS})
        self.assertIn("From 16 to 512 tokens a cached step stayed within 10% of 165 µs, each cell's min–max spread "
                      "under that, while the prefix it attends to grew 32-fold: that span is overhead-bound",
                      flat_sentence(record))
        self.assertTrue(step_item(record).startswith("Flat: a cached step took 165 µs at 16 tokens"))
        self.assertIn("overhead-bound (flat to 512 tokens)", text("takeaway-limits", record))

    def test_the_same_medians_with_cells_spread_30_percent_are_not_called_flat(self) -> None:
        record = timed({n: around(165, 0.30) for n in LENGTHS})
        sentence = flat_sentence(record)
        self.assertIn("From 16 to 512 tokens (32-fold) no two cached steps differ beyond 10% and both their min–max "
                      "ranges, whose 30% spreads are too wide to tell a 10% change: this run cannot say whether that "
                      "span is flat (overhead-bound) or still growing.", sentence)
        self.assertNotIn("stayed within", sentence)
        self.assertTrue(step_item(record).startswith("Flat or growing, this run cannot tell"))
        self.assertIn("this run's spread hides whether the cached step is overhead-bound", text("takeaway-limits", record))
        self.assertIn("whether its single step grows with the prefix, this run's spread cannot tell",
                      text("takeaway-result", record))

    def test_a_later_flat_span_of_narrow_cells_is_an_overhead_bound_span(self) -> None:
        record = timed({16: around(100, 0.04), 32: around(100, 0.04),
                        **{n: around(200, 0.04) for n in (64, 128, 256, 512)}})
        self.assertIn("From 64 to 512 tokens a cached step stayed within 10% of 200 µs", flat_sentence(record))
        self.assertIn("overhead-bound (flat from 64 to 512 tokens)", text("takeaway-limits", record))

    def test_steps_rising_beyond_their_cells_over_every_fourfold_span_show_no_overhead_bound_span(self) -> None:
        record = timed({n: around(n * 10, 0.04) for n in LENGTHS})
        self.assertIn("A cached step took 160 µs at 16 tokens and 5,120 µs at 512: it grew beyond its cells' min–max "
                      "ranges across every fourfold span of the prefix, so this record shows no overhead-bound span.",
                      flat_sentence(record))
        self.assertTrue(step_item(record).startswith("Growing with the prefix"))
        self.assertIn("the cached step grows with its prefix here", text("takeaway-limits", record))

    def test_a_fourfold_rise_inside_the_cells_ranges_is_not_called_growth(self) -> None:
        medians = dict(zip(LENGTHS, (100, 125, 150, 175, 200, 225)))  # 1.5x or more over every fourfold span
        record = timed({n: (m - 60, m, m + 60) for n, m in medians.items()})  # ranges 120 µs wide: they overlap
        sentence = flat_sentence(record)
        self.assertNotIn("no overhead-bound span", sentence)
        self.assertNotIn("grew", sentence)
        self.assertIn("this run cannot say whether", sentence)
        self.assertTrue(step_item(record).startswith("Flat or growing, this run cannot tell"))

    def test_the_committed_record_is_called_flat_or_growing_only_where_its_cells_show_it(self) -> None:
        record = copy.deepcopy(RECORD)
        sentence, cells = flat_sentence(record), figures.cells(record, "cached")
        if "shows no overhead-bound span" in sentence:  # grew across every fourfold span, beyond both ranges
            pairs = [(a, b) for a in cells for b in cells if b >= 4 * a]
            self.assertTrue(all(figures.moved(cells[a], cells[b]) == 1 for a, b in pairs), sentence)
        if "that span is overhead-bound" in sentence:  # within the band, each cell's spread under it
            start, until = map(int, re.match(r"From (\d+) to (\d+) tokens", sentence).groups())
            span = [n for n in cells if start <= n <= until]
            self.assertTrue(all(cells[n].spread < FLAT_BAND for n in span), sentence)
            self.assertTrue(all(abs(cells[n].median / cells[start].median - 1) <= FLAT_BAND for n in span))


class ReadOfThePrefix(unittest.TestCase):
    STEP = {16: around(100, 0.04), 32: around(100, 0.04), **{n: around(200, 0.04) for n in (64, 128, 256, 512)}}
    ADDED = 8_192  # bytes the toy cache grows by from 32 to 64 positions: 32 x 256
    AS_LONG = ADDED / 100e-6  # bytes/s at which those bytes take the 100 µs the step rose by

    def test_without_a_measured_bandwidth_the_committed_record_puts_no_rise_down_to_reading_the_prefix(self) -> None:
        sentence = read_sentence(copy.deepcopy(RECORD))
        self.assertNotIn("the read of the prefix shows", sentence)
        self.assertNotIn("is the read of the prefix", sentence)
        if "rose" in sentence:
            self.assertIn("this run measured no memory bandwidth, so the page does not put that rise", sentence)

    def test_a_rise_as_long_as_reading_the_added_bytes_at_the_measured_bandwidth_is_the_read(self) -> None:
        sentence = read_sentence(timed(self.STEP), bandwidth=self.AS_LONG)
        self.assertIn("Between 32 and 64 tokens the step rose beyond 10% and both cells' min–max ranges (100 → 200 µs)",
                      sentence)
        self.assertIn("reading the 8,192 bytes the cache grew by takes about 100.0 µs", sentence)
        self.assertIn("so that rise is the read of the prefix", sentence)

    def test_a_rise_far_longer_than_reading_the_added_bytes_is_not_the_read(self) -> None:
        sentence = read_sentence(timed(self.STEP), bandwidth=14e9)
        self.assertIn("reading the 8,192 bytes the cache grew by takes 0.6 µs at the 14.0 GB/s this run measured, not "
                      "100 µs, so the read of the prefix does not account for that rise", sentence)
        self.assertNotIn("is the read of the prefix", sentence)

    def test_a_rise_inside_the_cells_ranges_is_not_a_rise_whatever_the_bandwidth(self) -> None:
        noisy = {16: (40, 100, 160), 32: (40, 100, 160), **{n: (130, 200, 270) for n in (64, 128, 256, 512)}}
        sentence = read_sentence(timed(noisy), bandwidth=self.AS_LONG)
        self.assertEqual(sentence, "No two cached steps differ beyond 10% and both their min–max ranges: this run "
                                   "shows no rise to put down to the read of the prefix.")


class FullPath(unittest.TestCase):
    def test_the_full_step_is_said_to_grow_only_where_it_rose_beyond_its_cells_ranges(self) -> None:
        cached = {n: around(165, 0.04) for n in LENGTHS}
        growing = regime_view(timed(cached, {n: around(n * 10, 0.04) for n in LENGTHS})).paragraphs[-1]
        self.assertIn("The full path's step grew beyond its cells' min–max ranges across every fourfold span", growing)
        medians = dict(zip(LENGTHS, (100, 125, 150, 175, 200, 225)))
        noisy = regime_view(timed(cached, {n: (m - 60, m, m + 60) for n, m in medians.items()})).paragraphs[-1]
        self.assertIn("but its cells spread", noisy)
        self.assertIn("this run cannot say whether, or over which span, it grew", noisy)
        self.assertNotIn("work that scales", noisy)

    def test_a_full_step_that_rises_beyond_its_ranges_from_some_length_on_is_said_to_from_there(self) -> None:
        cached = {n: around(165, 0.04) for n in LENGTHS}
        wide = {16: (100, 200, 500), 32: (120, 210, 520)}  # reaching into 64's range: no change to tell
        tail = {64: around(400, 0.04), 128: around(800, 0.04), 256: around(1600, 0.04), 512: around(3200, 0.04)}
        sentence = regime_view(timed(cached, {**wide, **tail})).paragraphs[-1]
        self.assertIn("from 64 tokens on it grew beyond both cells' min–max ranges at every step of the sweep", sentence)
        self.assertIn("below that its cells' spreads hide any change", sentence)
        dip = {**tail, 256: around(700, 0.04)}  # falls back below 128's: no steady rise to the end
        broken = regime_view(timed(cached, {**wide, **dip})).paragraphs[-1]
        self.assertNotIn("at every step of the sweep", broken)


class LoopSpeed(unittest.TestCase):
    """The whole loops are called faster or slower at a length only where their raw repetitions' min–max ranges do
    not overlap there (kv_cache.figures.loop_order)."""

    def test_a_cached_loop_whose_range_lies_below_the_full_one_is_called_faster(self) -> None:
        record = timed({n: around(100, 0.04) for n in LENGTHS}, {n: around(150, 0.04) for n in LENGTHS})
        self.assertEqual(speed_item(record), "Speed: the whole cached loop ran 1.50× faster at 16 tokens and 1.50× "
                                             "faster at 512 tokens than recomputing the prefix at every step.")

    def test_a_cached_loop_whose_range_lies_above_the_full_one_is_called_slower(self) -> None:
        record = timed({n: around(150, 0.04) for n in LENGTHS}, {n: around(100, 0.04) for n in LENGTHS})
        self.assertIn("ran slower (0.67×) at 16 tokens and slower (0.67×) at 512 tokens", speed_item(record))
        self.assertIn("the cached loop's lead does not grow with the prefix here", text("takeaway-result", record))

    def test_loops_whose_ranges_overlap_at_16_tokens_are_not_ordered_there(self) -> None:
        full = {16: (60, 101, 170), **{n: around(n * 10, 0.04) for n in LENGTHS[1:]}}
        record = timed({16: (40, 100, 160), **{n: around(100, 0.04) for n in LENGTHS[1:]}}, full)
        sentence = speed_item(record)
        self.assertEqual(sentence, "Faster with length: the whole cached loop ran 51.20× faster at 512 tokens than "
                                   "recomputing the prefix at every step; at 16 tokens (1.01×) the two loops' min–max "
                                   "ranges overlap, so this run cannot tell them apart.")
        self.assertNotIn("faster at 16", sentence)
        self.assertIn("pulls ahead as the prefix grows (1.01× at 16 tokens, within both loops' ranges; 51.20× at 512)",
                      text("takeaway-result", record))

    def test_the_committed_record_orders_the_loops_only_where_their_ranges_part(self) -> None:
        record = copy.deepcopy(RECORD)
        sentence = speed_item(record)
        for entry in (record["lengths"][0], record["lengths"][-1]):
            cached, full = (entry["modes"][mode]["durations_ns"] for mode in ("cached", "full"))
            parted = max(cached) < min(full) or max(full) < min(cached)
            said = f"faster at {entry['length']} tokens" in sentence or f") at {entry['length']} tokens" in sentence
            self.assertEqual(said, parted, (entry["length"], sentence))


if __name__ == "__main__":
    unittest.main()
