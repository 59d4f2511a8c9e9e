"""The page's views: its diagrams are drawn from the functions the caches run, and its wording follows the
record (a verdict that depends on the data changes when the data do)."""

from __future__ import annotations

import copy
import sys
import unittest
from pathlib import Path

import torch

from kv_quant.cache import make_cache
from kv_quant.codecs import encode_q4_0
from kv_quant.config import GGML_BLOCK, CacheFormat
from kv_quant.figures import kivi_split, per_token_head_bytes
from labkit.testing import committed_record

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the views package sits beside the tests, as the site build finds it

from kv_quant_views import VIEWS, headline  # noqa: E402
from kv_quant_views.pictures import CHANNELS, PICTURE, TOKENS  # noqa: E402
from site_hooks.blocks import render_block  # noqa: E402

RECORD = HERE.parents[2] / "results" / "quant-results.json"


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
        self.assertIn("no format's perplexity was indistinguishable", VIEWS["hidden"](record).paragraphs[0])
        self.assertIn("perplexity happened to tell the same story", VIEWS["takeaway-quality"](record).paragraphs[0])
        record["trained"]["perplexity_hides"] = ["q8_0"]
        self.assertIn("here q8_0 kept a perplexity the record cannot tell", VIEWS["takeaway-quality"](record).paragraphs[0])

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


if __name__ == "__main__":
    unittest.main()
