"""A tiny random Llama built by transformers from a seed: the decode lab's smoke runs and the tests use it.

Two layers of width 64 run a step in milliseconds, so a quick benchmark run and every mechanical test (parity
with transformers, caching, positions) exercise the same decoder code as the trained model at a fraction of
its cost.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from .config import LlamaDecoderConfig
from .model import LlamaDecoder

# 2 layers, width 64, 4 query heads sharing 2 key/value heads of 16 features: every test runs in milliseconds.
TINY = LlamaConfig(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 10_000.0}, tie_word_embeddings=True,
    # transformers' default 0.02 leaves attention almost uniform, so a position bug would barely show: 0.2 makes
    # scores sharp enough that every position matters.
    initializer_range=0.2, bos_token_id=None, eos_token_id=None, pad_token_id=None,
)


def tiny_reference(seed: int = 0, config: LlamaConfig = TINY) -> LlamaForCausalLM:
    """transformers' Llama with random weights drawn from ``seed``, the caller's RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("norm.weight"):  # ones by default: a swapped norm would then go unnoticed
                    parameter.copy_(1 + 0.2 * torch.randn_like(parameter))
    return model.eval()


def tiny_pair(seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[LlamaForCausalLM, LlamaDecoder]:
    """The tiny transformers model and the project's decoder on the same weights."""
    reference = tiny_reference(seed)
    return reference, LlamaDecoder(LlamaDecoderConfig.from_hf(reference.config, dtype), reference.state_dict())

