"""The int8 model's quality against float32 (decode_bandwidth.int8_quality): the float32 decoder scores zero KL and
no top-1 miss against itself, its int8 round trip scores a positive KL, and the scores do not depend on how the
text is cut into chunks; a mis-sized text is refused. A tiny seeded random Llama carries every check."""

from __future__ import annotations

import unittest
from unittest import mock

import torch

from decode_bandwidth import int8_quality
from llm_models.kernels.quantize import dequantized_state_dict
from llm_models.llama.model import LlamaDecoder
from llm_models.llama.tiny import tiny_pair

POSITIONS = 24


class Int8Quality(unittest.TestCase):
    reference, model = tiny_pair(seed=0)
    round_trip = LlamaDecoder(model.config, dequantized_state_dict(reference.state_dict()))
    ids = torch.randint(0, model.config.vocab_size, (1, POSITIONS + 1), generator=torch.Generator().manual_seed(4))

    def test_float32_against_itself_scores_no_divergence_and_the_round_trip_some(self) -> None:
        same = int8_quality.chunked_scores(self.model, self.model, self.ids, POSITIONS)
        self.assertEqual(same["int8"].kl, [0.0] * POSITIONS)
        self.assertEqual(same["int8"].top1_misses, [])
        self.assertEqual(same["int8"].nll, same["float32"].nll)
        apart = int8_quality.chunked_scores(self.model, self.round_trip, self.ids, POSITIONS)
        self.assertEqual(apart["float32"].kl, [0.0] * POSITIONS)
        self.assertGreater(sum(apart["int8"].kl), 0.0)
        self.assertEqual(len(apart["int8"].nll), POSITIONS)

    def test_the_scores_do_not_depend_on_the_chunk_size(self) -> None:
        whole = int8_quality.chunked_scores(self.model, self.round_trip, self.ids, POSITIONS)
        with mock.patch.object(int8_quality, "CHUNK", 5):
            cut = int8_quality.chunked_scores(self.model, self.round_trip, self.ids, POSITIONS)
        for name in ("float32", "int8"):
            self.assertEqual(cut[name].top1_misses, whole[name].top1_misses)
            for found, expected in zip(cut[name].nll, whole[name].nll, strict=True):
                self.assertAlmostEqual(found, expected, delta=2e-4)  # both rounded to 4 decimals

    def test_a_text_without_a_next_token_for_every_position_is_refused(self) -> None:
        with self.assertRaises(ValueError) as refused:
            int8_quality.chunked_scores(self.model, self.round_trip, self.ids[:, :POSITIONS], POSITIONS)
        self.assertIn(f"needs {POSITIONS + 1} tokens, got {POSITIONS}", str(refused.exception))

    def test_the_record_entry_holds_both_greedy_answers_of_the_asked_length(self) -> None:
        entry = int8_quality.int8_quality(self.model, self.round_trip, self.ids, POSITIONS, [1, 2, 3], 6)
        self.assertEqual(sorted(entry["greedy"]["ids"]), ["float32", "int8"])
        self.assertEqual({len(ids) for ids in entry["greedy"]["ids"].values()}, {6})
        self.assertEqual(entry["positions"], POSITIONS)


if __name__ == "__main__":
    unittest.main()
