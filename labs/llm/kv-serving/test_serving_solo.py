"""The served step of one request beside the decode lab's fastest trained step: set beside it only when both records
were measured in one run, matched by context and thread count, called faster or slower only where the two cells'
min–max ranges part, contexts the decode lab did not time left out, and a decode record with none of them said in
one sentence."""

from __future__ import annotations

import unittest
from typing import Any
from unittest import mock

from kv_serving.figures import formulas
from kv_serving_views import solo
from labkit.summary import MIN_PARTED
from site_hooks.blocks import render_block


def serving(steps: dict[int, tuple[float, float, float]], threads: int = 1) -> dict[str, Any]:
    """A serving record's parts the comparison reads: each context's (median, min, max) ns."""
    return {"created_utc": "2026-12-03T21:00:00Z", "run": RUN, "environment": CPU,
            "config": {"benchmark": {"threads": threads, "dtype_choice": {"chosen": "bfloat16"}}},
            "trained": {"model": {"dtype": "bfloat16"}, "decode_way": "torch", "solo_steps": [{"threads": threads, "context": c, "median_ns": m, "min_ns": lo, "max_ns": hi,
                                        "durations_ns": [lo, m, hi]} for c, (m, lo, hi) in steps.items()]}}


def decode(cells: dict[int, tuple[float, float, float]], threads: int = 1) -> dict[str, Any]:
    """A decode record's trained groups at ``threads``, each one's fastest float32 mode ours-fused."""
    return {"created_utc": "2026-12-03T20:00:00Z", "run": RUN, "environment": CPU,
            "llama": {"groups": [{"threads": threads, "context": c, "best_float32_mode": "ours-fused"} for c in cells],
                      "cells": [{"threads": threads, "context": c, "mode": "ours-fused", "median_ns_per_step": m,
                                 "min_ns_per_step": lo, "max_ns_per_step": hi, "durations_ns": [lo, m, hi]}
                                for c, (m, lo, hi) in cells.items()]}}


MS = 1e6
CPU = {"cpu": {"model": "A CPU", "logical_cores": 2}}
RUN = {"id": "20261203T195500Z-3fa9c1", "started_utc": "2026-12-03T19:55:00Z",
       "labs": ["decode-bandwidth", "kv-serving"], "reference": True}


class BesideDecode(unittest.TestCase):
    def test_each_context_both_timed_is_matched_and_parted_only_where_the_ranges_do_not_overlap(self) -> None:
        rows = formulas.beside_decode(
            serving({128: (55 * MS, 54 * MS, 56 * MS), 512: (50 * MS, 45 * MS, 60 * MS), 2048: (70 * MS, 69 * MS, 71 * MS)}),
            decode({128: (50 * MS, 49 * MS, 51 * MS), 512: (52 * MS, 51 * MS, 53 * MS)}))
        self.assertEqual([row.context for row in rows], [128, 512])  # 2048: the decode lab timed no such group
        self.assertAlmostEqual(rows[0].ratio, 1.1)
        self.assertTrue(rows[0].parted)
        self.assertFalse(rows[1].parted)  # 45-60 ms holds the decode lab's 51-53 ms
        self.assertEqual(formulas.growth_over_decode(rows), (-5 * MS, 2 * MS, -2.5))

    def test_another_thread_count_is_not_compared(self) -> None:
        self.assertEqual(formulas.beside_decode(serving({128: (1, 1, 1)}, threads=2), decode({128: (1, 1, 1)})), [])


