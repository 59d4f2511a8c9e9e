"""The page's views: its pictures are drawn from the rules the caches run, and its wording follows the record
(every comparative word flips when the data do, and a comparison too coarse to tell says so)."""

from __future__ import annotations

import copy
import re
import sys
import unittest
from pathlib import Path

import torch

from kv_window.attention import visibility
from kv_window.figures import derive, resolution, steps_apart
from kv_window.packing import pack
from kv_window.rules import packed_positions, ring_slot, visible
from kv_window.slots import Slots
from labkit.figures import fill
from labkit.testing import committed_record

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the views package sits beside the tests, as the site build finds it

from kv_window_views import VIEWS, headline  # noqa: E402
from kv_window_views.common import label  # noqa: E402
from kv_window_views.pictures import PACKED, RING, SINKS  # noqa: E402
from site_hooks.blocks import render_block  # noqa: E402

RECORD = HERE.parents[2] / "results" / "window-results.json"


def rederived(record: dict) -> dict:
    """The record with every figure derived again from its (edited) raw data, as the build reads it."""
    fill(record, derive(record))
    return record


def near_recompute(record: dict, name: str, deltas: list[float]) -> dict:
    """A copy where policy ``name``'s NLL at each of recomputation's samples is recomputation's plus the next
    of ``deltas`` (nats, repeated over the samples), re-derived."""
    record = copy.deepcopy(record)
    entry = record["policies"][label(record, name)]
    recompute = record["recompute"]
    for index, (position, nll) in enumerate(zip(recompute["positions"], recompute["nll"])):
        entry["nll"][position] = nll + deltas[index % len(deltas)]
    return rederived(record)


def timed(record: dict, steps: dict[str, list[int]]) -> dict:
    """A copy whose policies (by name) took these decode steps (ns), re-derived."""
    record = copy.deepcopy(record)
    for name, durations in steps.items():
        record["policies"][label(record, name)]["step_ns"] = durations
    return rederived(record)


def near_full(record: dict, name: str, deltas: list[float]) -> dict:
    """A copy where policy ``name``'s NLL from the first eviction on is the full cache's plus the next of
    ``deltas`` (nats, repeated), re-derived."""
    record = copy.deepcopy(record)
    entry, full = record["policies"][label(record, name)], record["policies"][label(record, "full")]
    for index, position in enumerate(range(record["config"]["slots"], len(entry["nll"]))):
        entry["nll"][position] = full["nll"][position] + deltas[index % len(deltas)]
    return rederived(record)


def near_read(record: dict, rule: str, deltas: list[float]) -> dict:
    """A copy where the rule run ``rule``'s NLL from the first eviction to the end of the comparison is the float32
    read rule's plus the next of ``deltas`` (nats, repeated), re-derived."""
    record = copy.deepcopy(record)
    entry, read = record["rules"][rule], record["policies"][label(record, "sinks")]
    config = record["config"]
    for index, position in enumerate(range(config["slots"], config["rule_positions"])):
        entry["nll"][position] = read["nll"][position] + deltas[index % len(deltas)]
    return rederived(record)


SWINGS = [3.0] * 64 + [-3.0] * 64  # runs longer than a bootstrap block: a mean of 0 with a wide interval
MS = 1_000_000


