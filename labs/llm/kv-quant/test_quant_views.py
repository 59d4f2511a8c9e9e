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
from labkit.records import load_json

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
        cls.record = load_json(RECORD, "measurement record")

    def test_every_view_renders_from_the_record(self) -> None:
        for name, view in VIEWS.items():
            with self.subTest(view=name):
                self.assertTrue(render_block(view(self.record)))
        self.assertEqual(len(headline(self.record)), 2)

    def test_without_hidden_damage_the_key_results_and_the_answer_say_so(self) -> None:
        record = copy.deepcopy(self.record)
        record["trained"]["perplexity_hides"] = []
        items = VIEWS["key-results"](record).items
        self.assertTrue(any("agreed in this record" in item for item in items))
        self.assertIn("It did not, in this record", VIEWS["answer-perplexity"](record).paragraphs[0])
        self.assertIn("no format kept perplexity", VIEWS["hidden"](record).paragraphs[0])

    def test_the_fp8_verdict_follows_the_measured_divergences(self) -> None:
        record = copy.deepcopy(self.record)
        at = str(record["trained"]["contexts"][-1])
        calibrated = record["formats"]["fp8-tensor-amax"]["trained"]["kl"][at]
        for factor, words in ((0.5, "slightly better than"), (1.0, "about as good as"), (2.0, "slightly worse than")):
            record["formats"]["fp8-tensor-none"]["trained"]["kl"][at] = calibrated * factor
            with self.subTest(factor=factor):
                self.assertIn(words, VIEWS["fp8"](record).paragraphs[0])


if __name__ == "__main__":
    unittest.main()
