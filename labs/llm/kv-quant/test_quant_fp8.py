"""fp8 e4m3: saturating at the format's maximum, scale 1.0 uncalibrated, amax / max when calibrated."""

from __future__ import annotations

import unittest

import torch

from kv_quant import codecs
from kv_quant.cache import make_cache
from kv_quant.entries import random_entries
from llm_models.cache_formats import CacheFormat

HAS_FNUZ = hasattr(torch, "float8_e4m3fnuz")


def entries_with(value: float) -> tuple[torch.Tensor, torch.Tensor]:
    keys = torch.zeros(1, 2, 1, 32)
    keys[0, 0, 0, :4] = torch.tensor([value, -value, 1.0, 0.0])
    return keys, keys.clone()


class Saturation(unittest.TestCase):
    def test_e4m3fn_saturates_at_448(self) -> None:
        cache = make_cache(CacheFormat("fp8"), 1, 2, 32)  # uncalibrated: scale 1.0
        cache.append(*entries_with(1000.0))
        keys, _ = cache.keys_values()
        self.assertEqual(keys[0, 0, 0, :4].tolist(), [448.0, -448.0, 1.0, 0.0])
        self.assertEqual(torch.finfo(torch.float8_e4m3fn).max, 448.0)

    @unittest.skipUnless(HAS_FNUZ, "this PyTorch has no torch.float8_e4m3fnuz")
    def test_e4m3fnuz_saturates_at_240_where_a_plain_cast_gives_nan(self) -> None:
        cache = make_cache(CacheFormat("fp8", variant="e4m3fnuz"), 1, 2, 32)
        cache.append(*entries_with(1000.0))
        keys, _ = cache.keys_values()
        self.assertEqual(keys[0, 0, 0, :4].tolist(), [240.0, -240.0, 1.0, 0.0])
        self.assertEqual(torch.finfo(torch.float8_e4m3fnuz).max, 240.0)
        self.assertTrue(bool(torch.tensor([1000.0]).to(torch.float8_e4m3fnuz).float().isnan().all()))

    def test_the_largest_representable_value_survives_unchanged(self) -> None:
        for variant, limit in (("e4m3fn", 448.0), ("e4m3fnuz", 240.0)):
            if variant == "e4m3fnuz" and not HAS_FNUZ:
                continue
            with self.subTest(variant=variant):
                fields = codecs.encode_fp8(torch.full((1, 1, 1, 2), limit), torch.ones(1), variant)
                self.assertEqual(codecs.decode_fp8(fields, torch.ones(1), torch.float32).flatten().tolist(), [limit] * 2)


class Scales(unittest.TestCase):
    def test_uncalibrated_scales_are_one_per_tensor_or_one_per_head(self) -> None:
        for scale, count in (("tensor", 1), ("head", 2)):
            with self.subTest(scale=scale):
                cache = make_cache(CacheFormat("fp8", scale=scale), 1, 2, 32)
                self.assertEqual(cache.key_scale.tolist(), [1.0] * count)
                self.assertEqual(cache.stored_bytes(), 2 * 4 * count)  # the scales exist before any token

    def test_amax_calibration_maps_the_first_appends_largest_value_to_448(self) -> None:
        keys, values = random_entries(1, 2, 16, 32, seed=0)
        for scale in ("tensor", "head"):
            with self.subTest(scale=scale):
                cache = make_cache(CacheFormat("fp8", scale=scale, calibration="amax"), 1, 2, 32)
                cache.append(keys, values)
                dims = (0, 2, 3) if scale == "head" else (0, 1, 2, 3)
                expected = keys.abs().amax(dim=dims).reshape(-1) / 448
                torch.testing.assert_close(cache.key_scale, expected, atol=0, rtol=0)
                stored, _ = cache.keys_values()
                self.assertEqual(float(stored.abs().max()), float(keys.abs().max()))  # largest maps to 448 exactly

    def test_calibrated_on_a_short_prompt_later_larger_entries_saturate(self) -> None:
        cache = make_cache(CacheFormat("fp8", calibration="amax"), 1, 2, 32)
        prompt = torch.ones(1, 2, 4, 32)
        cache.append(prompt, prompt)
        later = torch.full((1, 2, 1, 32), 5.0)  # five times the calibrated amax
        cache.append(later, later)
        keys, _ = cache.keys_values()
        self.assertEqual(float(keys[:, :, -1].max()), 1.0)  # 448 x scale (1 / 448): clipped to the prompt's amax


if __name__ == "__main__":
    unittest.main()