class Pictures(unittest.TestCase):
    def test_the_sinks_picture_is_the_mask_the_caches_build(self) -> None:
        count = SINKS["positions"]
        positions = torch.arange(count)[None]
        slots = Slots.of(torch.zeros(1, 1, count, 2), torch.zeros(1, 1, count, 2), positions, positions * 0)
        mask = visibility(slots, positions, positions * 0, window=SINKS["window"], sinks=SINKS["sinks"])[0, 0]
        drawn = [[visible(q, k, window=SINKS["window"], sinks=SINKS["sinks"]) for k in range(count)]
                 for q in range(count)]
        self.assertEqual(mask.tolist(), drawn)

    def test_the_packed_picture_restarts_positions_as_pack_does(self) -> None:
        prompts = [[1] * length for length in PACKED]
        _, positions, sequences = pack(prompts)
        self.assertEqual(positions[0].tolist(), packed_positions(PACKED))
        slots = Slots.of(torch.zeros(1, 1, sum(PACKED), 2), torch.zeros(1, 1, sum(PACKED), 2), positions, sequences)
        mask = visibility(slots, positions, sequences)[0, 0]
        self.assertEqual(int(mask.sum()), sum(n * (n + 1) // 2 for n in PACKED))  # one triangle per prompt

    def test_the_ring_picture_puts_positions_where_the_ring_writes_them(self) -> None:
        window = RING["window"]
        self.assertEqual(sorted(ring_slot(p, window) for p in range(8, 8 + window)), list(range(window)))


class Wording(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.record = committed_record(__file__)

    def test_every_view_renders_from_the_record(self) -> None:
        for name, view in VIEWS.items():
            with self.subTest(view=name):
                self.assertTrue(render_block(view(self.record)))
        self.assertEqual(len(headline(self.record)), 2)

    def test_the_collapse_verdict_follows_the_interval(self) -> None:
        for verdict, words in (("above", "higher than"), ("below", "lower than")):
            record = copy.deepcopy(self.record)
            record["policies"][label(record, "window")]["against_full"]["verdict"] = verdict
            with self.subTest(verdict=verdict):
                self.assertIn(words, VIEWS["key-results"](record).items[0])
                self.assertIn(words, VIEWS["collapse"](record).paragraphs[0])

    def test_sinks_inside_the_gap_band_read_as_within_recomputation(self) -> None:
        record = near_recompute(self.record, "sinks", [0.02, -0.02])
        self.assertIn("it is within 0.99–1.01× of recomputing", VIEWS["key-results"](record).items[1])
        # a ratio at the samples is not set against the full cache's gap, measured over every position
        self.assertNotIn("closer than", VIEWS["key-results"](record).items[1])
        rows = {row[0]: row[3] for row in VIEWS["recompute"](record).tables[0].rows}
        self.assertTrue(rows["sinks + window"].startswith("within "), rows["sinks + window"])

    def test_sinks_above_recomputation_read_as_higher(self) -> None:
        record = near_recompute(self.record, "sinks", [0.5])
        self.assertIn("it is higher than recomputing each window from scratch (1.65×",
                      VIEWS["key-results"](record).items[1])
        rows = {row[0]: row[3] for row in VIEWS["recompute"](record).tables[0].rows}
        self.assertEqual(rows["sinks + window"], "higher than recomputation")

    def test_a_noisy_sinks_comparison_reads_as_too_coarse_never_as_within(self) -> None:
        record = near_recompute(self.record, "sinks", [1.0, -1.0])
        item = VIEWS["key-results"](record).items[1]
        self.assertRegex(item, r"too coarse to tell: the interval is 0\.\d\d–1\.\d\d×, \d\.\d times as wide as the "
                               r"0\.\d\d–1\.\d\d× it would need to resolve the 1\.\d\d× (that separates|gap of)")
        self.assertNotIn("within", item)
        self.assertNotIn("indistinguishable", item)

    def test_a_window_only_interval_wider_than_the_gap_band_reads_as_too_coarse(self) -> None:
        record = near_recompute(self.record, "window", [1.0, -1.0])
        block = VIEWS["recompute"](record)
        rows = {row[0]: row[3] for row in block.tables[0].rows}
        self.assertRegex(rows["window only"], r"^too coarse: \d\.\d× the band$")
        self.assertNotIn("indistinguishable", render_block(block))

    def test_the_full_cache_slower_at_every_step_reads_as_slower(self) -> None:
        record = timed(self.record, {"full": [190 * MS, 200 * MS, 210 * MS], "window": [90 * MS, 100 * MS, 110 * MS]})
        self.assertIn("step is slower than the ring buffer's (2.00×), at every timed step",
                      VIEWS["memory"](record).paragraphs[0])

    def test_the_full_cache_faster_at_every_step_reads_as_faster(self) -> None:
        record = timed(self.record, {"full": [90 * MS, 100 * MS, 110 * MS], "window": [190 * MS, 200 * MS, 210 * MS]})
        self.assertIn("step is faster than the ring buffer's (0.50×)", VIEWS["memory"](record).paragraphs[0])

    def test_overlapping_full_and_ring_steps_read_as_unordered(self) -> None:
        record = timed(self.record, {"full": [100 * MS, 200 * MS, 300 * MS], "window": [150 * MS, 160 * MS, 250 * MS]})
        first = VIEWS["memory"](record).paragraphs[0].split(";")[0]
        self.assertIn("(100.0–300.0 ms) and the ring buffer's (150.0–250.0 ms) do not separate: the run cannot tell",
                      first)
        self.assertNotIn("is slower than", first)
        self.assertNotIn("is faster than", first)

    def test_single_full_and_ring_steps_are_not_ordered(self) -> None:
        record = timed(self.record, {"full": [300 * MS], "window": [100 * MS]})
        first = VIEWS["memory"](record).paragraphs[0].split(";")[0]
        self.assertIn("timed steps (300.0 ms) and the ring buffer's (100.0 ms) do not separate", first)
        self.assertNotIn("is slower than", first)

    def test_same_bytes_but_apart_steps_say_the_run_does_not_explain_them(self) -> None:
        record = timed(self.record, {"window": [100 * MS, 110 * MS, 120 * MS], "sinks": [180 * MS, 190 * MS, 200 * MS],
                                     "snapkv": [130 * MS, 140 * MS, 150 * MS]})
        paragraph = VIEWS["memory"](record).paragraphs[0]
        self.assertIn("Window only and sinks + window keep the same 12 MB in 256 slots each, yet sinks + window is "
                      "slower at every timed step (180.0–200.0 ms against 100.0–120.0 ms): the bytes do not decide a "
                      "step here, and the run, timing whole steps only, does not say what does.", paragraph)

    def test_same_bytes_with_the_ring_slowest_names_the_ring_as_slower(self) -> None:
        record = timed(self.record, {"window": [300 * MS, 310 * MS, 320 * MS], "sinks": [100 * MS, 110 * MS, 120 * MS],
                                     "snapkv": [150 * MS, 160 * MS, 170 * MS]})
        self.assertIn("Sinks + window and window only keep the same 12 MB in 256 slots each, yet window only is slower",
                      VIEWS["memory"](record).paragraphs[0])

    def test_same_bytes_with_overlapping_steps_read_as_unordered(self) -> None:
        record = timed(self.record, {"window": [100 * MS, 150 * MS, 200 * MS], "sinks": [110 * MS, 160 * MS, 210 * MS],
                                     "snapkv": [105 * MS, 155 * MS, 205 * MS]})
        paragraph = VIEWS["memory"](record).paragraphs[0]
        self.assertIn("and their timed steps do not separate (110.0–210.0 ms against 100.0–200.0 ms): the run "
                      "cannot order them.", paragraph)
        self.assertNotIn("do not decide", paragraph)

    def test_memory_that_grows_is_not_called_flat(self) -> None:
        record = copy.deepcopy(self.record)
        record["policies"][label(record, "window")]["memory_grows"] = True
        self.assertIn("grows with the text", [row[2] for row in VIEWS["memory"](record).tables[0].rows][1])
        self.assertNotIn("however long", VIEWS["key-results"](record).items[2])

    def test_the_page_names_the_texts_chapters_as_the_record_does(self) -> None:
        page = " ".join((HERE.parents[2] / "docs" / "llm" / "kv-window.md").read_text().split())
        chapters = re.search(r"chapters [^(]*\([^)]*\)", self.record["text"]["source"]).group(0)
        self.assertEqual(page.count("chapter"), page.count(chapters), chapters)

    def test_no_recovery_reads_as_none(self) -> None:
        record = copy.deepcopy(self.record)
        record["comparisons"]["recovered_share"] = None
        self.assertIn("no closer", VIEWS["key-results"](record).items[1])


class Closest(unittest.TestCase):
    """A bounded cache is named closest to the full cache only where its interval parts from the next one's."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.record = committed_record(__file__)

    def paragraph(self, record: dict) -> str:
        return VIEWS["recompute"](record).paragraphs[0]

    def test_a_bounded_cache_whose_interval_parts_from_the_next_is_named_the_closest(self) -> None:
        paragraph = self.paragraph(near_full(self.record, "snapkv", [0.01, -0.01]))
        self.assertIn("SnapKV eviction is the bounded cache closest to the full cache, 1.00× (", paragraph)
        self.assertIn("apart from the next, sinks + window, at 1.", paragraph)

    def test_two_bounded_caches_whose_intervals_overlap_are_not_ordered(self) -> None:
        record = copy.deepcopy(self.record)
        snap, sinks = (record["policies"][label(record, name)] for name in ("snapkv", "sinks"))
        for position in range(record["config"]["slots"], len(snap["nll"])):
            snap["nll"][position] = sinks["nll"][position] + (0.002 if position % 2 else -0.002)
        paragraph = self.paragraph(rederived(record))
        self.assertIn("are the bounded caches closest to the full cache, and this record cannot tell which is the "
                      "closer: their intervals overlap", paragraph)
        self.assertNotIn("is the bounded cache closest", paragraph)

    def test_the_nearest_estimate_with_a_wide_interval_is_not_named_the_closest(self) -> None:
        record = near_full(self.record, "snapkv", SWINGS)
        paragraph = self.paragraph(record)
        self.assertIn("this record cannot tell which is the closer", paragraph)
        self.assertNotIn("is the bounded cache closest", paragraph)
        self.assertNotIn("separates SnapKV eviction", render_block(VIEWS["key-results"](record)))

    def test_the_committed_record_names_a_closest_cache_only_where_the_two_nearest_intervals_part(self) -> None:
        bounded = {name: self.record["policies"][label(self.record, name)]["against_full"]["perplexity_ratio"]
                   for name in ("window", "sinks", "snapkv")}
        near, next_ = sorted(bounded.values(), key=lambda found: abs(found["estimate"] - 1))[:2]
        parted = max(abs(near["low"] - 1), abs(near["high"] - 1)) < min(abs(next_["low"] - 1), abs(next_["high"] - 1))
        self.assertEqual("is the bounded cache closest" in self.paragraph(self.record), parted)


class LevelVerdicts(unittest.TestCase):
    """'Indistinguishable' only where the interval resolves the page's yardstick; a wider one is too coarse."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.record = committed_record(__file__)
        cls.rule = next(name for name in cls.record["rules"] if "rerotate-float32" in name)

    def rules_cell(self, record: dict) -> str:
        rows = VIEWS["rules"](record).tables[0].rows
        return next(row[5] for row in rows if row[0] == "keep rotated, re-rotate on shift" and row[1] == "float32")

    def test_window_within_a_narrow_interval_of_the_full_cache_reads_as_indistinguishable(self) -> None:
        record = near_full(self.record, "window", [0.01, -0.01])
        self.assertIn("indistinguishable from the full cache's", VIEWS["key-results"](record).items[0])
        self.assertIn("window-only's perplexity is indistinguishable from the full cache's",
                      VIEWS["collapse"](record).paragraphs[0])

    def test_window_above_the_full_cache_reads_as_higher(self) -> None:
        record = near_full(self.record, "window", [0.5])
        self.assertIn("higher than the full cache's", VIEWS["key-results"](record).items[0])
        self.assertIn("window-only's perplexity is higher than the full cache's", VIEWS["collapse"](record).paragraphs[0])

    def test_window_level_with_the_full_cache_but_a_wide_interval_reads_as_too_coarse(self) -> None:
        record = near_full(self.record, "window", SWINGS)
        item, paragraph = VIEWS["key-results"](record).items[0], VIEWS["collapse"](record).paragraphs[0]
        self.assertRegex(item, r"measured too coarse to tell from the full cache's .*; the interval is \d\.\d times as "
                               r"wide as the band of the closest other bounded cache's gap\)\.$")
        self.assertIn("window-only's perplexity is measured too coarse to tell from the full cache's", paragraph)
        self.assertIn("times as wide as the band of the closest other bounded cache's gap", paragraph)
        for text in (item, paragraph):
            self.assertNotIn("indistinguishable", text)

    def test_a_rule_within_a_narrow_interval_of_the_read_rule_reads_as_indistinguishable(self) -> None:
        self.assertEqual(self.rules_cell(near_read(self.record, self.rule, [0.001, -0.001])),
                         "indistinguishable from the reference")

    def test_a_rule_above_the_read_rule_reads_as_higher(self) -> None:
        self.assertEqual(self.rules_cell(near_read(self.record, self.rule, [0.5])), "higher than the reference")

    def test_a_rule_level_with_the_read_rule_but_a_wide_interval_reads_as_too_coarse(self) -> None:
        cell = self.rules_cell(near_read(self.record, self.rule, SWINGS))
        self.assertRegex(cell, r"^too coarse: \d+\.\d× the band$")


class Resolution(unittest.TestCase):
    def test_an_interval_inside_the_gap_resolves_it(self) -> None:
        found = resolution({"estimate": 0.02, "low": -0.04, "high": 0.09}, 0.14)
        self.assertTrue(found["resolves"])
        self.assertAlmostEqual(found["width_over_band"], 0.13 / 0.28)

    def test_an_interval_reaching_past_the_gap_does_not_resolve_it(self) -> None:
        found = resolution({"estimate": 0.36, "low": -0.07, "high": 0.82}, 0.14)
        self.assertFalse(found["resolves"])
        self.assertAlmostEqual(found["width_over_band"], 0.89 / 0.28)

    def test_an_interval_narrower_than_the_band_but_off_centre_does_not_resolve_it(self) -> None:
        self.assertFalse(resolution({"estimate": 0.12, "low": 0.08, "high": 0.16}, 0.14)["resolves"])

    def test_no_interval_resolves_a_gap_of_zero(self) -> None:
        self.assertEqual(resolution({"estimate": 0.0, "low": -0.001, "high": 0.001}, 0.0),
                         {"resolves": False, "width_over_band": None})

    def test_steps_are_ordered_only_when_their_spreads_do_not_overlap(self) -> None:
        self.assertEqual(steps_apart([200, 210], [100, 110]), "above")
        self.assertEqual(steps_apart([100, 110], [200, 210]), "below")
        self.assertEqual(steps_apart([100, 300], [150, 250]), "level")
        self.assertEqual(steps_apart([110, 200], [100, 110]), "level")  # a shared step is an overlap
        self.assertEqual(steps_apart([300], [100]), "level")  # one step each shows no spread to judge against


if __name__ == "__main__":
    unittest.main()
