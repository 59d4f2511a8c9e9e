"""The Llama decoder on a tiny random configuration: shapes, the cache, chunking and generation, in milliseconds.

transformers builds the weights from a seed (llm_models.llama.tiny.TINY: 2 layers, width 64, 4 query heads
sharing 2 key/value heads); the trained weights would add nothing to these claims.
"""

from __future__ import annotations

import dataclasses
import threading
import unittest

import torch
from transformers import LlamaConfig

from kv_cache.broken import RotaryResetDecoder
from llm_models.attention import causal_attention
from llm_models.llama.cache import LayerCache, new_cache
from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.decode import cached_step_logits, prefill
from llm_models.llama.generate import greedy_full_recompute, greedy_tokens
from llm_models.llama.model import LlamaDecoder, rms_norm, rotary_angles, rotate
from llm_models.llama.testing import random_ids
from llm_models.llama.tiny import TINY, tiny_pair

# float32, 2 layers, logits up to ~6: measured at most ~7e-6 between the cached path and transformers.
ATOL = 5e-5
RTOL = 1e-5


class TinyMatchesTransformers(unittest.TestCase):
    reference, model = tiny_pair(seed=0)
    ids = random_ids(batch=2, length=12, seed=0)

    def expected(self) -> torch.Tensor:
        with torch.inference_mode():
            return self.reference(self.ids).logits  # (B, T, vocab)

    def test_full_sequence_logits_equal_transformers(self) -> None:
        with torch.inference_mode():
            torch.testing.assert_close(self.model(self.ids), self.expected(), atol=ATOL, rtol=RTOL)

    def test_cached_logits_equal_transformers_at_every_step_for_a_batch_of_two(self) -> None:
        with torch.inference_mode():
            steps = cached_step_logits(self.model, self.ids)
        torch.testing.assert_close(steps, self.expected(), atol=ATOL, rtol=RTOL)

    def test_every_split_into_two_chunks_gives_the_logits_of_one_full_pass(self) -> None:
        expected = self.expected()
        for prefix in range(1, self.ids.shape[1]):
            with self.subTest(prefix=prefix), torch.inference_mode():
                cache = self.model.new_cache(2, self.ids.shape[1])
                pieces = [prefill(self.model, self.ids[:, :prefix], cache),
                          prefill(self.model, self.ids[:, prefix:], cache)]
                torch.testing.assert_close(torch.cat(pieces, dim=1), expected, atol=ATOL, rtol=RTOL)

    def test_weights_are_the_reference_tensors_or_one_stacked_copy_of_them(self) -> None:
        theirs, layer = self.reference.state_dict(), self.model.layers[1]
        self.assertEqual(layer.o.data_ptr(), theirs["model.layers.1.self_attn.o_proj.weight"].data_ptr())
        self.assertIs(self.model.head, self.model.embedding)  # tied: one matrix
        # q, k and v (gate and up) are stacked once into one matrix; each is a view of it, equal to the checkpoint's
        for ours, name in (("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"), ("v", "self_attn.v_proj"),
                           ("gate", "mlp.gate_proj"), ("up", "mlp.up_proj")):
            stacked = layer.qkv if ours in "qkv" else layer.gate_up
            self.assertEqual(getattr(layer, ours).untyped_storage().data_ptr(), stacked.untyped_storage().data_ptr())
            torch.testing.assert_close(getattr(layer, ours), theirs[f"model.layers.1.{name}.weight"], atol=0, rtol=0)

    def test_bfloat16_copy_stays_close_and_leaves_the_float32_weights_alone(self) -> None:
        half = LlamaDecoder(dataclasses.replace(self.model.config, dtype=torch.bfloat16), self.reference.state_dict())
        with torch.inference_mode():
            logits = half(self.ids)
        self.assertEqual(logits.dtype, torch.bfloat16)
        self.assertEqual(self.model.embedding.dtype, torch.float32)
        torch.testing.assert_close(logits.float(), self.expected(), atol=0.25, rtol=0.05)  # bf16 keeps 8 bits


