"""Every stored element against the value it replaced: within half a step, and less error for more bits."""

from __future__ import annotations

import dataclasses
import unittest

import torch

from kv_quant.cache import make_cache
from kv_quant.entries import random_entries
from kv_quant.testing import FORMATS, TINY, random_ids
from llm_models.cache_formats import CacheFormat
from llm_models.toy.model import DecoderBlock

# Dequantizing computes code * scale (+ zero) in float32: a few roundings of 2^-24 relative to the value.
FLOAT_SLACK = 2.0 ** -20
FP16_SCALE_ROUNDING = 2.0 ** -11  # llama.cpp quantizes with the float32 scale and stores it rounded to fp16
HALF_STEP_FORMATS = [f for f in FORMATS if f.name not in ("q8_0", "q4_0", "fp8")]


def round_trip(fmt: CacheFormat, seed: int = 0, chunks: tuple[int, ...] = (8, 1, 1, 30, 1, 23)):
    """Append 64 positions in uneven chunks; originals, stored values and steps, keys and values stacked."""
    keys, values = random_entries(2, 2, sum(chunks), 32, seed=seed)
    cache = make_cache(fmt, 2, 2, 32)
    start = 0
    for size in chunks:
        cache.append(keys[:, :, start : start + size], values[:, :, start : start + size])
        start += size
    stored, steps = torch.stack(cache.keys_values()), torch.stack(cache.steps())
    return torch.stack((keys, values)), stored, steps, cache


class HalfAStep(unittest.TestCase):
    def test_every_element_of_the_float_int_and_kivi_formats_is_within_half_its_step(self) -> None:
        for fmt in HALF_STEP_FORMATS:
            with self.subTest(fmt=fmt.label):
                original, stored, steps, _ = round_trip(fmt)
                error = (stored - original).abs()
                bound = steps / 2 + FLOAT_SLACK * original.abs()
                self.assertTrue(bool((error <= bound).all()), f"worst error / step {float((error / steps).max())}")

    def test_q8_0_exceeds_half_its_stored_step_only_by_the_scales_fp16_rounding(self) -> None:
        original, stored, steps, _ = round_trip(CacheFormat("q8_0"))
        ratio = (stored - original).abs() / steps
        self.assertLessEqual(float(ratio.max()), 0.5 + 127 * FP16_SCALE_ROUNDING + FLOAT_SLACK)
        self.assertGreater(float(ratio.max()), 0.5)  # the fp16 scale is not the one the codes were rounded with

    def test_q4_0_clips_the_sign_opposite_its_largest_value_to_within_one_step(self) -> None:
        # d = max / -8: the largest-magnitude value is code 0 exactly; one of the other sign near -max
        # wants code 16 and gets 15 (+7 d), up to one whole step off.
        original, stored, steps, _ = round_trip(CacheFormat("q4_0"))
        ratio = (stored - original).abs() / steps
        clipped = ratio > 0.5 + 8 * FP16_SCALE_ROUNDING + FLOAT_SLACK
        self.assertTrue(bool(clipped.any()), "gaussian blocks should hold some clipped elements")
        self.assertLessEqual(float(ratio.max()), 1 + 8 * FP16_SCALE_ROUNDING + FLOAT_SLACK)
        # every clipped element has the sign opposite its block's largest value, stored as code 15: 7 |d|
        self.assertTrue(bool(torch.isclose(stored[clipped].abs(), 7 * steps[clipped]).all()))

    def test_fp8_is_within_half_its_step_below_the_maximum_and_saturates_above_it(self) -> None:
        for fmt in [f for f in FORMATS if f.name == "fp8"]:
            with self.subTest(fmt=fmt.label):
                original, stored, steps, cache = round_trip(fmt)
                scale = torch.stack((cache.key_scale, cache.value_scale)).reshape(2, 1, -1, 1, 1)
                saturated = (original / scale).abs() > 448
                error = (stored - original).abs()
                self.assertTrue(bool((error <= steps / 2 + FLOAT_SLACK * original.abs())[~saturated].all()))
                limit = (448 * scale).expand_as(stored)
                torch.testing.assert_close(stored[saturated].abs(), limit[saturated], atol=0, rtol=1e-6)


class MoreBitsLessError(unittest.TestCase):
    def test_root_mean_square_error_falls_as_bits_rise_within_each_family(self) -> None:
        def rms(fmt: CacheFormat) -> float:
            original, stored, _, _ = round_trip(fmt, seed=5, chunks=(64,))
            return float((stored - original).pow(2).mean().sqrt())

        kivi = dict(group_size=16, residual=0)  # no exact residual, so only the codes are compared
        chains = {
            "floats and integers": [CacheFormat("float32"), CacheFormat("bfloat16"), CacheFormat("int8"),
                                    CacheFormat("int4"), CacheFormat("kivi", bits=2, **kivi)],
            "kivi": [CacheFormat("kivi", bits=4, **kivi), CacheFormat("kivi", bits=2, **kivi)],
            "llama.cpp": [CacheFormat("q8_0"), CacheFormat("q4_0")],
        }
        for family, formats in chains.items():
            with self.subTest(family=family):
                errors = [rms(fmt) for fmt in formats]
                self.assertEqual(errors, sorted(errors), [f.label for f in formats])
                self.assertEqual(len(set(errors)), len(errors))  # strictly: every step down in bits costs


class SixteenBitPathIsThePlainCache(unittest.TestCase):
    def assert_same_as_plain(self, fmt: CacheFormat, dtype: torch.dtype) -> None:
        config = dataclasses.replace(TINY, dtype=dtype)
        model, ids = DecoderBlock(config), random_ids(2, 40, seed=7)
        store = make_cache(fmt, 2, config.kv_heads, config.head_dim, dtype)
        plain = None
        with torch.inference_mode():
            for chunk in ids.split([9, 1, 1, 13, 1, 15], dim=1):
                expected, plain = model(chunk, plain)
                got, _ = model(chunk, store)
                self.assertTrue(torch.equal(got, expected), f"{fmt.label} at {store.length} positions")
        self.assertTrue(torch.equal(store.keys_values()[0], plain[0]))

    def test_bfloat16_format_in_a_bfloat16_model_gives_the_plain_caches_logits_exactly(self) -> None:
        self.assert_same_as_plain(CacheFormat("bfloat16"), torch.bfloat16)

    def test_float32_format_in_a_float32_model_gives_the_plain_caches_logits_exactly(self) -> None:
        self.assert_same_as_plain(CacheFormat("float32"), torch.float32)


if __name__ == "__main__":
    unittest.main()
