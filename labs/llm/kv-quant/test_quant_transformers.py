"""transformers' QuantizedCache layers on our data: which axis each backend's "axis 0" really groups along,
where a backend stores what ours does bit for bit, and what its residual keeps."""

from __future__ import annotations

import importlib.metadata
import unittest

import torch
from transformers.cache_utils import Fp8QuantizedLayer

from kv_quant.cache import make_cache
from kv_quant.entries import random_entries
from kv_quant.transformers_cache import group_members, keys_values, stored_bytes
from llm_models.cache_formats import CacheFormat


def installed(distribution: str) -> bool:
    """By its installed metadata, as transformers checks: a folder left behind by an uninstall is not enough."""
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


HAS_QUANTO, HAS_HQQ = installed("optimum-quanto"), installed("hqq")
BATCH, KV_HEADS, TOKENS, HEAD_DIM, GROUP = 1, 2, 320, 64, 64


def quanto(axis_key: int, axis_value: int, bits: int = 4):
    from transformers.cache_utils import QuantoQuantizedLayer
    return QuantoQuantizedLayer(nbits=bits, axis_key=axis_key, axis_value=axis_value, q_group_size=GROUP,
                                residual_length=128)


def hqq(axis: int):
    from transformers.cache_utils import HQQQuantizedLayer
    return HQQQuantizedLayer(nbits=4, axis_key=axis, axis_value=axis, q_group_size=GROUP, residual_length=128)


def sharing(make_layer) -> tuple[set[tuple[int, int]], set[int]]:
    """(head, token) pairs and channels of the key elements grouped with keys[0, 0, 0, 0]."""
    keys, values = random_entries(BATCH, KV_HEADS, TOKENS, HEAD_DIM, seed=0)
    members = group_members(make_layer, keys, values, (0, 0, 0, 0)).nonzero().tolist()
    return {(h, t) for _, h, t, _ in members}, {d for *_, d in members}


@unittest.skipUnless(HAS_QUANTO, "optimum-quanto is not installed (pip install optimum-quanto==0.2.7)")
class QuantoAxes(unittest.TestCase):
    def test_axis_0_the_default_groups_each_tokens_head_row_so_it_is_per_token(self) -> None:
        positions, channels = sharing(lambda: quanto(0, 0))
        self.assertEqual(positions, {(0, 0)})
        self.assertEqual(channels, set(range(1, HEAD_DIM)))
        layer = quanto(0, 0)
        layer.update(*random_entries(BATCH, KV_HEADS, TOKENS, HEAD_DIM, seed=1))
        self.assertEqual(tuple(layer._quantized_keys._scale.shape), (BATCH * KV_HEADS * TOKENS * HEAD_DIM // GROUP, 1))

    def test_axis_minus_1_groups_one_channel_over_consecutive_tokens_as_kivi_keys(self) -> None:
        positions, channels = sharing(lambda: quanto(-1, 0))
        self.assertEqual(positions, {(0, t) for t in range(1, GROUP)})
        self.assertEqual(channels, {0})

    def test_per_channel_groups_run_over_flattened_rows_so_a_group_spans_two_heads(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 96, HEAD_DIM, seed=2)  # 96 is not a multiple of 64
        members = group_members(lambda: quanto(-1, 0), keys, values, (0, 0, 64, 0)).nonzero().tolist()
        self.assertEqual({(h, t) for _, h, t, _ in members} | {(0, 64)},
                         {(0, t) for t in range(64, 96)} | {(1, t) for t in range(32)})

    def test_per_channel_refuses_a_prompt_whose_rows_are_not_a_multiple_of_the_group(self) -> None:
        layer = quanto(-1, 0)
        with self.assertRaisesRegex(ValueError, r"Group size \(64\) must be a divisor of \(200\)"):
            layer.update(*random_entries(BATCH, KV_HEADS, 100, HEAD_DIM, seed=3))

    def test_per_token_4_bit_stores_exactly_what_our_int4_in_groups_of_64_stores(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 192, HEAD_DIM, seed=4)
        layer = quanto(0, 0)
        layer.update(keys, values)
        ours = make_cache(CacheFormat("int4", group_size=GROUP), BATCH, KV_HEADS, HEAD_DIM)
        ours.append(keys, values)
        for theirs, mine in zip(keys_values(layer), ours.keys_values()):
            self.assertTrue(torch.equal(theirs, mine))
        self.assertEqual(stored_bytes(layer), ours.stored_bytes())  # packed nibbles, float32 scale and shift

    def test_the_residual_is_empty_after_the_prompt_and_after_every_flush(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 320, HEAD_DIM, seed=5)
        layer = quanto(-1, 0)
        ours = make_cache(CacheFormat("kivi", bits=4, group_size=GROUP, residual=128), BATCH, KV_HEADS, HEAD_DIM)
        layer.update(keys[:, :, :192], values[:, :, :192])
        ours.append(keys[:, :, :192], values[:, :, :192])
        self.assertEqual(layer.keys.numel(), 0)  # the whole prompt quantized at once
        self.assertEqual(ours.residual_keys.shape[2], 128)  # KIVI: one group of 64 left, the R most recent stay
        for t in range(192, 320):
            layer.update(keys[:, :, t : t + 1], values[:, :, t : t + 1])
            ours.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
        self.assertEqual(layer.keys.numel(), 0)  # flushed at 320: nothing recent is exact
        self.assertGreaterEqual(ours.residual_keys.shape[2], 128)


@unittest.skipUnless(HAS_HQQ, "hqq is not installed (pip install hqq==0.2.8.post1)")
class HqqAxes(unittest.TestCase):
    def test_hqq_axis_0_the_default_is_per_channel_over_tokens_strided_across_heads(self) -> None:
        positions, channels = sharing(lambda: hqq(0))
        stride = BATCH * KV_HEADS * TOKENS // GROUP  # HQQ reshapes the flat tensor to (G, -1): columns are groups
        rows = [stride * i for i in range(1, GROUP)]
        self.assertEqual(positions, {(row // TOKENS, row % TOKENS) for row in rows})
        self.assertEqual(channels, {0})
        self.assertIn(1, {h for h, _ in positions})  # the group holds tokens of both heads

    def test_hqq_axis_1_is_per_token(self) -> None:
        positions, channels = sharing(lambda: hqq(1))
        self.assertEqual(positions, {(0, 0)})
        self.assertEqual(channels, set(range(1, HEAD_DIM)))


class TransformersFp8(unittest.TestCase):
    def test_its_fp8_backend_stores_what_our_amax_calibrated_per_tensor_fp8_stores(self) -> None:
        keys, values = random_entries(BATCH, KV_HEADS, 64, HEAD_DIM, seed=6)
        layer = Fp8QuantizedLayer()
        ours = make_cache(CacheFormat("fp8", scale="tensor", calibration="amax"), BATCH, KV_HEADS, HEAD_DIM)
        layer.update(keys[:, :, :40], values[:, :, :40])
        ours.append(keys[:, :, :40], values[:, :, :40])
        for t in range(40, 64):  # later entries beyond the prompt's amax saturate in both
            layer.update(keys[:, :, t : t + 1], values[:, :, t : t + 1])
            ours.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
        for theirs, mine in zip(keys_values(layer), ours.keys_values()):
            self.assertTrue(torch.equal(theirs, mine))
        self.assertEqual(stored_bytes(layer), ours.stored_bytes())


if __name__ == "__main__":
    unittest.main()