class SoloView(unittest.TestCase):
    def text(self, served: dict[int, tuple[float, float, float]], fastest: dict[int, tuple[float, float, float]]) -> str:
        with mock.patch.object(solo, "reference_record", lambda name: decode(fastest)):
            return render_block(solo.solo_view(serving(served)))

    def test_a_slower_a_faster_and_an_overlapping_context_are_each_worded_by_their_ranges(self) -> None:
        text = self.text({128: (60 * MS, 59 * MS, 61 * MS), 512: (40 * MS, 39 * MS, 41 * MS), 1024: (50 * MS, 40 * MS, 60 * MS)},
                         {128: (50 * MS, 49 * MS, 51 * MS), 512: (50 * MS, 49 * MS, 51 * MS), 1024: (50 * MS, 49 * MS, 51 * MS)})
        rows = text.split("<tr>")[2:]
        self.assertIn("apart: served slower", rows[0])
        self.assertIn("apart: served faster", rows[1])
        self.assertIn("ranges overlap: neither faster", rows[2])  # 40-60 ms holds 49-51 ms
        self.assertNotIn("slower", rows[2] + rows[1])
        self.assertNotIn("faster", rows[0])
        self.assertIn("its record of 2026-12-03, measured in the same run", text)
        self.assertIn("At 1 thread, the served step at 128 and at 1,024 positions: ranges overlap, medians 10.00 ms apart; "
                      "the decode lab&#39;s fastest step at 128 and at 1,024 positions: ranges overlap, medians 0.00 ms "
                      "apart.", text)  # 40-60 ms holds 59-61 ms: neither more nor less

    def test_the_way_the_server_stepped_is_named_from_the_record(self) -> None:
        self.assertIn("by the decoder&#39;s layer in torch", self.text({128: (60 * MS, 59 * MS, 61 * MS)},
                                                                     {128: (50 * MS, 49 * MS, 51 * MS)}))
        record = serving({128: (60 * MS, 59 * MS, 61 * MS)})
        record["trained"]["decode_way"] = "one call"
        self.assertIn("by the decode lab's one-call step", solo.way_words(record))

    def test_a_decode_record_from_another_run_is_not_set_beside_even_on_the_same_cpu(self) -> None:
        for other_run in ({**RUN, "id": "20261201T080000Z-0b1c2d", "labs": ["decode-bandwidth"]}, None):
            other = decode({128: (50 * MS, 49 * MS, 51 * MS)})
            other.update(created_utc="2026-12-01T08:30:00Z", run=other_run)
            if other_run is None:  # a record made before runs were stored was measured in no shared run
                del other["run"]
            with mock.patch.object(solo, "reference_record", lambda name, other=other: other):
                text = render_block(solo.solo_view(serving({128: (60 * MS, 59 * MS, 61 * MS)})))
            self.assertIn("comes from a different run (A CPU, 2 logical cores, 2026-12-01; this one: A CPU, 2 logical "
                          "cores, 2026-12-03); a step time is set beside another only when both were measured in one "
                          "run.", text)
            self.assertNotIn("Served ÷ fastest", text)
            self.assertIn("60.00 ms (59.00–61.00)", text)

    def test_two_thread_counts_are_each_set_beside_their_own_and_their_growth_said_apart(self) -> None:
        one = serving({128: (60 * MS, 59 * MS, 61 * MS), 1024: (70 * MS, 69 * MS, 71 * MS)})
        two = serving({128: (40 * MS, 39 * MS, 41 * MS), 1024: (44 * MS, 43 * MS, 45 * MS)}, threads=2)
        one["trained"]["solo_steps"] += two["trained"]["solo_steps"]
        fastest = decode({128: (50 * MS, 49 * MS, 51 * MS), 1024: (55 * MS, 54 * MS, 56 * MS)})
        fastest2 = decode({128: (30 * MS, 29 * MS, 31 * MS), 1024: (31 * MS, 30 * MS, 32 * MS)}, threads=2)
        for key in ("groups", "cells"):
            fastest["llama"][key] += fastest2["llama"][key]
        rows = formulas.beside_decode(one, fastest)
        self.assertEqual([(row.threads, row.context, round(row.ratio, 3)) for row in rows],
                         [(1, 128, 1.2), (1, 1024, 1.273), (2, 128, 1.333), (2, 1024, 1.419)])
        with self.assertRaisesRegex(ValueError, "one thread count"):
            formulas.growth_over_decode(rows)
        with mock.patch.object(solo, "reference_record", lambda name: fastest):
            text = render_block(solo.solo_view(one))
        self.assertIn("At 1 thread, the served step took 10.00 ms more at 1,024 positions than at 128; the decode "
                      "lab&#39;s fastest step took 5.00 ms more at 1,024 positions than at 128.", text)
        self.assertIn("At 2 threads, the served step took 4.00 ms more at 1,024 positions than at 128; the decode "
                      "lab&#39;s fastest step at 128 and at 1,024 positions: ranges overlap, medians 1.00 ms apart.",
                      text)  # 29-31 ms against 30-32 ms

    def test_cells_of_too_few_steps_are_called_neither_slower_nor_faster(self) -> None:
        record = serving({128: (60 * MS, 59 * MS, 61 * MS)})
        record["trained"]["solo_steps"][0]["durations_ns"] = [59 * MS, 61 * MS]  # apart from 49-51 ms, but two steps
        with mock.patch.object(solo, "reference_record", lambda name: decode({128: (50 * MS, 49 * MS, 51 * MS)})):
            row = render_block(solo.solo_view(record)).split("<tr>")[2]
        self.assertIn(f"too few steps to tell (fewer than {MIN_PARTED} in a cell)", row)
        self.assertNotIn("slower", row)

    def test_a_decode_record_without_these_contexts_is_said_in_one_sentence(self) -> None:
        text = self.text({16: (1 * MS, 1 * MS, 1 * MS)}, {128: (50 * MS, 49 * MS, 51 * MS)})
        self.assertIn("times no trained step at contexts 16", text)


