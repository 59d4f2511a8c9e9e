"""Seeded tiny inputs and the formats every test runs through (random keys and values: kv_quant.entries)."""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.cache_formats import CacheFormat
from llm_models.toy.config import ModelConfig

# 4 query heads sharing 2 key/value heads of 32 features: one llama.cpp block per head row, the smallest
# head that every format accepts; 320 positions leave room for 300 one-token appends.
TINY = ModelConfig(vocab_size=64, width=128, heads=4, kv_heads=2, max_positions=320, seed=3)

# Each format once with parameters that make it work within a few dozen tokens: KIVI's residual is 16
# positions and its groups 16 long, so a 64-token test flushes whole groups several times.
FORMATS = (
    CacheFormat("float32"),
    CacheFormat("bfloat16"),
    CacheFormat("int8"),
    CacheFormat("int4", group_size=32),
    CacheFormat("kivi", bits=2, group_size=16, residual=16),
    CacheFormat("kivi", bits=4, group_size=16, residual=16),
    CacheFormat("q8_0"),
    CacheFormat("q4_0"),
    CacheFormat("q4_0", sides="keys"),  # one side quantized, the other float32
    CacheFormat("int8", sides="values"),
    CacheFormat("fp8", scale="tensor", calibration="none"),
    CacheFormat("fp8", scale="head", calibration="none"),
    CacheFormat("fp8", scale="tensor", calibration="amax"),
    CacheFormat("fp8", scale="head", calibration="amax"),
)


def random_ids(batch: int, length: int, seed: int, config: ModelConfig = TINY) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (batch, length), generator=generator)
