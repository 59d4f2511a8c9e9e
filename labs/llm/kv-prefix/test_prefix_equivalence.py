"""Warm equals cold: a request that starts from cached blocks gives the logits of the same request computed from
nothing, at its first token and every decode step after, on the small random model and on the trained SmolLM2-135M
(float32); and each classic mistake (a hash without its parent, a block freed while still held, positions restarted
after a hit) breaks that equality in the same scenario (kv_prefix.equivalence says how each is exposed)."""

from __future__ import annotations

import unittest

from kv_prefix.broken import EagerFreePool, restarting, unchained
from kv_prefix.equivalence import Compared, Prompts, warm_against_cold
from kv_serving.testing import KERNEL_NS, TINY_LAYERS, TINY_MODEL
from llm_models.serving.dtypes import TOLERANCES, TRAINED_TOLERANCES
from llm_models.serving.model import ServingModel

STEPS = 6
RANDOM = Prompts(shared=[(7 * i + 3) % TINY_MODEL.vocab_size for i in range(40)], decoy_head=[11] * 16,
                 suffixes=([20, 21, 22], [30, 31, 32, 33, 34], [40, 41]), filler=5)


class RandomModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.model = ServingModel(TINY_MODEL, TINY_LAYERS)
        cls.tolerance = TOLERANCES["float32"]

    def compare(self, model: object = None, **options: object) -> Compared:
        return warm_against_cold(model or self.model, RANDOM, STEPS, **self.tolerance, **options)  # type: ignore[arg-type]

    def test_a_warm_request_gives_the_cold_logits_at_every_step(self) -> None:
        for index in ("hash", "radix"):
            with self.subTest(index=index):
                result = self.compare(index=index)
                self.assertEqual(result.cached_tokens, 32)  # the shared prefix's two full blocks
                self.assertEqual(result.steps, STEPS + 1)
                self.assertTrue(result.equal, result)

    def test_a_hash_without_its_parent_is_caught(self) -> None:
        result = self.compare(pool_type=unchained)
        self.assertFalse(result.equal, result)
        self.assertGreater(result.max_abs_difference, 100 * result.allowed_there)

    def test_a_block_freed_while_still_held_is_caught(self) -> None:
        result = self.compare(pool_type=EagerFreePool)
        self.assertFalse(result.equal, result)
        self.assertGreater(result.worst_step, 0)  # the prefill was right; the overwritten blocks show in decode

    def test_positions_restarted_after_a_hit_are_caught(self) -> None:
        result = self.compare(model=restarting(self.model))
        self.assertFalse(result.equal, result)
        self.assertEqual(result.worst_step, 0)  # wrong from the first token on


class TrainedModel(unittest.TestCase):
    """SmolLM2-135M in float32, prompts from the repository's real text, held to the serving lab's trained float32
    tolerance (llm_models.serving.dtypes.TRAINED_TOLERANCES)."""

    @classmethod
    def setUpClass(cls) -> None:
        from kv_prefix.equivalence import trained_prompts
        from llm_models.llama.generate import smollm2
        from llm_models.serving.llama import served

        chat = smollm2()
        cls.model = served(chat.model, KERNEL_NS)
        cls.prompts = trained_prompts(chat)

    def test_a_warm_request_gives_the_cold_logits_at_every_step(self) -> None:
        result = warm_against_cold(self.model, self.prompts, STEPS, **TRAINED_TOLERANCES["float32"])
        self.assertGreaterEqual(result.cached_tokens, 64)
        self.assertTrue(result.equal, result)


class Bfloat16Hits(unittest.TestCase):
    """In bfloat16 a hit must not change a single bit: the tail after the cached blocks attends exactly as the same
    rows did in a cold prefill of the whole prompt. Found by a hostile pass: a one-token tail took the one-query
    path while the cold prefill computed that row in the fused kernel, and the fused kernel's result depends on
    how many query rows it takes at once, so greedy output parted on a hit. Tails of 1, 2 and 5 tokens."""

    def test_a_warm_prefill_gives_the_cold_logits_bit_for_bit(self) -> None:
        import torch

        from llm_models.llama.tiny import tiny_pair
        from llm_models.serving.llama import served

        model = served(tiny_pair(0, torch.bfloat16)[1], KERNEL_NS)
        shared = [(5 * i + 2) % 120 for i in range(32)]  # two full blocks of 16 (the tiny vocabulary: 128)
        for tail in ([9], [9, 17], [9, 17, 4, 40, 23]):
            with self.subTest(tail=len(tail)):
                prompts = Prompts(shared=shared, decoy_head=[3] * 16, suffixes=([7, 7], tail, [8]), filler=5)
                result = warm_against_cold(model, prompts, 0, atol=0.0, rtol=0.0)
                self.assertEqual(result.cached_tokens, 32)
                self.assertEqual(result.max_abs_difference, 0.0, result)


if __name__ == "__main__":
    unittest.main()
