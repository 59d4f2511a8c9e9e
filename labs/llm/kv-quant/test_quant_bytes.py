"""Bytes counted from the stored tensors against each format's formula; bits per element; what fits a budget."""

from __future__ import annotations

import unittest

import torch

from kv_cache.memory import KV_FORMATS
from kv_quant.cache import make_cache
from kv_quant.entries import random_entries
from kv_quant.figures import bits_per_element, naive_tokens, tokens_in_budget
from kv_quant.testing import FORMATS
from llm_models.cache_formats import CacheFormat, format_of, formula_bytes

BATCH, KV_HEADS, HEAD_DIM = 2, 2, 32


class StoredBytesEqualTheFormula(unittest.TestCase):
    def test_at_every_length_from_1_to_80_one_token_at_a_time(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 80, HEAD_DIM, seed=0)
        for fmt in FORMATS:
            with self.subTest(fmt=fmt.label):
                cache = make_cache(fmt, BATCH, KV_HEADS, HEAD_DIM)
                for t in range(80):
                    cache.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
                    self.assertEqual(cache.stored_bytes(), cache.formula_bytes(), f"at {t + 1} positions")

    def test_at_long_lengths_reached_in_chunks(self) -> None:
        keys, values = random_entries(1, KV_HEADS, 1000, HEAD_DIM, seed=1)
        for fmt in FORMATS + (CacheFormat("kivi"),):  # KIVI's own G = 32, R = 128 too
            with self.subTest(fmt=fmt.label):
                cache = make_cache(fmt, 1, KV_HEADS, HEAD_DIM)
                start = 0
                for size in (129, 1, 255, 3, 512, 100):
                    cache.append(keys[:, :, start : start + size], values[:, :, start : start + size])
                    start += size
                    self.assertEqual(cache.stored_bytes(), cache.formula_bytes(), f"at {start} positions")

    def test_a_bfloat16_model_keeps_kivis_residual_in_two_bytes_and_the_formula_counts_them(self) -> None:
        keys, values = random_entries(1, KV_HEADS, 100, HEAD_DIM, seed=4)
        cache = make_cache(CacheFormat("kivi", group_size=16, residual=32), 1, KV_HEADS, HEAD_DIM, torch.bfloat16)
        cache.append(keys.bfloat16(), values.bfloat16())
        self.assertEqual(cache.residual_keys.dtype, torch.bfloat16)
        self.assertEqual(cache.stored_bytes(), cache.formula_bytes())
        self.assertLess(cache.formula_bytes(), formula_bytes(cache.fmt, 1, KV_HEADS, HEAD_DIM, 100))

    def test_every_stored_field_is_a_tensor_named_for_what_it_holds(self) -> None:
        keys, values = random_entries(1, KV_HEADS, 40, HEAD_DIM, seed=2)
        expected = {
            "int8": {"keys.codes", "keys.scale", "values.codes", "values.scale"},
            "int4": {"keys.codes", "keys.scale", "keys.zero", "values.codes", "values.scale", "values.zero"},
            "fp8": {"keys.codes", "keys.fp8_scale", "values.codes", "values.fp8_scale"},
            "kivi": {"keys.codes", "keys.scale", "keys.zero", "values.codes", "values.scale", "values.zero",
                     "residual.keys", "residual.values"},
        }
        for name, fields in expected.items():
            with self.subTest(format=name):
                cache = make_cache(CacheFormat(name, group_size=16, residual=8), 1, KV_HEADS, HEAD_DIM)
                cache.append(keys, values)
                self.assertEqual(set(cache.stored()), fields)


class BitsPerElement(unittest.TestCase):
    def test_the_formats_effective_bits_at_head_dim_64(self) -> None:
        # llama.cpp's 8.5 and 4.5; float32 metadata cost int4 in groups of 32 two bits, KIVI-2 two more
        expected = {"float32": 32, "bfloat16": 16, "int8": 8.5, "int4": 6.0, "kivi": 4.0, "q8_0": 8.5,
                    "q4_0": 4.5, "fp8": 8.0}
        for name, bits in expected.items():
            with self.subTest(format=name):
                self.assertEqual(bits_per_element(CacheFormat(name), 64), bits)

    def test_group_size_128_brings_int4_to_4_5_bits_at_head_dim_128(self) -> None:
        self.assertEqual(bits_per_element(CacheFormat("int4", group_size=128), 128), 4.5)

    def test_a_cache_reports_the_bits_it_stores_residual_included(self) -> None:
        keys, values = random_entries(1, KV_HEADS, 160, 64, seed=3)
        cache = make_cache(CacheFormat("kivi"), 1, KV_HEADS, 64)  # 160 = R + G: one group left the window
        cache.append(keys, values)
        self.assertEqual(cache.quantized_length, 32)
        # 32 tokens at 4 bits, 128 at 32: (32 x 4 + 128 x 32) / 160
        self.assertAlmostEqual(cache.bits_per_element, (32 * 4 + 128 * 32) / 160)