class LayerHalves(unittest.TestCase):
    """A cache of another kind calls a layer's two halves around its own attention (the serving and window labs)."""

    def setUp(self) -> None:
        _, self.model = tiny_pair(seed=4)

    def test_project_rotate_attend_finish_is_the_layer(self) -> None:
        x = torch.randn(2, 5, TINY.hidden_size, generator=torch.Generator().manual_seed(0))
        cos, sin = rotary_angles(torch.arange(5), self.model.inverse_frequencies, torch.float32)
        layer = self.model.layers[0]
        with torch.inference_mode():
            q, k, v = layer.project(x)
            by_halves = layer.finish(x, causal_attention(rotate(q, cos, sin), rotate(k, cos, sin), v, 0))
            whole = layer(x, cos, sin, 0, None)
        torch.testing.assert_close(by_halves, whole, atol=0, rtol=0)

    def test_positions_per_row_rotate_each_row_as_if_it_were_alone(self) -> None:
        """Rows at different offsets in one batch (a serving step): (B, T) positions, each row its own."""
        q = torch.randn(2, 4, 3, 16, generator=torch.Generator().manual_seed(1))  # (B, H, T, D)
        positions = torch.tensor([[7, 8, 9], [0, 1, 2]])  # (B, T)
        cos, sin = rotary_angles(positions, self.model.inverse_frequencies, torch.float32)  # (B, T, D)
        together = rotate(q, cos[:, None], sin[:, None])
        for row in range(2):
            alone = rotate(q[row : row + 1], *rotary_angles(positions[row], self.model.inverse_frequencies,
                                                            torch.float32))
            torch.testing.assert_close(together[row : row + 1], alone, atol=0, rtol=0)
        self.assertFalse(torch.equal(together[0], together[1]))  # the offsets did turn the rows differently


