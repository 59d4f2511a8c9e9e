"""The lab's decoder is GPT-2: the same weights in transformers give the same logits, cached and not."""

from __future__ import annotations

import unittest

import torch
from transformers import DynamicCache, StaticCache

from decode_bandwidth.cache import PreallocatedCache
from decode_bandwidth.compiled import CompiledDecoder
from decode_bandwidth.decode import cached_step_logits, full_step_logits
from decode_bandwidth.equivalence import check_modes, prefill_then_steps
from decode_bandwidth.hf import hf_cached_step_logits, hf_model
from decode_bandwidth.model import Decoder
from decode_bandwidth.testing import TOLERANCE, tiny_model, token_ids
from labkit.bench import EquivalenceError


class PositionResetDecoder(Decoder):
    """Bug: every call numbers its tokens from zero, ignoring the cached prefix."""

    def positions(self, offset: int, length: int, device: torch.device) -> torch.Tensor:
        return torch.arange(length, device=device)


class ParityWithTransformers(unittest.TestCase):
    def setUp(self) -> None:
        self.model = tiny_model(seed=3)
        self.reference = hf_model(self.model)
        self.ids = token_ids(self.model.config, batch=2, length=12, seed=4)

    def test_every_transformers_parameter_holds_our_weight(self) -> None:
        theirs = dict(self.reference.named_parameters())
        self.assertTrue(torch.equal(theirs["transformer.wte.weight"], self.model.tied_head.t()))
        self.assertEqual(self.reference.lm_head.weight.data_ptr(), self.reference.transformer.wte.weight.data_ptr())
        layer = self.model.layers[1]
        self.assertTrue(torch.equal(theirs["transformer.h.1.attn.c_attn.weight"], layer.qkv_weight))
        self.assertTrue(torch.equal(theirs["transformer.h.1.mlp.c_proj.bias"], layer.proj_bias))

    def test_full_sequence_logits_match_transformers(self) -> None:
        with torch.inference_mode():
            ours, theirs = full_step_logits(self.model, self.ids), self.reference(self.ids).logits
        torch.testing.assert_close(ours, theirs, **TOLERANCE)

    def test_cached_logits_match_transformers_dynamic_cache_at_every_step(self) -> None:
        with torch.inference_mode():
            for preallocated in (False, True):
                ours = cached_step_logits(self.model, self.ids, preallocated)
                theirs = hf_cached_step_logits(self.reference, self.ids)
                torch.testing.assert_close(ours, theirs, **TOLERANCE)

    def test_chunked_prefill_then_steps_match_transformers_static_cache(self) -> None:
        def theirs(chunk: torch.Tensor, cache: StaticCache) -> tuple[torch.Tensor, StaticCache]:
            return self.reference(chunk, past_key_values=cache, use_cache=True).logits, cache

        with torch.inference_mode():
            static = prefill_then_steps(theirs, self.ids, 7, StaticCache(config=self.reference.config,
                                                                         max_cache_len=12))
            ours = prefill_then_steps(self.model, self.ids, 7, PreallocatedCache(self.model.config, 2, 12))
        torch.testing.assert_close(ours, static, **TOLERANCE)

    def test_benchmark_check_accepts_every_mode_against_one_full_pass(self) -> None:
        checked = check_modes(self.model, CompiledDecoder.of(self.model), self.reference, prefix=7, steps=3, seed=5)
        self.assertEqual(sorted(checked["modes"]), ["hf-dynamic", "hf-full", "hf-static", "ours-compiled",
                                                    "ours-concat", "ours-prealloc"])
        self.assertTrue(all(entry["argmax_agrees_every_step"] for entry in checked["modes"].values()))

    def test_benchmark_check_refuses_a_decoder_that_resets_positions(self) -> None:
        broken = PositionResetDecoder(self.model.config)
        broken.load_state_dict(self.model.state_dict())
        with self.assertRaises(EquivalenceError):
            check_modes(broken, CompiledDecoder.of(broken), hf_model(broken), prefix=7, steps=3, seed=5)

    def test_dynamic_cache_after_our_steps_holds_the_same_keys(self) -> None:
        with torch.inference_mode():
            _, ours = self.model(self.ids)
            cache = DynamicCache(config=self.reference.config)
            self.reference(self.ids, past_key_values=cache, use_cache=True)
        for index, (keys, values) in enumerate(ours):
            torch.testing.assert_close(cache.layers[index].keys, keys, **TOLERANCE)
            torch.testing.assert_close(cache.layers[index].values, values, **TOLERANCE)


if __name__ == "__main__":
    unittest.main()