class OneSideAlone(unittest.TestCase):
    def test_a_keys_only_format_stores_the_values_exactly_in_float32_and_counts_them_so(self) -> None:
        keys, values = random_entries(1, KV_HEADS, 40, HEAD_DIM, seed=6)
        for label, exact, rounded in (("q4_0-keys", 1, 0), ("q4_0-values", 0, 1)):
            with self.subTest(format=label):
                cache = make_cache(format_of(label), 1, KV_HEADS, HEAD_DIM)
                cache.append(keys, values)
                stored = cache.keys_values()
                self.assertTrue(torch.equal(stored[exact], (keys, values)[exact]))
                self.assertFalse(torch.equal(stored[rounded], (keys, values)[rounded]))
                side = ("keys", "values")[exact]
                self.assertEqual(cache.stored()[f"{side}.codes"].dtype, torch.float32)
                both = make_cache(format_of("q4_0"), 1, KV_HEADS, HEAD_DIM)
                both.append(keys, values)
                self.assertEqual(cache.stored_bytes(), both.stored_bytes() // 2 + 4 * keys.numel())

    def test_only_the_formats_that_encode_each_token_alone_can_split(self) -> None:
        for name in ("kivi", "fp8", "float32"):
            with self.subTest(format=name), self.assertRaisesRegex(ValueError, rf"^{name} cannot quantize keys alone"):
                CacheFormat(name, sides="keys")
        with self.assertRaisesRegex(ValueError, r"sides must be one of \('both', 'keys', 'values'\), got 'key'"):
            CacheFormat("q4_0", sides="key")


class TheKVCachePagesFormats(unittest.TestCase):
    def test_the_calculators_formats_are_this_labs_under_the_same_names_bit_for_bit(self) -> None:
        same = {"float32": "float32", "fp8": "fp8-tensor-none", "q8_0": "q8_0", "int4-g32": "int4-g32",
                "q4_0": "q4_0", "float16": "bfloat16"}  # float16 and bfloat16: two 16-bit floats, one price
        self.assertEqual(set(same), set(KV_FORMATS))
        for name, label in same.items():
            for head_dim in (64, 128):
                with self.subTest(format=name, head_dim=head_dim):
                    self.assertEqual(bits_per_element(format_of(label), head_dim), KV_FORMATS[name])


class TokensInABudget(unittest.TestCase):
    BUDGET = 1 << 20  # 1 MiB for one layer, 8 key/value heads of 128: a budget the page can scale

    def test_the_real_formula_admits_more_than_the_full_precision_estimate_and_fewer_than_the_nominal_bits(self) -> None:
        for fmt, nominal in ((CacheFormat("q4_0"), 4), (CacheFormat("int4"), 4), (CacheFormat("int8"), 8)):
            with self.subTest(fmt=fmt.label):
                fits = tokens_in_budget(fmt, self.BUDGET, 1, 8, 128)
                self.assertGreater(fits, naive_tokens(self.BUDGET, 1, 8, 128, bits=16))
                self.assertLess(fits, naive_tokens(self.BUDGET, 1, 8, 128, bits=nominal))
                self.assertLessEqual(formula_bytes(fmt, 1, 8, 128, fits), self.BUDGET)
                self.assertGreater(formula_bytes(fmt, 1, 8, 128, fits + 1), self.BUDGET)

    def test_fp8_fits_twice_the_bfloat16_tokens_less_its_two_scales(self) -> None:
        bf16 = tokens_in_budget(CacheFormat("bfloat16"), self.BUDGET, 1, 8, 128)
        fp8 = tokens_in_budget(CacheFormat("fp8"), self.BUDGET, 1, 8, 128)
        self.assertEqual(bf16, 256)
        self.assertEqual(fp8, 511)  # two float32 scales take 8 bytes of the last token's 2048
        self.assertEqual(tokens_in_budget(CacheFormat("fp8"), self.BUDGET + 8, 1, 8, 128), 2 * bf16)


class ClearErrors(unittest.TestCase):
    def test_an_unknown_format_name_is_one_value_error_listing_the_known_ones(self) -> None:
        with self.assertRaisesRegex(ValueError, r"unknown cache format 'int3'; known formats: float32, bfloat16"):
            CacheFormat("int3")
        with self.assertRaisesRegex(ValueError, r"unknown cache format 'int3'"):
            make_cache("int3", 1, 1, 32)

    def test_a_group_size_that_does_not_divide_the_head_dim_names_both_numbers(self) -> None:
        with self.assertRaisesRegex(ValueError, r"^int4 group size 24 does not divide head_dim 64$"):
            make_cache(CacheFormat("int4", group_size=24), 1, 2, 64)
        with self.assertRaisesRegex(ValueError, r"^kivi group size 48 does not divide head_dim 32$"):
            formula_bytes(CacheFormat("kivi", group_size=48), 1, 2, 32, 10)
        with self.assertRaisesRegex(ValueError, r"^q4_0 blocks of 32 do not divide head_dim 48$"):
            make_cache("q4_0", 1, 2, 48)

    def test_entries_of_the_wrong_shape_are_refused_before_anything_is_stored(self) -> None:
        cache = make_cache("int8", 1, 2, 32)
        keys, values = random_entries(1, 3, 4, 32, seed=0)
        with self.assertRaisesRegex(ValueError, r"do not fit \(B, Hkv, T, D\) = \(1, 2, T, 32\)"):
            cache.append(keys, values)
        self.assertEqual(cache.length, 0)
        self.assertEqual(cache.stored_bytes(), 0)


if __name__ == "__main__":
    unittest.main()
