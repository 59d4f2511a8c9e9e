"""The benchmark's record: a quick run writes a schema-valid record the site accepts, and the site refuses a
hand-edited derived figure (by its JSON path, with both values) and a broken invariant."""

from __future__ import annotations

import copy
import math
import re
import unittest
from typing import Any

import numpy as np

import labkit.testing
from kv_quant import benchmark
from kv_quant.evaluation import TEXT, TRAINED_LABELS
from kv_quant.figures import admitted_requests, axis_of, check_invariants, derive, quality, trained_verdicts
from labkit import figures
from labkit.records import RecordError, path_text
from llm_models.cache_formats import CacheFormat, block_bytes, format_of
from llm_models.generations import first_departure


def check_record(record: dict[str, Any]) -> None:
    """The site's check of this lab's record: its invariants, then every derived figure."""
    figures.check_record(record, "quick.json", check_invariants, derive)


class QuickRun(labkit.testing.QuickBenchmarkRun):
    main = staticmethod(benchmark.main)
    schema = benchmark.ROOT / benchmark.LAB.schema

    def test_quick_run_measures_every_format_and_the_trained_ones_on_smollm2(self) -> None:
        record = self.record
        self.assertEqual(list(record["formats"]), [fmt.label for fmt in benchmark.FORMATS])
        self.assertEqual([label for label, entry in record["formats"].items() if "trained" in entry],
                         list(TRAINED_LABELS))
        self.assertEqual((record["trained"]["text"]["name"], record["trained"]["text"]["sha256"]),
                         (TEXT.name, TEXT.sha256))
        evaluated = record["trained"]["text"]["evaluated"]
        self.assertEqual(len(record["trained"]["positions"]["q4_0"]["nll"]), evaluated)
        self.assertTrue(record["config"]["quick"])
        check_record(record)

    def test_a_hand_edited_derived_figure_is_refused_by_its_path_with_both_values(self) -> None:
        record = self.record
        stored = record["formats"]["q4_0"]["bytes_per_token"]
        edited = copy.deepcopy(record)
        edited["formats"]["q4_0"]["bytes_per_token"] = stored / 2
        with self.assertRaisesRegex(RecordError, rf"\$\.formats\.q4_0\.bytes_per_token is {stored / 2:.12g}, "
                                                 rf"but .* gives {stored:.12g}"):
            check_record(edited)
        at = str(record["trained"]["contexts"][-1])
        for path, value in ((("formats", "q8_0", "trained", "departs_at"), 0),
                            (("formats", "q4_0", "trained", "quality", at, "kl", "high"), 1.0),
                            (("trained", "sides", "q4_0", "keys_are"), "neither"
                             if record["trained"]["sides"]["q4_0"]["keys_are"] != "neither" else "above"),
                            (("trained", "fp8_calibration", "uncalibrated_is"), "above"
                             if record["trained"]["fp8_calibration"]["uncalibrated_is"] != "above" else "below"),
                            (("trained", "kl_order"), list(reversed(record["trained"]["kl_order"]))),
                            (("formats", "int8", "fits_tokens"), 10**9),
                            (("formats", "q4_0", "smaller_than_float32"), 1.0),
                            (("formats", "q4_0", "fits_overpromise"), 0.0),
                            (("formats", "q4_0", "bytes", 0, "bytes_per_token"), 1.0),
                            (("attention_memory", "formats", "q4_0", "peak_over_cache"), 1.0),
                            (("error_chain_steps",), 0),
                            (("wall_time_met",), not record["wall_time_met"])):
            edited = copy.deepcopy(record)
            parent = edited
            for key in path[:-1]:
                parent = parent[key]
            if parent[path[-1]] == value:
                continue
            parent[path[-1]] = value
            with self.subTest(path=path), self.assertRaisesRegex(RecordError, re.escape(path_text(path))):
                check_record(edited)

    def test_stored_bytes_other_than_the_formula_are_refused_as_a_broken_invariant(self) -> None:
        edited = copy.deepcopy(self.record)
        edited["formats"]["kivi-2b-g32-r128"]["bytes"][-1]["stored_bytes"] += 1
        with self.assertRaisesRegex(RecordError, r"formats\.kivi-2b-g32-r128\.bytes\[1\]\.stored_bytes is \d+, but "
                                                 r"kivi-2b-g32-r128's formula at 160 tokens gives \d+"):
            check_record(edited)

    def test_a_float32_reference_that_is_not_exact_is_refused(self) -> None:
        edited = copy.deepcopy(self.record)
        edited["trained"]["positions"]["float32"]["kl"][0] = 1e-6
        with self.assertRaisesRegex(RecordError, r"trained\.positions\.float32\.kl must be 0"):
            check_record(edited)

    def test_a_record_of_another_text_or_of_missing_positions_is_refused(self) -> None:
        edited = copy.deepcopy(self.record)
        edited["trained"]["text"]["sha256"] = "0" * 64
        with self.assertRaisesRegex(RecordError, r"trained\.text\.sha256 is 0000000000000000…, but the lab evaluates"):
            check_record(edited)
        edited = copy.deepcopy(self.record)
        edited["trained"]["positions"]["q4_0"]["nll"].pop()
        with self.assertRaisesRegex(RecordError, r"trained\.positions\.q4_0\.nll holds \d+ values"):
            check_record(edited)


