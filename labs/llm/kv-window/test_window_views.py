"""The page's views: its pictures are drawn from the rules the caches run, and its wording follows the record
(every comparative word flips when the data do)."""

from __future__ import annotations

import copy
import sys
import unittest
from pathlib import Path

import torch

from kv_window.attention import visibility
from kv_window.packing import pack
from kv_window.rules import packed_positions, ring_slot, visible
from kv_window.slots import Slots
from labkit.testing import committed_record

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the views package sits beside the tests, as the site build finds it

from kv_window_views import VIEWS, headline  # noqa: E402
from kv_window_views.common import label  # noqa: E402
from kv_window_views.pictures import PACKED, RING, SINKS  # noqa: E402
from site_hooks.blocks import render_block  # noqa: E402

RECORD = HERE.parents[2] / "results" / "window-results.json"


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
        for verdict, words in (("above", "higher than"), ("below", "lower than"), ("level", "indistinguishable from")):
            record = copy.deepcopy(self.record)
            record["policies"][label(record, "window")]["against_full"]["verdict"] = verdict
            with self.subTest(verdict=verdict):
                self.assertIn(words, VIEWS["key-results"](record).items[0])
                self.assertIn(words, VIEWS["collapse"](record).paragraphs[0])

    def test_the_recomputation_verdict_follows_the_interval(self) -> None:
        for within, words in ((True, "inside"), (False, "outside")):
            record = copy.deepcopy(self.record)
            record["comparisons"]["sinks_within_recompute"] = within
            with self.subTest(within=within):
                self.assertIn(f"lies {words}", VIEWS["key-results"](record).items[1])
                self.assertIn(f"lies {words}", VIEWS["recompute"](record).paragraphs[0])

    def test_memory_and_step_words_follow_the_record(self) -> None:
        record = copy.deepcopy(self.record)
        for factor, words in ((2.0, "slower than"), (1.0, "about as fast as"), (0.5, "faster than")):
            record["memory"]["full_over_window_step"] = factor
            with self.subTest(factor=factor):
                self.assertIn(words, VIEWS["memory"](record).paragraphs[0])
        window = label(record, "window")
        record["policies"][window]["memory_grows"] = True
        self.assertIn("grows with the text", [row[2] for row in VIEWS["memory"](record).tables[0].rows][1])
        self.assertNotIn("however long", VIEWS["key-results"](record).items[2])

    def test_no_recovery_reads_as_none(self) -> None:
        record = copy.deepcopy(self.record)
        record["comparisons"]["recovered_share"] = None
        self.assertIn("no closer", VIEWS["key-results"](record).items[1])


if __name__ == "__main__":
    unittest.main()
