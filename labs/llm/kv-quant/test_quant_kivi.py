"""KIVI's groups: whole key groups along tokens whatever the appends, an exact residual, and the port bug caught."""

from __future__ import annotations

import unittest

import torch

from kv_quant.broken import PerTokenFlushKivi
from kv_quant.cache import KiviCache, make_cache
from kv_quant.entries import random_entries
from llm_models.cache_formats import CacheFormat

KIVI = CacheFormat("kivi", bits=2, group_size=32, residual=128)  # KIVI's own G and R
BATCH, KV_HEADS, HEAD_DIM = 1, 2, 32


def assert_whole_key_groups(test: unittest.TestCase, cache: KiviCache, when: str) -> None:
    group = cache.fmt.group_size
    sizes = cache.key_group_sizes
    test.assertTrue(all(size == group for size in sizes), f"{when}: key groups of {sorted(set(sizes))} tokens")
    scales = cache.stored().get("keys.scale")
    test.assertEqual(0 if scales is None else scales.shape[2], len(sizes), when)
    test.assertEqual(sum(sizes), cache.quantized_length, when)


class WholeKeyGroups(unittest.TestCase):
    def test_no_key_group_is_smaller_than_32_tokens_after_300_one_token_appends(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 300, HEAD_DIM, seed=0)
        cache = make_cache(KIVI, BATCH, KV_HEADS, HEAD_DIM)
        for t in range(300):
            cache.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
            assert_whole_key_groups(self, cache, f"after {t + 1} tokens")
            self.assertGreaterEqual(cache.residual_keys.shape[2], min(t + 1, KIVI.residual))
            self.assertLess(cache.residual_keys.shape[2], KIVI.residual + KIVI.group_size)
        self.assertEqual(cache.quantized_length, 160)  # 300 - 128 = 172 beyond the window: 5 whole groups of 32

    def test_uneven_chunks_flush_the_same_groups_as_one_token_appends(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 300, HEAD_DIM, seed=1)
        single, chunked = make_cache(KIVI, BATCH, KV_HEADS, HEAD_DIM), make_cache(KIVI, BATCH, KV_HEADS, HEAD_DIM)
        for t in range(300):
            single.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
        start = 0
        for size in (200, 1, 31, 7, 61):  # a prompt past the window, then irregular decode chunks
            chunked.append(keys[:, :, start : start + size], values[:, :, start : start + size])
            start += size
            assert_whole_key_groups(self, chunked, f"after {start} tokens")
        for a, b in zip(single.stored().items(), chunked.stored().items()):
            self.assertEqual(a[0], b[0])
            self.assertTrue(torch.equal(a[1], b[1]), a[0])

    def test_the_residual_window_is_exact_and_the_rest_is_not(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 200, HEAD_DIM, seed=2)
        cache = make_cache(KIVI, BATCH, KV_HEADS, HEAD_DIM)
        cache.append(keys, values)
        stored_keys, stored_values = cache.keys_values()
        quantized = cache.quantized_length  # 64: two groups left the window at 160 and 192 tokens
        self.assertEqual(quantized, 64)
        self.assertTrue(torch.equal(stored_keys[:, :, quantized:], keys[:, :, quantized:]))
        self.assertTrue(torch.equal(stored_values[:, :, quantized:], values[:, :, quantized:]))
        self.assertGreater(float((stored_keys[:, :, :quantized] - keys[:, :, :quantized]).abs().max()), 0.1)

    def test_keys_share_one_scale_per_channel_per_group_values_one_per_token_per_group(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 200, HEAD_DIM, seed=3)
        cache = make_cache(KIVI, BATCH, KV_HEADS, HEAD_DIM)
        cache.append(keys, values)
        stored = cache.stored()
        self.assertEqual(tuple(stored["keys.scale"].shape), (BATCH, KV_HEADS, 64 // 32, HEAD_DIM))  # per channel
        self.assertEqual(tuple(stored["values.scale"].shape), (BATCH, KV_HEADS, 64, HEAD_DIM // 32))  # per token
        self.assertEqual(tuple(stored["keys.codes"].shape), (BATCH, KV_HEADS, 64, HEAD_DIM * 2 // 8))  # 4 per byte
        self.assertEqual(stored["keys.codes"].dtype, torch.uint8)


class PerTokenFlushBugIsCaught(unittest.TestCase):
    def test_a_port_that_flushes_one_token_at_a_time_stores_exact_keys_in_more_bytes_than_float32(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 200, HEAD_DIM, seed=4)
        broken = PerTokenFlushKivi(KIVI, BATCH, KV_HEADS, HEAD_DIM)
        for t in range(200):
            broken.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
        self.assertEqual(set(broken.key_group_sizes), {1})  # what assert_whole_key_groups refuses
        with self.assertRaises(AssertionError):
            assert_whole_key_groups(self, broken, "broken")
        stored_keys, _ = broken.keys_values()
        self.assertTrue(torch.equal(stored_keys, keys))  # a one-token group's minimum is the value: exact
        key_bytes = sum(t.numel() * t.element_size() for name, t in broken.stored().items() if name.startswith("keys."))
        float32_key_bytes = broken.quantized_length * KV_HEADS * HEAD_DIM * 4
        self.assertGreater(key_bytes, float32_key_bytes)  # billed as 2-bit: codes plus a float32 scale and zero each
        self.assertGreater(broken.stored_bytes(), broken.formula_bytes())


if __name__ == "__main__":
    unittest.main()