class Figures(unittest.TestCase):
    def test_labels_name_their_formats_and_anything_else_is_one_clear_error(self) -> None:
        for fmt in benchmark.FORMATS:
            self.assertEqual(format_of(fmt.label), fmt)
        with self.assertRaisesRegex(ValueError, "unknown cache format label 'int3'"):
            format_of("int3")
        with self.assertRaisesRegex(ValueError, "int4 group size 48 does not divide head_dim 64"):
            block_bytes(format_of("int4-g48"), 1, 16, 2, 64)

    def test_departure_is_the_first_differing_position_or_none(self) -> None:
        self.assertIsNone(first_departure([1, 2, 3], [1, 2, 3]))
        self.assertEqual(first_departure([1, 5, 3], [1, 2, 3]), 1)

    def test_a_group_inside_one_token_is_per_token_and_one_channel_over_tokens_is_per_channel(self) -> None:
        self.assertEqual(axis_of({"tokens": 1, "channels": 64, "heads": 1}), "per token")
        self.assertEqual(axis_of({"tokens": 64, "channels": 1, "heads": 3}), "per channel")
        self.assertEqual(axis_of({"tokens": 2, "channels": 2, "heads": 1}), "mixed")

    def test_a_budget_admits_requests_in_proportion_to_block_bytes(self) -> None:
        fp32, q8 = CacheFormat("float32"), CacheFormat("q8_0")
        self.assertEqual(block_bytes(fp32, 4, 16, 2, 64) * 17, block_bytes(q8, 4, 16, 2, 64) * 64)  # 8.5 bits
        budget = 64 * 17 * block_bytes(q8, 4, 16, 2, 64)
        self.assertEqual(admitted_requests(q8, budget, 4, 16, 2, 64, 16) * 17,
                         admitted_requests(fp32, budget, 4, 16, 2, 64, 16) * 64)


class PerplexityVerdicts(unittest.TestCase):
    """Whether perplexity "cannot be told from float32's" follows the paired interval, never a band edge."""

    POSITIONS = 512

    def verdicts(self, fp8_nll: list[float]) -> dict[str, Any]:
        nll = [round(float(x), 4) for x in np.random.default_rng(0).uniform(1.0, 4.0, self.POSITIONS)]
        same = {"nll": nll, "kl": [0.0] * self.POSITIONS, "top1_misses": []}
        positions = {label: copy.deepcopy(same) for label in TRAINED_LABELS}
        positions["fp8-tensor-none"] = {"nll": [a + b for a, b in zip(nll, fp8_nll)], "kl": [0.01] * self.POSITIONS,
                                        "top1_misses": list(range(0, self.POSITIONS, 10))}  # 90% agreement
        record = {"trained": {"contexts": [self.POSITIONS], "positions": positions}}
        qualities = {label: quality(record, label) for label in positions}
        return {"change": qualities["fp8-tensor-none"][str(self.POSITIONS)]["perplexity_change"],
                **trained_verdicts(record, qualities)}

    def test_a_perplexity_exactly_one_percent_higher_at_every_position_is_a_rise_not_a_tie(self) -> None:
        found = self.verdicts([math.log(1.01)] * self.POSITIONS)
        self.assertAlmostEqual(found["change"]["estimate"], 0.01, places=9)
        self.assertGreater(found["change"]["low"], 0)
        self.assertNotIn("fp8-tensor-none", found["perplexity_hides"])

    def test_errors_that_cancel_leave_a_perplexity_the_interval_cannot_tell_apart_and_it_is_flagged(self) -> None:
        noise = np.random.default_rng(1).normal(0.0, 0.05, self.POSITIONS)
        found = self.verdicts(list(noise - noise.mean()))  # some positions up, some down, the mean unchanged
        self.assertLess(found["change"]["low"], 0)
        self.assertGreater(found["change"]["high"], 0)
        self.assertEqual(found["perplexity_hides"], ["fp8-tensor-none"])


if __name__ == "__main__":
    unittest.main()
