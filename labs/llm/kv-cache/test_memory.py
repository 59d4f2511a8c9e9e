"""The bytes a cache keeps: the formula, the article's worked numbers, and real tensors."""

from __future__ import annotations

import unittest

import torch

from llm_models.kv_bytes import cache_storage_bytes, kv_cache_bytes
from llm_models.toy.config import ModelConfig
from llm_models.toy.model import DecoderBlock


class CacheBytes(unittest.TestCase):
    def test_default_config_is_the_articles_four_heads_of_width_eight_in_float32(self) -> None:
        config = ModelConfig()
        self.assertEqual((config.heads, config.head_dim, config.dtype), (4, 8, torch.float32))
        self.assertEqual(config.bytes_per_element, 4)

    def test_one_retained_position_costs_256_bytes_and_128_cost_32768(self) -> None:
        self.assertEqual(kv_cache_bytes(batch=1, heads=4, length=1, head_dim=8, bytes_per_element=4), 256)
        self.assertEqual(kv_cache_bytes(batch=1, heads=4, length=128, head_dim=8, bytes_per_element=4), 32_768)

    def test_a_real_128_position_cache_holds_exactly_the_formulas_bytes(self) -> None:
        config = ModelConfig()
        ids = torch.randint(0, config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            _, cache = DecoderBlock(config)(ids)
        self.assertEqual(cache_storage_bytes(cache), 32_768)

    def test_grouped_query_cache_holds_kv_heads_not_query_heads(self) -> None:
        config = ModelConfig(kv_heads=1)
        ids = torch.randint(0, config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            _, cache = DecoderBlock(config)(ids)
        self.assertEqual(tuple(cache[0].shape), (1, 1, 128, 8))
        self.assertEqual(cache_storage_bytes(cache), kv_cache_bytes(1, 1, 128, 8, 4))
        self.assertEqual(cache_storage_bytes(cache), 32_768 // 4)

    def test_formula_rejects_impossible_dimensions(self) -> None:
        with self.assertRaisesRegex(ValueError, r"heads must be at least 1, got 0"):
            kv_cache_bytes(batch=1, heads=0, length=4, head_dim=8, bytes_per_element=4)
        with self.assertRaisesRegex(ValueError, r"length must be at least 0, got -1"):
            kv_cache_bytes(batch=1, heads=4, length=-1, head_dim=8, bytes_per_element=4)


class ConfigChecks(unittest.TestCase):
    def test_kv_heads_default_to_heads_and_must_divide_them(self) -> None:
        self.assertEqual(ModelConfig().kv_heads, 4)
        self.assertEqual(ModelConfig(kv_heads=2).kv_heads, 2)
        with self.assertRaisesRegex(ValueError, r"heads \(4\) must be a multiple of kv_heads \(3\)"):
            ModelConfig(kv_heads=3)

    def test_width_must_split_evenly_into_heads(self) -> None:
        with self.assertRaisesRegex(ValueError, r"width \(30\) must be divisible by heads \(4\)"):
            ModelConfig(width=30)


if __name__ == "__main__":
    unittest.main()
