"""The preallocated cache: allocated once, written in place, bounded, and released."""

from __future__ import annotations

import unittest

import torch

from kv_storage.preallocated import PreallocatedKVCache
from kv_storage.testing import TINY, random_ids
from llm_models.toy.model import DecoderBlock


class PreallocatedCache(unittest.TestCase):
    def test_appends_write_in_place_and_return_views_of_the_valid_part(self) -> None:
        model = DecoderBlock(TINY)
        store = PreallocatedKVCache.for_model(TINY, batch=1, capacity=16)
        buffer = store.keys.untyped_storage().data_ptr()
        with torch.inference_mode():
            for t, token in enumerate(random_ids(10, seed=0).split(1, dim=1)):
                model(token, store)
                keys, _ = store.stored()
                self.assertEqual(keys.untyped_storage().data_ptr(), buffer)  # a view, never a copy
                self.assertEqual(tuple(keys.shape), (1, TINY.kv_heads, t + 1, TINY.head_dim))
        self.assertEqual(store.keys.untyped_storage().data_ptr(), buffer)
        self.assertEqual(store.allocated_bytes, 2 * 1 * 4 * 16 * 8 * 4)  # the whole capacity, from the start

    def test_reaching_capacity_is_a_clear_error_that_changes_nothing(self) -> None:
        store = PreallocatedKVCache.for_model(TINY, batch=1, capacity=6)
        store.update(torch.ones(1, 4, 5, 8), torch.ones(1, 4, 5, 8))
        with self.assertRaisesRegex(ValueError, r"5 stored \+ 2 new positions = 7, beyond the preallocated capacity of 6"):
            store.update(torch.ones(1, 4, 2, 8), torch.ones(1, 4, 2, 8))
        self.assertEqual(store.length, 5)
        self.assertEqual(float(store.keys[:, :, 5].abs().sum()), 0.0)

    def test_entries_of_the_wrong_shape_are_rejected(self) -> None:
        store = PreallocatedKVCache.for_model(TINY, batch=1, capacity=6)
        with self.assertRaisesRegex(ValueError, r"do not fit storage \(B, Hkv, T, D\) = \(1, 4, 6, 8\)"):
            store.update(torch.ones(1, 2, 1, 8), torch.ones(1, 2, 1, 8))

    def test_released_cache_frees_its_buffers_and_refuses_further_use(self) -> None:
        store = PreallocatedKVCache.for_model(TINY, batch=1, capacity=6)
        store.update(torch.ones(1, 4, 2, 8), torch.ones(1, 4, 2, 8))
        store.release()
        self.assertEqual((store.allocated_bytes, store.length, store.keys), (0, 0, None))
        with self.assertRaisesRegex(ValueError, r"released"):
            store.update(torch.ones(1, 4, 1, 8), torch.ones(1, 4, 1, 8))


if __name__ == "__main__":
    unittest.main()
