"""The decoder: GPT-2's shape and init, the first lab's offset rule, both caches equal to the full pass."""

from __future__ import annotations

import math
import unittest

import torch

import llm_models.attention
import llm_models.toy.model
from decode_bandwidth import model as model_module
from decode_bandwidth.bandwidth import weight_bytes
from decode_bandwidth.cache import PreallocatedCache
from decode_bandwidth.config import DecoderConfig, preset
from decode_bandwidth.decode import cached_step_logits, full_step_logits, greedy_generate
from decode_bandwidth.model import Decoder
from decode_bandwidth.testing import TOLERANCE, tiny_model, token_ids

GPT2_SMALL_PARAMETERS = 124_439_808  # GPT-2 small with its head tied to the token embedding


class Shape(unittest.TestCase):
    def test_gpt2_small_preset_has_gpt2_small_dimensions_and_parameter_count(self) -> None:
        config = preset("gpt2-small")
        self.assertEqual((config.layers, config.width, config.heads, config.vocab_size, config.max_positions),
                         (12, 768, 12, 50257, 1024))
        positions = config.max_positions * config.width  # the one table weight_bytes leaves out
        self.assertEqual(weight_bytes(config) // 4 + positions, GPT2_SMALL_PARAMETERS)

    def test_weights_follow_gpt2_init_scale(self) -> None:
        model = Decoder(DecoderConfig(vocab_size=512, width=256, layers=8, heads=4, max_positions=64))
        layer = model.layers[3]
        self.assertAlmostEqual(float(layer.fc_weight.std()), 0.02, delta=0.0005)
        self.assertAlmostEqual(float(layer.proj_weight.std()), 0.02 / math.sqrt(16), delta=0.0002)
        self.assertAlmostEqual(float(layer.out_weight.std()), 0.02 / math.sqrt(16), delta=0.0002)
        self.assertEqual(float(layer.qkv_bias.abs().max()), 0.0)
        self.assertTrue(torch.equal(layer.norm_mlp_weight, torch.ones(256)))

    def test_same_seed_gives_the_same_weights_and_another_seed_does_not(self) -> None:
        a, b, c = (Decoder(preset("tiny", seed=s)) for s in (1, 1, 2))
        self.assertTrue(all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters())))
        self.assertFalse(torch.equal(a.layers[0].qkv_weight, c.layers[0].qkv_weight))

    def test_seeding_leaves_the_callers_random_state_alone(self) -> None:
        torch.manual_seed(7)
        expected = torch.rand(3)
        torch.manual_seed(7)
        Decoder(preset("tiny"))
        torch.testing.assert_close(torch.rand(3), expected)

    def test_offset_rule_and_attention_are_the_first_labs_own(self) -> None:
        self.assertIs(Decoder.positions, llm_models.toy.model.DecoderBlock.positions)
        self.assertIs(model_module.causal_attention, llm_models.attention.causal_attention)


class CachedEqualsFull(unittest.TestCase):
    def check_step_by_step(self, model: Decoder, preallocated: bool) -> None:
        ids = token_ids(model.config, batch=2, length=12, seed=1)
        with torch.inference_mode():
            cache = PreallocatedCache(model.config, 2, 12) if preallocated else None
            for t in range(ids.shape[1]):
                logits, cache = model(ids[:, t : t + 1], cache)
                full = model(ids[:, : t + 1])[0][:, -1]
                torch.testing.assert_close(logits[:, -1], full, **TOLERANCE, msg=f"step {t}")
                stored = cache.length if preallocated else cache[0][0].shape[-2]
                self.assertEqual(stored, t + 1)

    def test_concatenating_cache_equals_the_full_pass_at_every_step(self) -> None:
        self.check_step_by_step(tiny_model(seed=1), preallocated=False)

    def test_preallocated_cache_equals_the_full_pass_at_every_step(self) -> None:
        self.check_step_by_step(tiny_model(seed=1), preallocated=True)

    def test_grouped_query_heads_cache_fewer_heads_and_still_equal_the_full_pass(self) -> None:
        model = tiny_model(seed=2, kv_heads=2)
        self.check_step_by_step(model, preallocated=True)
        ids = token_ids(model.config, batch=2, length=5)
        with torch.inference_mode():
            _, cache = model(ids)
        self.assertEqual(tuple(cache[1][0].shape), (2, 2, 5, model.config.head_dim))

    def test_a_position_reset_is_caught_at_step_one(self) -> None:
        class Reset(Decoder):
            def positions(self, offset: int, length: int, device: torch.device) -> torch.Tensor:
                return torch.arange(length, device=device)

        model = tiny_model(seed=1)
        broken = Reset(model.config)
        broken.load_state_dict(model.state_dict())
        ids = token_ids(model.config, batch=2, length=4, seed=1)
        with torch.inference_mode():
            full, cached = full_step_logits(broken, ids), cached_step_logits(broken, ids)
        torch.testing.assert_close(cached[:, 0], full[:, 0], **TOLERANCE)
        self.assertGreater(float((cached[:, 1] - full[:, 1]).abs().max()), 100 * TOLERANCE["atol"])

    def test_greedy_generation_picks_the_argmax_of_the_full_pass_every_time(self) -> None:
        model = tiny_model(seed=4)
        prompt = token_ids(model.config, batch=2, length=6, seed=3)
        with torch.inference_mode():
            seen: list[torch.Tensor] = []
            chosen = greedy_generate(model, prompt, 5, seen.append)
            full = model(torch.cat((prompt, chosen), dim=1))[0]  # (B, 11, vocab)
        self.assertEqual(len(seen), 5)
        self.assertTrue(torch.equal(chosen, full[:, 5:10].argmax(-1)))

    def test_a_preallocated_cache_can_be_rewound_and_repeats_the_same_step(self) -> None:
        model = tiny_model(seed=5)
        ids = token_ids(model.config, batch=1, length=8)
        cache = PreallocatedCache(model.config, 1, 8)
        with torch.inference_mode():
            model(ids[:, :7], cache)
            first = model(ids[:, 7:], cache)[0]
            cache.rewind(7)
            again = model(ids[:, 7:], cache)[0]
        self.assertTrue(torch.equal(first, again))
        self.assertEqual(cache.length, 8)


