"""The page's views: its diagrams are drawn from the functions the caches run, and its wording follows the
record (a verdict that depends on the data changes when the data do)."""

from __future__ import annotations

import copy
import re
import sys
import unittest
from pathlib import Path

import torch

from kv_quant.cache import make_cache
from kv_quant.codecs import encode_q4_0
from kv_quant.figures import TOP1_BAND, derive, effective_bits, hides_damage
from labkit.figures import fill
from labkit.testing import committed_record
from llm_models.cache_formats import (
    GGML_BLOCK,
    CacheFormat,
    format_of,
    kivi_residual_range,
    kivi_split,
    per_token_head_bytes,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the views package sits beside the tests, as the site build finds it

from kv_quant_views import VIEWS, headline  # noqa: E402
from kv_quant_views.common import bits, hiding_rule  # noqa: E402
from kv_quant_views.pictures import CHANNELS, PICTURE, TOKENS  # noqa: E402
from site_hooks.blocks import render_block  # noqa: E402

RECORD = HERE.parents[2] / "results" / "quant-results.json"
KIVI = "kivi-2b-g32-r128"


def rederived(record: dict) -> dict:
    """The record with every figure derived again from its (edited) raw data, as the build reads it."""
    fill(record, derive(record))
    return record


def interval(estimate: float, low: float, high: float) -> dict[str, float]:
    return {"estimate": estimate, "low": low, "high": high}


class Pictures(unittest.TestCase):
    def test_the_kivi_picture_splits_its_tokens_as_the_kivi_cache_does_one_token_at_a_time(self) -> None:
        cache = make_cache(PICTURE, 1, 1, CHANNELS)
        generator = torch.Generator().manual_seed(0)
        for _ in range(TOKENS):
            entry = torch.randn(1, 1, 1, CHANNELS, generator=generator)
            cache.append(entry, entry)
        quantized, residual = kivi_split(PICTURE, TOKENS)
        self.assertEqual((cache.quantized_length, cache.residual_keys.shape[2]), (quantized, residual))
        self.assertGreater(quantized, 0)
        self.assertGreaterEqual(residual, PICTURE.residual)

    def test_the_q4_block_picture_prices_a_block_as_the_encoder_stores_it(self) -> None:
        fields = encode_q4_0(torch.randn(1, 1, 1, GGML_BLOCK))
        stored = sum(t.numel() * t.element_size() for t in fields.values())
        self.assertEqual(per_token_head_bytes(CacheFormat("q4_0"), GGML_BLOCK) / 2, stored)  # keys or values alone


class Wording(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.record = committed_record(__file__)

    def test_every_view_renders_from_the_record(self) -> None:
        for name, view in VIEWS.items():
            with self.subTest(view=name):
                self.assertTrue(render_block(view(self.record)))
        self.assertEqual(len(headline(self.record)), 2)

    def test_without_hidden_damage_the_answer_the_table_and_the_takeaway_say_so(self) -> None:
        record = copy.deepcopy(self.record)
        record["trained"]["perplexity_hides"] = []
        self.assertIn("It did not, in this record", VIEWS["answer-perplexity"](record).paragraphs[0])
        self.assertIn("No format here kept a perplexity indistinguishable", VIEWS["hidden"](record).paragraphs[0])
        self.assertIn("perplexity happened to tell the same story", VIEWS["takeaway-quality"](record).paragraphs[0])
        record["trained"]["perplexity_hides"] = ["q8_0"]
        self.assertIn("here q8_0 kept a perplexity indistinguishable", VIEWS["takeaway-quality"](record).paragraphs[0])

    def test_the_fp8_verdict_follows_the_side_of_zero_of_the_paired_difference(self) -> None:
        record = copy.deepcopy(self.record)
        for side, words in (("above", "worse than"), ("below", "better than"), ("neither", "indistinguishable from")):
            record["trained"]["fp8_calibration"]["uncalibrated_is"] = side
            with self.subTest(side=side):
                self.assertIn(f"the uncalibrated cache is {words} the amax-calibrated one",
                              VIEWS["fp8"](record).paragraphs[0])
        self.assertIn("made no difference the record can see", VIEWS["takeaway-fp8"](record).paragraphs[0])

    def test_the_fp8_range_words_follow_whether_any_entry_exceeds_a_variants_maximum(self) -> None:
        record = copy.deepcopy(self.record)
        record["trained"]["fp8_scale_needed"] = {variant: False for variant in record["trained"]["fp8_scale_needed"]}
        self.assertIn("a scale of 1.0 saturates nothing", VIEWS["fp8"](record).paragraphs[0])
        self.assertIn("stay inside every variant's range", VIEWS["takeaway-fp8"](record).paragraphs[0])
        record["trained"]["fp8_scale_needed"] = {variant: True for variant in record["trained"]["fp8_scale_needed"]}
        self.assertIn("a scale of 1.0 saturates some entries", VIEWS["fp8"](record).paragraphs[0])
        self.assertIn("exceed at least one variant's range", VIEWS["takeaway-fp8"](record).paragraphs[0])

    def test_which_side_hurts_follows_the_side_of_zero_of_keys_less_values(self) -> None:
        record = copy.deepcopy(self.record)
        for side, words in (("above", "its keys do more of the damage"), ("below", "its values do more of the damage"),
                            ("neither", "cannot tell which side does more damage")):
            record["trained"]["sides"]["q4_0"]["keys_are"] = side
            with self.subTest(side=side):
                self.assertIn(words, " ".join(VIEWS["sides"](record).paragraphs))
                items = " ".join(VIEWS["key-results"](record).items)
                self.assertIn({"above": "Split apart, q4_0's keys do more of the damage",
                               "below": "Split apart, q4_0's values do more of the damage",
                               "neither": "Split apart, this record cannot tell whether q4_0's keys"}[side], items)

    def test_a_perplexity_is_said_to_move_only_where_its_interval_leaves_zero(self) -> None:
        from kv_quant_views.common import moved
        self.assertEqual(moved({"estimate": 0.01, "low": 0.002, "high": 0.02}), "rose")
        self.assertEqual(moved({"estimate": -0.01, "low": -0.02, "high": -0.001}), "fell")
        self.assertEqual(moved({"estimate": 0.01, "low": -0.001, "high": 0.02}), "cannot be told apart from float32's")

    def test_the_chain_and_cost_takeaways_follow_the_record(self) -> None:
        record = copy.deepcopy(self.record)
        for entry in record["formats"].values():
            entry["error_chain"]["logits"] = 0.0
        self.assertIn("every format's element error was attenuated", VIEWS["takeaway-chain"](record).paragraphs[0])
        record["formats"]["q4_0"]["error_chain"]["logits"] = 1e9
        self.assertIn("not for all", VIEWS["takeaway-chain"](record).paragraphs[0])
        for row in record["attention_memory"]["formats"].values():
            row["peak_ratio"] = 0.9
        self.assertIn("saved no peak memory here", VIEWS["takeaway-cost"](record).paragraphs[0])
        self.assertTrue(any("peaked no higher than block-by-block" in item for item in VIEWS["key-results"](record).items))


class Claims(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.record = committed_record(__file__)

    def test_the_time_table_times_dequantizing_apart_and_gives_no_share_of_the_step(self) -> None:
        record = copy.deepcopy(self.record)
        timing = record["formats"]["q8_0"]["trained"]["timing"]
        timing["dequantize_ns"] = [2 * step for step in timing["step_ns"]]  # longer than the step it is set beside
        for case in (self.record, rederived(record)):
            block = VIEWS["timing"](case)
            said = render_block(block) + render_block(VIEWS["takeaway-cost"](case))
            self.assertIn("timed apart: not a part of the step's time", block.tables[0].lead)
            self.assertEqual([len(row) for row in block.tables[0].rows], [3] * len(block.tables[0].rows))
            for claim in ("of which", "share", "%", "of its decode step"):
                self.assertNotIn(claim, said)

    def test_perplexity_hides_damage_only_where_the_whole_top1_interval_lies_below_the_band(self) -> None:
        level = interval(0.0, -0.001, 0.001)
        below = 1 - 2 * (1 - TOP1_BAND)  # twice the band's misses
        self.assertEqual(hides_damage({"perplexity_change": level,
                                       "top1_agreement": interval(below, below - 0.003, TOP1_BAND - 0.001)}), "hides")
        self.assertEqual(hides_damage({"perplexity_change": level,  # below the band by estimate, not its interval
                                       "top1_agreement": interval(TOP1_BAND - 0.001, below, TOP1_BAND + 0.002)}),
                         "undecided")
        self.assertIsNone(hides_damage({"perplexity_change": interval(0.02, 0.01, 0.03),
                                        "top1_agreement": interval(below, below - 0.003, below + 0.003)}))
        self.assertIsNone(hides_damage({"perplexity_change": level,
                                        "top1_agreement": interval(TOP1_BAND + 0.001, below, 1.0)}))

    def test_the_collapsed_answer_words_hidden_damage_by_the_main_texts_whole_interval_rule(self) -> None:
        record = copy.deepcopy(self.record)
        record["trained"]["perplexity_hides"], record["trained"]["perplexity_hides_undecided"] = [], ["q8_0"]
        answer = VIEWS["answer-perplexity"](record).paragraphs[0]
        self.assertIn(f"no format kept {hiding_rule()}", answer)
        self.assertIn("q8_0 comes near", answer)
        self.assertIn(f"an interval that reaches below {1 - TOP1_BAND:.0%}", answer)
        self.assertIn(f"No format here kept {hiding_rule()}", VIEWS["hidden"](record).paragraphs[0])
        record["trained"]["perplexity_hides_undecided"] = []
        self.assertNotIn("comes near", VIEWS["answer-perplexity"](record).paragraphs[0])
        record["trained"]["perplexity_hides"] = ["q8_0"]
        self.assertIn("q8_0's perplexity", VIEWS["answer-perplexity"](record).paragraphs[0])
        self.assertIn(f"q8_0: {hiding_rule()}", VIEWS["hidden"](record).tables[0].lead)
        self.assertIn(f"here q8_0 kept {hiding_rule()}", VIEWS["takeaway-quality"](record).paragraphs[0])

    def test_the_committed_record_says_perplexity_hides_damage_only_by_the_whole_interval(self) -> None:
        trained = self.record["trained"]
        at = str(trained["contexts"][-1])
        for label, entry in self.record["formats"].items():
            if "trained" not in entry or label == "float32":
                continue
            found = entry["trained"]["quality"][at]
            change, top1 = found["perplexity_change"], found["top1_agreement"]
            level = change["low"] <= 0 <= change["high"]
            with self.subTest(format=label):
                self.assertEqual(label in trained["perplexity_hides"], level and top1["high"] < TOP1_BAND)
                self.assertEqual(label in trained["perplexity_hides_undecided"],
                                 level and top1["estimate"] < TOP1_BAND <= top1["high"])

    def test_the_quality_table_gives_each_format_its_bits_at_the_evaluated_length(self) -> None:
        short = copy.deepcopy(self.record)
        short["trained"]["text"]["evaluated"] = format_of(KIVI).residual  # all of it inside KIVI's exact residual
        for record in (self.record, rederived(short)):
            evaluated, layer = record["trained"]["text"]["evaluated"], record["config"]["layer"]
            table = VIEWS["trained"](record).tables[0]
            self.assertEqual(table.headings[1], f"bits at {evaluated:,} positions")
            for row in table.rows:
                with self.subTest(format=row[0], evaluated=evaluated):
                    wanted = effective_bits(format_of(row[0]), 1, layer["kv_heads"], layer["head_dim"], evaluated)
                    self.assertEqual(row[1], bits(wanted))
        self.assertEqual({row[0]: row[1] for row in VIEWS["trained"](short).tables[0].rows}[KIVI], "32")

    def test_the_page_names_the_texts_chapters_as_the_record_does(self) -> None:
        page = " ".join((HERE.parents[2] / "docs" / "llm" / "kv-quant.md").read_text().split())
        chapters = re.search(r"chapters [^(]*\([^)]*\)", self.record["trained"]["text"]["source"]).group(0)
        self.assertEqual(page.count("chapter"), page.count(chapters), chapters)

    def test_kivi_matches_the_greedy_answer_only_because_its_residual_held_every_position(self) -> None:
        trained = self.record["trained"]
        held = trained["prompt_tokens"] + trained["new_tokens"] <= kivi_residual_range(format_of(KIVI))[1]
        same = self.record["formats"][KIVI]["trained"]["departs_at"] is None
        because = (f"so does {KIVI}, but only because the {trained['prompt_tokens']} + {trained['new_tokens']} "
                   f"positions never leave its exact residual")
        self.assertEqual(because in VIEWS["greedy"](self.record).paragraphs[0], held and same)
        longer = copy.deepcopy(self.record)
        longer["trained"]["prompt_tokens"] = kivi_residual_range(format_of(KIVI))[1]  # its run now quantizes a group
        longer["formats"][KIVI]["trained"]["greedy_ids"] = list(self.record["formats"]["float32"]["trained"]["greedy_ids"])
        paragraph = VIEWS["greedy"](rederived(longer)).paragraphs[0]
        self.assertNotIn("only because", paragraph)
        self.assertRegex(paragraph, rf"; [^;]*{KIVI}[^;]* give the same {trained['new_tokens']} tokens\.$")


if __name__ == "__main__":
    unittest.main()
