"""The real-model table: its configurations recount their published weights, and the one byte function
that prices them agrees with the bytes of real cache tensors in every format the page shows."""

from __future__ import annotations

import tomllib
import unittest

import torch

from kv_cache.memory import GROUP, KV_FORMATS, whole_cache_bytes
from llm_models.kv_bytes import cache_storage_bytes, kv_bytes_per_token, tokens_that_fit
from llm_models.published import MODELS_FILE
from llm_models.toy.config import ModelConfig
from llm_models.toy.model import DecoderBlock

MODELS = tomllib.loads(MODELS_FILE.read_text())["model"]


def weights(model: dict) -> int:
    """Parameters from the configuration: embeddings, per-layer attention and MLP, norms (and GPT-2's biases)."""
    hidden, kv_width = model["hidden"], model["kv_heads"] * model["head_dim"]
    embeddings = model["vocab"] * hidden * (1 if model["tied_embeddings"] else 2)
    if model["family"] == "gpt2":  # fused qkv, learned positions, LayerNorm weight and bias, biases everywhere
        layer = (hidden * 3 * hidden + 3 * hidden) + (hidden * hidden + hidden) + 2 * 2 * hidden \
            + (hidden * model["intermediate"] + model["intermediate"]) + (model["intermediate"] * hidden + hidden)
        return embeddings + model["positions"] * hidden + model["layers"] * layer + 2 * hidden
    layer = 2 * hidden * hidden + 2 * hidden * kv_width + 3 * hidden * model["intermediate"] + 2 * hidden
    return embeddings + model["layers"] * layer + hidden  # SwiGLU MLP, RMSNorm weights, no biases


def cache_tensors(batch: int, kv_heads: int, length: int, head_dim: int, fmt: str) -> list[torch.Tensor]:
    """One layer's keys and values laid out as each format stores them."""
    shape = (batch, kv_heads, length, head_dim)
    groups = (batch, kv_heads, length, head_dim // GROUP)
    packed = (batch, kv_heads, length, head_dim // 2)  # two 4-bit codes per byte
    if fmt == "q8_0":  # llama.cpp's block_q8_0: 32 int8 codes and one fp16 scale
        return [torch.zeros(shape, dtype=torch.int8), torch.zeros(groups, dtype=torch.float16)] * 2
    if fmt == "q4_0":  # block_q4_0: 32 packed 4-bit codes and one fp16 scale
        return [torch.zeros(packed, dtype=torch.uint8), torch.zeros(groups, dtype=torch.float16)] * 2
    if fmt == "int4-g32":  # packed 4-bit codes, a float32 scale and a float32 zero point per group of 32
        return [torch.zeros(packed, dtype=torch.uint8), torch.zeros(groups), torch.zeros(groups)] * 2
    dtype = {"float32": torch.float32, "float16": torch.float16, "fp8": torch.float8_e4m3fn}[fmt]
    return [torch.zeros(shape, dtype=dtype)] * 2


class PublishedConfigurations(unittest.TestCase):
    def test_each_configuration_recounts_its_published_parameters(self) -> None:
        for model in MODELS:
            with self.subTest(model=model["name"]):
                self.assertEqual(weights(model), model["parameters"])
                self.assertEqual(model["head_dim"] * model["heads"], model["hidden"])
                self.assertEqual(model["heads"] % model["kv_heads"], 0)

    def test_the_table_names_the_models_the_page_promises_with_a_source_each(self) -> None:
        names = [model["name"] for model in MODELS]
        for name in ("GPT-2 small", "SmolLM2-135M", "Llama-3-8B", "Llama-3-70B", "Mistral-7B"):
            self.assertIn(name, names)
        for model in MODELS:
            self.assertTrue(model["config"].startswith(f"https://huggingface.co/{model['repo']}/"), model["name"])


class BytesPerToken(unittest.TestCase):
    def test_every_format_equals_the_bytes_of_cache_tensors_stored_that_way(self) -> None:
        for model in MODELS:
            for fmt, bits in KV_FORMATS.items():
                with self.subTest(model=model["name"], format=fmt):
                    layer = cache_tensors(2, model["kv_heads"], 3, model["head_dim"], fmt)
                    counted = model["layers"] * sum(t.numel() * t.element_size() for t in layer)
                    per_token = kv_bytes_per_token(model["layers"], model["kv_heads"], model["head_dim"], bits)
                    self.assertEqual(per_token * 2 * 3, counted)

    def test_the_labs_own_cache_is_priced_by_the_same_function(self) -> None:
        for kv_heads, dtype in ((4, torch.float32), (2, torch.float64), (1, torch.bfloat16)):
            with self.subTest(kv_heads=kv_heads, dtype=dtype):
                config = ModelConfig(kv_heads=kv_heads, dtype=dtype)
                ids = torch.randint(0, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
                with torch.inference_mode():
                    _, cache = DecoderBlock(config)(ids)
                bits = 8 * config.bytes_per_element
                self.assertEqual(kv_bytes_per_token(1, kv_heads, config.head_dim, bits) * 2 * 9,
                                 cache_storage_bytes(cache))

    def test_llama_3_8b_keeps_128_kib_per_token_in_float16(self) -> None:
        self.assertEqual(kv_bytes_per_token(32, 8, 128, KV_FORMATS["float16"]), 128 * 1024)
        self.assertEqual(kv_bytes_per_token(32, 8, 128, KV_FORMATS["q4_0"]), 36 * 1024)
        self.assertEqual(kv_bytes_per_token(32, 8, 128, KV_FORMATS["q8_0"]), 68 * 1024)
        self.assertEqual(kv_bytes_per_token(32, 8, 128, KV_FORMATS["int4-g32"]), 48 * 1024)

    def test_a_whole_cache_counts_whole_sequences_and_tokens(self) -> None:
        self.assertEqual(whole_cache_bytes(256.0, 8, 1024), 256 * 8 * 1024)
        for batch, tokens, wrong in ((0.5, 8, r"batch must be a whole number, got 0\.5"),
                                     (8, 2.0, r"tokens must be a whole number, got 2\.0"),
                                     (True, 8, r"batch must be a whole number, got True"),
                                     (0, 8, r"batch must be at least 1, got 0")):
            with self.subTest(batch=batch, tokens=tokens), self.assertRaisesRegex(ValueError, wrong):
                whole_cache_bytes(256.0, batch, tokens)

    def test_tokens_that_fit_leave_the_weights_room_and_never_go_negative(self) -> None:
        self.assertEqual(tokens_that_fit(1000, 100, 64), 14)
        self.assertEqual(tokens_that_fit(100, 1000, 64), 0)
        with self.assertRaisesRegex(ValueError, r"kv_heads must be positive, got 0"):
            kv_bytes_per_token(1, 0, 64, 16)


if __name__ == "__main__":
    unittest.main()
