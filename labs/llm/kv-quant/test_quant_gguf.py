"""q8_0 and q4_0 are llama.cpp's blocks: the same bytes as gguf's reference quantizers, the same values back."""

from __future__ import annotations

import unittest

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from kv_quant import codecs
from kv_quant.cache import make_cache
from kv_quant.entries import random_entries

BYTES_PER_BLOCK = {"q8_0": 34, "q4_0": 18}  # sizeof(block_q8_0), sizeof(block_q4_0) for 32 values
ENCODERS = {"q8_0": codecs.encode_q8_0, "q4_0": codecs.encode_q4_0}
DECODERS = {"q8_0": codecs.decode_q8_0, "q4_0": codecs.decode_q4_0}
TYPES = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0}


def awkward_rows() -> torch.Tensor:
    """(rows, 64): gaussian rows plus the cases a re-implementation gets wrong: an all-zero block, exact
    halfway codes (x = (k + 1/2) d), +-max ties, one huge value, subnormal-sized values."""
    generator = torch.Generator().manual_seed(11)
    rows = [torch.randn(64, generator=generator) * s for s in (1.0, 0.01, 30.0)]
    rows.append(torch.zeros(64))
    # q8_0 with d = 1/16 exactly (max 127/16): every other value k + 1/2 codes, where roundf goes away from 0
    rows.append(torch.cat((torch.tensor([127 / 16]), (torch.arange(63) - 31 + 0.5) / 16)))
    rows.append(torch.cat((torch.tensor([-3.0, 3.0]), torch.randn(62, generator=generator))))  # tie, negative first
    rows.append(torch.cat((torch.tensor([1e4]), torch.randn(63, generator=generator))))
    rows.append(torch.randn(64, generator=generator) * 1e-6)
    return torch.stack(rows).float()


class BitIdenticalToGguf(unittest.TestCase):
    def test_stored_bytes_equal_gguf_quantize_on_awkward_rows_and_on_cache_shaped_entries(self) -> None:
        keys, _ = random_entries(2, 3, 7, 64, seed=2)  # (B, Hkv, T, D): llama.cpp blocks run along D
        for name in ENCODERS:
            for label, data in (("awkward rows", awkward_rows()), ("cache entries", keys)):
                with self.subTest(format=name, data=label):
                    ours = codecs.ggml_bytes(ENCODERS[name](data), BYTES_PER_BLOCK[name]).numpy()
                    reference = quantize(data.numpy(), TYPES[name])
                    self.assertEqual(ours.shape, reference.shape)
                    self.assertTrue(np.array_equal(ours, reference), f"{int((ours != reference).sum())} bytes differ")

    def test_dequantized_values_equal_gguf_dequantize_bit_for_bit(self) -> None:
        data = awkward_rows()
        for name in ENCODERS:
            with self.subTest(format=name):
                ours = DECODERS[name](ENCODERS[name](data), torch.float32).numpy()
                reference = dequantize(quantize(data.numpy(), TYPES[name]), TYPES[name])
                self.assertTrue(np.array_equal(ours, reference))

    def test_a_cache_of_each_block_format_holds_gguf_bytes_after_one_token_appends(self) -> None:
        keys, values = random_entries(1, 2, 12, 64, seed=4)
        for name in ENCODERS:
            with self.subTest(format=name):
                cache = make_cache(name, 1, 2, 64)
                for t in range(12):
                    cache.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
                stored = {side: {"codes": cache.stored()[f"{side}.codes"], "scale": cache.stored()[f"{side}.scale"]}
                          for side in ("keys", "values")}
                for side, original in (("keys", keys), ("values", values)):
                    ours = codecs.ggml_bytes(stored[side], BYTES_PER_BLOCK[name]).numpy()
                    self.assertTrue(np.array_equal(ours, quantize(original.numpy(), TYPES[name])), side)


if __name__ == "__main__":
    unittest.main()