class OneAllocation(unittest.TestCase):
    def test_every_layers_keys_and_values_are_disjoint_zeroed_views_of_one_buffer(self) -> None:
        config = DecoderConfig(vocab_size=64, width=32, layers=3, heads=2, max_positions=16)
        cache = PreallocatedCache(config, batch=2, capacity=8)
        every = [*cache.keys, *cache.values]
        self.assertEqual({t.untyped_storage().data_ptr() for t in every}, {every[0].untyped_storage().data_ptr()})
        self.assertEqual([tuple(t.shape) for t in every], [(2, config.kv_heads, 8, config.head_dim)] * 6)
        self.assertTrue(all(t.is_contiguous() and not t.any() for t in every))
        cache.keys[1].fill_(1.0)  # one layer's keys: nothing else moves
        self.assertEqual([bool(t.any()) for t in every], [False, True, False, False, False, False])


class BadInput(unittest.TestCase):
    def setUp(self) -> None:
        self.model = tiny_model()

    def assert_refused(self, fragment: str, call: object, *args: object, **kwargs: object) -> None:
        with self.assertRaises(ValueError) as caught:
            call(*args, **kwargs)  # type: ignore[operator]
        self.assertIn(fragment, str(caught.exception))

    def test_ids_outside_the_vocabulary_are_refused_with_their_values(self) -> None:
        self.assert_refused("got 0 to 101", self.model, torch.tensor([[0, 101]]))

    def test_float_ids_and_one_dimensional_ids_are_refused(self) -> None:
        self.assert_refused("dtype torch.float32", self.model, torch.zeros(1, 2))
        self.assert_refused("2-D", self.model, torch.zeros(3, dtype=torch.long))

    def test_positions_beyond_the_table_are_refused(self) -> None:
        _, cache = self.model(torch.zeros(1, 60, dtype=torch.long))
        self.assert_refused("60 cached + 5 new positions = 65, beyond the position capacity of 64",
                            self.model, torch.zeros(1, 5, dtype=torch.long), cache)

    def test_a_cache_of_another_batch_is_refused(self) -> None:
        _, cache = self.model(torch.zeros(2, 3, dtype=torch.long))
        self.assert_refused("does not fit (batch=1", self.model, torch.zeros(1, 1, dtype=torch.long), cache)

    def test_writing_past_a_preallocated_capacity_is_refused(self) -> None:
        cache = PreallocatedCache(self.model.config, 1, 4)
        self.model(torch.zeros(1, 4, dtype=torch.long), cache)
        self.assert_refused("4 stored + 1 new positions = 5, beyond the preallocated capacity of 4",
                            self.model, torch.zeros(1, 1, dtype=torch.long), cache)

    def test_bad_configurations_and_unknown_presets_are_refused(self) -> None:
        self.assert_refused("must be divisible by heads (5)", DecoderConfig, 10, 32, 1, 5)
        self.assert_refused("multiple of kv_heads (3)", preset, "tiny", kv_heads=3)
        self.assert_refused("unknown preset 'gpt5'", preset, "gpt5")


if __name__ == "__main__":
    unittest.main()
