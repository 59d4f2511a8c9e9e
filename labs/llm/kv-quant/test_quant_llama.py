"""Cache formats standing in for the Llama decoder's plain cache: the 16-bit and 32-bit paths equal it
exactly, a quantized one differs within its error, and the quality helpers measure what they say."""

from __future__ import annotations

import unittest

import torch

from kv_quant.llama_cache import format_cache
from kv_quant.trained import chunked_logits, evaluate, greedy, new_cache
from llm_models.cache_formats import CacheFormat
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
        cache = new_cache(model, CacheFormat("float32"), 40)
        with torch.inference_mode():
            logits = chunked_logits(model, ids, CacheFormat("float32"), cache, chunk=16)
            whole = model(ids)[0]
        torch.testing.assert_close(logits, whole, atol=1e-5, rtol=1e-5)
        self.assertEqual(cache[0].length, 40)

    def test_each_position_scores_its_next_token_against_the_float32_pass(self) -> None:
        ids = random_ids(1, 41, seed=6)
        _, model = tiny_pair(0)
        formats = [CacheFormat("float32"), CacheFormat("int8"), CacheFormat("kivi", bits=2, group_size=16, residual=32)]
        scores, caches = evaluate(model, ids, formats, 40)
        with torch.inference_mode():
            log_p = torch.log_softmax(model(ids[:, :40])[0], -1)
        nll = -log_p.gather(-1, ids[0, 1:, None])[:, 0]
        reference = scores["float32"]
        self.assertEqual(len(reference.nll), 40)
        torch.testing.assert_close(torch.tensor(reference.nll), nll, atol=1e-4, rtol=0)  # stored to 4 decimals
        self.assertEqual((max(reference.kl), reference.top1_misses), (0.0, []))
        int8 = scores["int8"]
        self.assertGreater(sum(int8.kl), 0)
        self.assertTrue(all(0 <= index < 40 for index in int8.top1_misses))
        self.assertEqual(scores["kivi-2b-g16-r32"].kl, [0.0] * 40)  # 40 positions never leave a residual of 32 + 16
        self.assertEqual({cache[0].length for cache in caches.values()}, {40})
        with self.assertRaisesRegex(ValueError, r"evaluating 41 positions needs 42 tokens, got 41"):
            evaluate(model, ids, formats, 41)

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