if __name__ == "__main__":
    unittest.main()


class AdmissionOrder(unittest.TestCase):
    """Admission by bytes is said to start requests sooner or later than a safe count only where the middle halves
    of the two runs' times to first token part."""

    @staticmethod
    def requests(ttfts: list[float]) -> dict[str, Any]:
        return {"requests": [{"outcome": "completed", "ttft_s": t} for t in ttfts]}

    def test_sooner_later_and_within_the_spread(self) -> None:
        early, late = self.requests([0.03, 0.04, 0.05, 0.06]), self.requests([0.10, 0.14, 0.16, 0.20])
        self.assertEqual(formulas.ttft_order(early, late), "sooner")
        self.assertEqual(formulas.ttft_order(late, early), "later")
        spread = self.requests([0.02, 0.05, 0.15, 0.30])
        self.assertIsNone(formulas.ttft_order(spread, late))


class PairedInTheDecodeLabsRounds(unittest.TestCase):
    """The served step as the decode lab's own rounds timed it: worded by the side of 1 its middle half lies on."""

    @staticmethod
    def paired(decode_record: dict[str, Any], ratios: dict[int, tuple[float, float, float, str]]) -> dict[str, Any]:
        for group in decode_record["llama"]["groups"]:
            median, low, high, side = ratios[group["context"]]
            group["paired"] = {"served_over_best": {"median": median, "low": low, "high": high, "rounds": 11}}
            group["sides"] = {"served_over_best": side}
        return decode_record

    def text(self, dtype: str, fastest: dict[str, Any]) -> str:
        record = serving({128: (60 * MS, 59 * MS, 61 * MS), 512: (60 * MS, 59 * MS, 61 * MS),
                          1024: (60 * MS, 59 * MS, 61 * MS)})
        record["trained"]["model"]["dtype"] = dtype  # the trained model's, whatever the random model's probe chose
        with mock.patch.object(solo, "reference_record", lambda name: fastest):
            return render_block(solo.solo_view(record))

    def test_slower_faster_and_within_follow_the_side_never_the_cross_run_ranges(self) -> None:
        cells = {c: (50 * MS, 49 * MS, 51 * MS) for c in (128, 512, 1024)}
        fastest = self.paired(decode(cells), {128: (1.08, 1.05, 1.12, "above"), 512: (0.93, 0.9, 0.96, "below"),
                                              1024: (1.01, 0.97, 1.04, "within")})
        rows = self.text("float32", fastest).split("<tr>")[2:]
        self.assertIn("1.08× (1.05–1.12), slower in its rounds", rows[0])
        self.assertIn("0.93× (0.90–0.96), faster in its rounds", rows[1])
        self.assertIn("1.01× (0.97–1.04), within its rounds&#39; noise", rows[2])
        self.assertIn("apart: served slower", rows[1])  # the cross-run cells say slower where the rounds say faster
        self.assertIn("Paired in the decode lab", self.text("float32", fastest))  # the probe's bfloat16 aside

    def test_no_paired_column_for_a_bfloat16_server_or_a_decode_record_without_the_measurement(self) -> None:
        cells = {c: (50 * MS, 49 * MS, 51 * MS) for c in (128, 512, 1024)}
        fastest = self.paired(decode(cells), {c: (1.0, 0.9, 1.1, "within") for c in cells})
        self.assertNotIn("Paired in the decode lab", self.text("bfloat16", fastest))  # it timed float32 only
        self.assertNotIn("Paired in the decode lab", self.text("float32", decode(cells)))