class GroupedQueryCache(unittest.TestCase):
    reference, model = tiny_pair(seed=1)

    def test_the_cache_holds_only_the_key_value_heads_after_rotation(self) -> None:
        ids = random_ids(1, 5, seed=2)
        cache = self.model.new_cache(1, 8)
        with torch.inference_mode():
            prefill(self.model, ids, cache)
        for store in cache:
            self.assertEqual(tuple(store.keys.shape), (1, TINY.num_key_value_heads, 8, TINY.head_dim))  # 2, not 4
            self.assertEqual(store.length, 5)
            self.assertTrue(torch.equal(store.keys[:, :, 5:], torch.zeros(1, 2, 3, 16)))  # unwritten rows stay zero
        # Position 0 turns by angle 0, so its cached key is the projection itself; later positions are turned.
        with torch.inference_mode():
            h = torch.nn.functional.embedding(ids, self.model.embedding)
            normed = rms_norm(h, self.model.layers[0].attention_norm, self.model.config.rms_norm_eps)
            raw = torch.nn.functional.linear(normed, self.model.layers[0].k).view(1, 5, 2, 16).transpose(1, 2)
        torch.testing.assert_close(cache[0].keys[:, :, 0], raw[:, :, 0], atol=1e-6, rtol=1e-6)
        self.assertFalse(torch.allclose(cache[0].keys[:, :, 3], raw[:, :, 3], atol=1e-3))

    def test_every_layers_store_is_its_own_part_of_one_zeroed_allocation(self) -> None:
        stores = new_cache(layers=3, batch=1, kv_heads=2, capacity=4, head_dim=3)
        self.assertEqual(len({store.keys.untyped_storage().data_ptr() for store in stores}
                             | {store.values.untyped_storage().data_ptr() for store in stores}), 1)
        for index, store in enumerate(stores):  # none overlaps another: each keeps what was written into it
            self.assertEqual(float(store.keys.abs().sum() + store.values.abs().sum()), 0.0)
            store.update(torch.full((1, 2, 4, 3), 2.0 * index), torch.full((1, 2, 4, 3), 2.0 * index + 1))
        self.assertEqual([(store.keys.unique().tolist(), store.values.unique().tolist()) for store in stores],
                         [([0.0], [1.0]), ([2.0], [3.0]), ([4.0], [5.0])])
        with self.assertRaisesRegex(ValueError, "storage must be contiguous"):
            LayerCache(batch=1, kv_heads=2, capacity=4, head_dim=3, storage=torch.zeros(2, 1, 2, 5, 3))

    def test_update_writes_in_place_and_returns_views_of_every_stored_position(self) -> None:
        store = LayerCache(batch=1, kv_heads=2, capacity=4, head_dim=3)
        first = torch.ones(1, 2, 3, 3)
        keys, values = store.update(first, 2 * first)
        self.assertEqual((store.length, tuple(keys.shape)), (3, (1, 2, 3, 3)))
        self.assertEqual(keys.data_ptr(), store.keys.data_ptr())  # a view, not a new tensor
        keys, values = store.update(torch.full((1, 2, 1, 3), 5.0), torch.full((1, 2, 1, 3), 6.0))
        self.assertEqual(keys[0, 0, :, 0].tolist(), [1.0, 1.0, 1.0, 5.0])
        self.assertEqual(values[0, 1, :, 0].tolist(), [2.0, 2.0, 2.0, 6.0])

    def test_a_full_store_refuses_more_with_the_numbers(self) -> None:
        store = LayerCache(batch=1, kv_heads=2, capacity=4, head_dim=3)
        store.update(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3))
        with self.assertRaisesRegex(ValueError, r"3 cached \+ 2 new positions = 5, beyond the cache's capacity of 4"):
            store.update(torch.zeros(1, 2, 2, 3), torch.zeros(1, 2, 2, 3))
        with self.assertRaisesRegex(ValueError, r"new keys of shape \(1, 4, 1, 3\) do not fit"):
            store.update(torch.zeros(1, 4, 1, 3), torch.zeros(1, 4, 1, 3))

    def test_the_model_checks_capacity_before_any_layer_writes(self) -> None:
        cache = self.model.new_cache(1, 4)
        with self.assertRaisesRegex(ValueError, r"0 cached \+ 5 new positions = 5, beyond the capacity of 4"):
            self.model(random_ids(1, 5, seed=0), cache)
        self.assertEqual([store.length for store in cache], [0, 0])  # nothing half-written

    def test_a_cache_for_another_batch_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, r"cache \(batch, kv_heads, head_dim, dtype, device\) = \(1, 2, 16"):
            self.model(random_ids(2, 3, seed=0), self.model.new_cache(1, 8))


class RotaryResetIsCaught(unittest.TestCase):
    reference, model = tiny_pair(seed=0)
    ids = random_ids(batch=2, length=12, seed=0)

    def test_the_broken_decoder_agrees_without_a_cache_and_parts_at_the_first_cached_step(self) -> None:
        broken = RotaryResetDecoder(self.model.config, self.reference.state_dict())
        with torch.inference_mode():
            full = self.reference(self.ids).logits
            torch.testing.assert_close(broken(self.ids), full, atol=ATOL, rtol=RTOL)  # one pass: positions right
            steps = cached_step_logits(broken, self.ids)
        torch.testing.assert_close(steps[:, 0], full[:, 0], atol=ATOL, rtol=RTOL)  # step 0 is position 0 anyway
        for t in range(1, self.ids.shape[1]):
            self.assertGreater(float((steps[:, t] - full[:, t]).abs().max()), 100 * ATOL, f"step {t}")


