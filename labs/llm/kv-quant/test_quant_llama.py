"""Cache formats standing in for the Llama decoder's plain cache: the 16-bit and 32-bit paths equal it
exactly, a quantized one differs within its error, and the quality helpers measure what they say."""

from __future__ import annotations

import unittest

import torch

from kv_quant.config import CacheFormat
from kv_quant.llama_cache import format_cache
from kv_quant.trained import chunked_logits, greedy, quality
from llm_models.llama.testing import random_ids
from llm_models.llama.tiny import tiny_pair

LENGTH, PROMPT = 48, 8


def decode(model, cache, ids: torch.Tensor) -> torch.Tensor:
    """The prompt in one chunk, then one token per call: every position's logits (1, T, vocab)."""
    with torch.inference_mode():
        steps = [model(ids[:, :PROMPT], cache)]
        steps += [model(ids[:, t : t + 1], cache) for t in range(PROMPT, ids.shape[1])]
    return torch.cat(steps, dim=1)


class FormatsInTheLlamaDecoder(unittest.TestCase):
    def formats_cache(self, model, name: str, dtype: torch.dtype):
        c = model.config
        fmt = CacheFormat(name, group_size=8)  # the tiny model's heads are 16 wide
        return format_cache(fmt, c.layers, 1, c.kv_heads, LENGTH, c.head_dim, dtype)

    def test_the_float32_and_bfloat16_formats_give_the_plain_caches_logits_bit_for_bit(self) -> None:
        ids = random_ids(1, LENGTH, seed=1)
        for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
            _, model = tiny_pair(0, dtype)
            plain = decode(model, model.new_cache(1, LENGTH), ids)
            stored = decode(model, self.formats_cache(model, name, dtype), ids)
            self.assertTrue(torch.equal(plain, stored), name)

    def test_int8_differs_from_the_plain_cache_but_stays_close(self) -> None:
        ids = random_ids(1, LENGTH, seed=2)
        _, model = tiny_pair(0)
        plain = decode(model, model.new_cache(1, LENGTH), ids)
        stored = decode(model, self.formats_cache(model, "int8", torch.float32), ids)
        difference = float((plain - stored).abs().max())
        self.assertGreater(difference, 0)
        self.assertLess(difference, 0.05 * float(plain.abs().max()))

    def test_a_format_cache_refuses_positions_beyond_its_capacity_by_the_numbers(self) -> None:
        _, model = tiny_pair(0)
        cache = self.formats_cache(model, "int8", torch.float32)
        decode(model, cache, random_ids(1, 40, seed=3))
        with self.assertRaisesRegex(ValueError, "40 cached \\+ 16 new positions = 56, beyond the capacity of 48"):
            with torch.inference_mode():
                model(random_ids(1, 16, seed=4), cache)  # the decoder reads the store's capacity
        entries = torch.zeros(1, model.config.kv_heads, 16, model.config.head_dim)
        with self.assertRaisesRegex(ValueError, "40 cached \\+ 16 new positions = 56, beyond the cache's capacity of 48"):
            cache[0].update(entries, entries)  # and the store refuses on its own


class QualityHelpers(unittest.TestCase):
    def test_chunked_float32_logits_equal_one_causal_pass_within_float_rounding(self) -> None:
        ids = random_ids(1, 40, seed=5)
        _, model = tiny_pair(0)
        logits, cache = chunked_logits(model, ids, CacheFormat("float32"), chunk=16)
        with torch.inference_mode():
            whole = model(ids)
        torch.testing.assert_close(logits, whole, atol=1e-5, rtol=1e-5)
        self.assertEqual(cache[0].length, 40)

    def test_the_reference_against_itself_has_kl_0_and_top1_1_and_a_perplexity_from_its_nll(self) -> None:
        ids = random_ids(1, 32, seed=6)
        logits = torch.randn(1, 32, 128, generator=torch.Generator().manual_seed(0))
        same = quality(logits, logits, ids, 32)
        self.assertEqual(same["kl"], 0.0)
        self.assertEqual(same["top1_agreement"], 1.0)
        nll = -torch.log_softmax(logits[0, :31], -1).gather(-1, ids[0, 1:, None]).mean()
        self.assertAlmostEqual(same["perplexity"], float(nll.exp()), places=4)
        other = quality(logits + torch.randn_like(logits), logits, ids, 32)
        self.assertGreater(other["kl"], 0)
        with self.assertRaisesRegex(ValueError, r"context must lie in \[2, 32\] tokens, got 33"):
            quality(logits, logits, ids, 33)

    def test_greedy_with_the_float32_format_is_the_plain_caches_greedy(self) -> None:
        _, model = tiny_pair(0)
        prompt = random_ids(1, 6, seed=7)[0].tolist()
        with torch.inference_mode():
            cache, ids, chosen = model.new_cache(1, 16), torch.tensor([prompt]), []
            logits = model(ids, cache)[0, -1]
            for _ in range(8):
                chosen.append(int(logits.argmax()))
                logits = model(torch.tensor([[chosen[-1]]]), cache)[0, -1]
        self.assertEqual(greedy(model, prompt, CacheFormat("float32"), 8), chosen)


if __name__ == "__main__":
    unittest.main()
