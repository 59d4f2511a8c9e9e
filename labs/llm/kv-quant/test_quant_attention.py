"""Attention over a quantized cache: block by block equals all at once, and keeps a smaller peak."""

from __future__ import annotations

import unittest

import torch

from kv_quant.attention import AllocationTracker, blockwise_attention, dequantized_attention, peak_bytes
from kv_quant.cache import make_cache
from kv_quant.entries import random_entries
from kv_quant.testing import FORMATS
from llm_models.attention import reference_attention
from llm_models.cache_formats import CacheFormat

# The online softmax adds the same terms in another order and rescales partial sums: float32 rounding only.
ATOL = RTOL = 1e-5
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 32


def filled(fmt: CacheFormat, tokens: int, seed: int = 0):
    keys, values = random_entries(1, KV_HEADS, tokens, HEAD_DIM, seed=seed)
    cache = make_cache(fmt, 1, KV_HEADS, HEAD_DIM)
    cache.append(keys, values)
    return cache


def queries(count: int, seed: int) -> torch.Tensor:
    return torch.randn(1, HEADS, count, HEAD_DIM, generator=torch.Generator().manual_seed(seed))  # (B, H, Tq, D)


class BlockwiseEqualsAllAtOnce(unittest.TestCase):
    def test_for_every_format_one_query_and_a_chunk_of_queries_any_block_size(self) -> None:
        for fmt in FORMATS:
            cache = filled(fmt, 100)
            for count, block in ((1, 16), (1, 13), (5, 32), (5, 200)):
                with self.subTest(fmt=fmt.label, queries=count, block=block):
                    q = queries(count, seed=count + block)
                    expected = dequantized_attention(q, cache, 100 - count)
                    torch.testing.assert_close(blockwise_attention(q, cache, 100 - count, block), expected,
                                               atol=ATOL, rtol=RTOL)

    def test_all_at_once_is_the_first_labs_reference_attention_on_the_dequantized_cache(self) -> None:
        cache = filled(CacheFormat("q4_0"), 50)
        q = queries(3, seed=1)
        keys, values = cache.keys_values()
        torch.testing.assert_close(dequantized_attention(q, cache, 47), reference_attention(q, keys, values, 47),
                                   atol=ATOL, rtol=RTOL)

    def test_queries_that_do_not_fit_the_cache_are_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, r"4 query heads at offset 10 with 1 queries do not fit a cache "
                                                r"of 2 key/value heads and 50 positions"):
            blockwise_attention(queries(1, 0), filled(CacheFormat("int8"), 50), 10)


class PeakOfEachStrategy(unittest.TestCase):
    TOKENS, BLOCK = 512, 64

    def test_block_by_block_keeps_a_smaller_peak_and_largest_temporary_for_every_quantized_format(self) -> None:
        whole_keys = 1 * KV_HEADS * self.TOKENS * HEAD_DIM * 4  # the cache's keys in float32
        one_block = 1 * KV_HEADS * self.BLOCK * HEAD_DIM * 4
        for fmt in [f for f in FORMATS if f.name != "float32"]:
            with self.subTest(fmt=fmt.label):
                cache, q = filled(fmt, self.TOKENS), queries(1, seed=2)
                _, whole = peak_bytes(dequantized_attention, q, cache, self.TOKENS - 1)
                _, blocks = peak_bytes(blockwise_attention, q, cache, self.TOKENS - 1, self.BLOCK)
                self.assertGreaterEqual(whole.peak, 2 * whole_keys)  # keys and values in float, alive together
                self.assertGreaterEqual(whole.largest, whole_keys)
                self.assertLess(blocks.peak, whole.peak / 2)
                self.assertLessEqual(blocks.largest, one_block)

    def test_a_float32_cache_is_read_in_place_so_all_at_once_allocates_nothing_that_size(self) -> None:
        cache, q = filled(CacheFormat("float32"), self.TOKENS), queries(1, seed=3)
        _, whole = peak_bytes(dequantized_attention, q, cache, self.TOKENS - 1)
        self.assertLessEqual(whole.peak, 4 * HEADS * HEAD_DIM * 4)  # the output and little else


class AllocationTrackerCounts(unittest.TestCase):
    def test_new_storages_count_views_and_in_place_writes_do_not_and_freed_ones_leave(self) -> None:
        with AllocationTracker() as tracker:
            a = torch.ones(1000)  # 4000 bytes
            view = a[:500]
            a.mul_(2)
            b = a * 2  # 4000 more
            del a  # the view keeps a's storage alive
            self.assertEqual(tracker.live, 8000)
            del view
            self.assertEqual(tracker.live, 4000)
            del b
        self.assertEqual((tracker.peak, tracker.largest, tracker.live), (8000, 4000, 0))


if __name__ == "__main__":
    unittest.main()
