"""A ring buffer decoded far past its window equals full attention with a band mask at every step, chunks
longer than the window included, on the Llama (random weights) and on the toy block; its memory stays fixed;
the broken variants (the next position from the physical length, a top-left band) are caught."""

from __future__ import annotations

import unittest

import torch

from kv_window.broken import PhysicalLengthCache, TopLeftBandRing
from kv_window.config import Policy
from kv_window.decoder import WindowCache, forward, new_cache
from kv_window.rotary import Rotary
from kv_window.rules import ring_slot
from kv_window.testing import TOLERANCE, TOY, BandBlock, band_mask, masked_logits, random_ids, tiny_llama
from kv_window.toy import new_toy_cache, toy_forward
from llm_models.toy.model import DecoderBlock

WINDOW, LENGTH = 8, 60


def run_chunks(model, ids: torch.Tensor, cache: WindowCache, chunks: list[int], step=forward) -> torch.Tensor:
    out, start = [], 0
    with torch.inference_mode():
        for size in chunks:
            out.append(step(model, ids[:, start:start + size], cache))
            start += size
    return torch.cat(out, dim=1)


class RingOnTheLlama(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.model = tiny_llama(seed=1)
        cls.ids = random_ids(LENGTH, seed=2)
        with torch.inference_mode():
            cls.band = masked_logits(cls.model, cls.ids, band_mask(LENGTH, WINDOW), torch.arange(LENGTH))

    def test_one_token_at_a_time_far_past_the_window_equals_the_band_at_every_step(self) -> None:
        cache = new_cache(self.model, Policy("window", slots=WINDOW))
        logits = run_chunks(self.model, self.ids, cache, [1] * LENGTH)
        torch.testing.assert_close(logits, self.band, **TOLERANCE)
        full = masked_logits(self.model, self.ids, band_mask(LENGTH, LENGTH), torch.arange(LENGTH))
        self.assertGreater(float((logits - full).abs().max()), 0.1)  # evictions change it: the check has teeth

    def test_chunks_longer_than_the_window_and_uneven_chunks_equal_the_band(self) -> None:
        for chunks in ([20, 20, 20], [13, 1, 30, 16], [3] * 20):
            with self.subTest(chunks=chunks):
                cache = new_cache(self.model, Policy("window", slots=WINDOW))
                torch.testing.assert_close(run_chunks(self.model, self.ids, cache, chunks), self.band, **TOLERANCE)

    def test_memory_stays_fixed_and_each_position_sits_in_the_slot_the_rule_gives(self) -> None:
        cache = new_cache(self.model, Policy("window", slots=WINDOW))
        sizes = []
        for start in range(0, 30, 5):
            run_chunks(self.model, self.ids[:, start:start + 5], cache, [5])
            sizes.append(cache.stored_bytes())
        self.assertEqual(len(set(sizes)), 1)
        kept = cache.layers[0].kept.positions[0, 0].tolist()
        self.assertEqual(kept, [next(p for p in range(22, 30) if ring_slot(p, WINDOW) == s) for s in range(WINDOW)])

    def test_the_next_position_taken_from_the_physical_length_is_caught(self) -> None:
        correct = new_cache(self.model, Policy("window", slots=WINDOW))
        broken = PhysicalLengthCache(new_cache(self.model, Policy("window", slots=WINDOW)).layers)
        good = run_chunks(self.model, self.ids, correct, [1] * 20)
        bad = run_chunks(self.model, self.ids, broken, [1] * 20)
        torch.testing.assert_close(bad[:, :WINDOW + 1], good[:, :WINDOW + 1], **TOLERANCE)  # until the ring is full
        self.assertGreater(float((bad - good).abs().max()), 0.1)

    def test_a_top_left_band_is_caught_once_the_ring_holds_keys(self) -> None:
        rotary, config = Rotary(self.model.inverse_frequencies), self.model.config
        stores = [TopLeftBandRing(WINDOW, 1, config.kv_heads, config.head_dim, config.dtype, "cpu", rotary)
                  for _ in range(config.layers)]
        bad = run_chunks(self.model, self.ids, WindowCache(stores), [20, 20, 20])
        self.assertGreater(float((bad - self.band)[:, 20:].abs().max()), 0.1)

    def test_positions_that_skip_are_refused_in_one_line(self) -> None:
        cache = new_cache(self.model, Policy("window", slots=WINDOW))
        with self.assertRaisesRegex(ValueError, "consecutive positions"):
            forward(self.model, self.ids[:, :3], cache, positions=torch.tensor([[0, 2, 3]]))


class RingOnTheToyBlock(unittest.TestCase):
    def test_the_toy_block_through_a_ring_equals_its_band_at_every_step(self) -> None:
        block, ids = DecoderBlock(TOY), random_ids(50, seed=3, vocab_size=TOY.vocab_size)
        with torch.inference_mode():
            band = BandBlock(TOY, WINDOW)(ids)[0]
        for chunks in ([1] * 50, [20, 30]):
            with self.subTest(chunks=chunks):
                cache = new_toy_cache(block, Policy("window", slots=WINDOW))
                torch.testing.assert_close(run_chunks(block, ids, cache, chunks, toy_forward), band, **TOLERANCE)


if __name__ == "__main__":
    unittest.main()