class Generation(unittest.TestCase):
    reference, model = tiny_pair(seed=3)

    def test_greedy_with_the_cache_chooses_what_recomputing_everything_chooses(self) -> None:
        prompt = random_ids(1, 6, seed=4)[0].tolist()
        cached = list(greedy_tokens(self.model, prompt, 20))
        self.assertEqual(len(cached), 20)
        self.assertEqual(cached, greedy_full_recompute(self.model, prompt, 20))

    def test_greedy_equals_transformers_generate(self) -> None:
        prompt = random_ids(1, 6, seed=4)
        with torch.inference_mode():
            theirs = self.reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                                             do_sample=False, eos_token_id=None, pad_token_id=0)
        self.assertEqual(list(greedy_tokens(self.model, prompt[0].tolist(), 20)), theirs[0, 6:].tolist())

    def test_the_token_stream_may_be_resumed_on_a_new_thread_at_every_step(self) -> None:
        # The trained-model server advances the stream from worker threads. Inference mode is per thread: a mode
        # left on in one thread across a yield would leak into that thread's next request, and a cache made there
        # could then not be written from another thread.
        prompt = random_ids(1, 6, seed=4)[0].tolist()
        stream, tokens, failures = greedy_tokens(self.model, prompt, 8), [], []

        def advance() -> None:
            try:
                tokens.append(next(stream))
                if torch.is_inference_mode_enabled():
                    failures.append((len(tokens), "inference mode left on in the thread after the step"))
            except Exception as error:
                failures.append((len(tokens), error))

        for _ in range(8):
            worker = threading.Thread(target=advance)
            worker.start()
            worker.join()
        self.assertEqual(failures, [])
        self.assertEqual(tokens, list(greedy_tokens(self.model, prompt, 8)))

    def test_generation_ends_on_a_stop_id_and_includes_it(self) -> None:
        prompt = random_ids(1, 6, seed=4)[0].tolist()
        free = list(greedy_tokens(self.model, prompt, 20))
        stop = free[4]
        stopped = list(greedy_tokens(self.model, prompt, 20, frozenset({stop})))
        self.assertEqual(stopped, free[: free.index(stop) + 1])

    def test_a_prompt_and_limit_beyond_the_positions_are_refused_with_the_numbers(self) -> None:
        with self.assertRaisesRegex(ValueError, r"60 prompt \+ 5 new tokens = 65, beyond the model's 64 positions"):
            next(greedy_tokens(self.model, [1] * 60, 5))
        with self.assertRaisesRegex(ValueError, r"max_new_tokens must be at least 1, got 0"):
            next(greedy_tokens(self.model, [1], 0))


class ConfigAndWeightsAreChecked(unittest.TestCase):
    def test_the_tiny_config_maps_field_by_field(self) -> None:
        config = LlamaDecoderConfig.from_hf(TINY)
        self.assertEqual((config.width, config.layers, config.heads, config.kv_heads, config.head_dim, config.hidden,
                          config.vocab_size, config.rope_theta), (64, 2, 4, 2, 16, 96, 128, 10_000.0))

    def test_variants_the_decoder_does_not_implement_are_refused_by_name(self) -> None:
        for changes, message in [({"attention_bias": True}, r"attention_bias is True"),
                                 ({"hidden_act": "gelu"}, r"hidden_act is 'gelu'"),
                                 ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}},
                                  r"rope_type is 'linear'")]:
            with self.subTest(changes=changes), self.assertRaisesRegex(ValueError, message):
                LlamaDecoderConfig.from_hf(LlamaConfig(**(TINY.to_dict() | changes)))

    def test_heads_that_do_not_share_key_value_heads_evenly_are_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, r"heads \(4\) must be a multiple of kv_heads \(3\)"):
            LlamaDecoderConfig(heads=4, kv_heads=3)

    def test_a_missing_or_misshapen_tensor_is_named(self) -> None:
        reference, model = tiny_pair()
        state = dict(reference.state_dict())
        del state["model.layers.1.mlp.up_proj.weight"]
        with self.assertRaisesRegex(ValueError, r"missing \['model.layers.1.mlp.up_proj.weight'\] \(1\)"):
            LlamaDecoder(model.config, state)
        state = dict(reference.state_dict()) | {"model.norm.weight": torch.ones(63)}
        with self.assertRaisesRegex(ValueError, r"model.norm.weight has shape \(63,\), the config needs \(64,\)"):
            LlamaDecoder(model.config, state)


if __name__ == "__main__":
    unittest.main()
