"""SnapKV-style eviction: the full cache's logits until the first eviction, then a fixed budget per key/value
head, heads choosing different positions, grouped heads never expanded, the logical length kept apart from
the physical one; the slots the window's queries attend to most are the ones that stay."""

from __future__ import annotations

import unittest

import torch

from kv_window.broken import PhysicalLengthCache
from kv_window.config import Policy
from kv_window.decoder import forward, new_cache
from kv_window.rotary import Rotary
from kv_window.snapkv import SnapStore
from kv_window.testing import TOLERANCE, random_ids, tiny_llama

SLOTS, OBSERVATION, CHUNK = 16, 4, 8
POLICY = Policy("snapkv", slots=SLOTS, observation=OBSERVATION, kernel=3)


def chunked(model, ids: torch.Tensor, cache) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([forward(model, ids[:, s:s + CHUNK], cache) for s in range(0, ids.shape[1], CHUNK)], 1)


class Eviction(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.model, cls.ids = tiny_llama(seed=11), random_ids(64, seed=12)
        with torch.inference_mode():
            cls.full = cls.model(cls.ids)

    def test_it_equals_the_full_cache_until_its_first_eviction_and_departs_after(self) -> None:
        cache = new_cache(self.model, POLICY)
        logits = chunked(self.model, self.ids, cache)
        first = SLOTS + CHUNK  # the first chunk to find more than SLOTS slots evicts at its end
        torch.testing.assert_close(logits[:, :first], self.full[:, :first], **TOLERANCE)
        self.assertGreater(float((logits[:, first:] - self.full[:, first:]).abs().max()), 0.1)

    def test_each_head_keeps_its_budget_of_its_own_positions_and_the_next_position_is_the_tokens_seen(self) -> None:
        cache = new_cache(self.model, POLICY)
        chunked(self.model, self.ids, cache)
        kept = cache.layers[0].kept
        config = self.model.config
        self.assertEqual(tuple(kept.keys.shape), (1, config.kv_heads, SLOTS, config.head_dim))  # Hkv, not H
        self.assertNotEqual(kept.positions[0, 0].tolist(), kept.positions[0, 1].tolist())
        self.assertEqual(kept.positions[0, 0, -OBSERVATION:].tolist(), list(range(64 - OBSERVATION, 64)))
        self.assertEqual(cache.positions(1, 1, torch.device("cpu")).tolist(), [[64]])

    def test_the_next_position_taken_from_the_physical_length_is_caught(self) -> None:
        good = chunked(self.model, self.ids, new_cache(self.model, POLICY))
        bad = chunked(self.model, self.ids, PhysicalLengthCache(new_cache(self.model, POLICY).layers))
        self.assertGreater(float((bad - good).abs().max()), 0.1)

    def test_the_slot_the_observed_queries_attend_to_stays(self) -> None:
        """One old key made to match every query: its votes keep it, in every head, however old it is."""
        store = SnapStore(8, 2, 1, 1, 2, 16, torch.float32, "cpu", Rotary(None))
        generator = torch.Generator().manual_seed(13)
        q = torch.randn(1, 4, 12, 16, generator=generator)
        k, v = torch.randn(1, 2, 12, 16, generator=generator) * 0.1, torch.randn(1, 2, 12, 16, generator=generator)
        k[:, :, 1] = q[:, ::2].mean(2) * 10  # key 1 matches every query of both groups
        positions = torch.arange(12)[None]
        store.attend(q, k, v, positions, positions * 0)
        self.assertTrue(all(1 in store.kept.positions[0, head].tolist() for head in range(2)))
        self.assertEqual(store.kept.count, 8)


if __name__ == "__main__":
    unittest.main()
