"""What only the tests use: seeded tiny models and the references each cache is proven against.

Every reference computes from tensor indices over the whole sequence at once, with no slot and no metadata,
so a cache that numbers, keeps or masks its slots wrongly cannot agree with it by sharing the mistake.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import LlamaConfig

from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.model import LlamaDecoder, rms_norm, rotary_angles, rotate
from llm_models.llama.tiny import TINY, tiny_reference
from llm_models.toy.config import ModelConfig
from llm_models.toy.model import DecoderBlock

TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}  # float32: the same sums in another order
# 2 layers, 4 query heads sharing 2 key/value heads of 16 features, 96 positions: decoding runs far past a
# window of 8 in a few hundred milliseconds.
LONG = LlamaConfig(**{**TINY.to_dict(), "max_position_embeddings": 256})
ONE_LAYER = LlamaConfig(**{**LONG.to_dict(), "num_hidden_layers": 1})
TOY = ModelConfig(vocab_size=64, width=32, heads=4, kv_heads=2, max_positions=128, seed=5)


def tiny_llama(seed: int = 0, config: LlamaConfig = LONG, dtype: torch.dtype = torch.float32) -> LlamaDecoder:
    reference = tiny_reference(seed, config)
    return LlamaDecoder(LlamaDecoderConfig.from_hf(reference.config, dtype), reference.state_dict())


def random_ids(length: int, seed: int, vocab_size: int = TINY.vocab_size, batch: int = 1) -> Tensor:
    return torch.randint(0, vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


def masked_logits(model: LlamaDecoder, ids: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
    """Logits (B, T, V) of the whole row at once: ``mask`` (T, T) says which index sees which, ``positions``
    (T,) rotate them; the Llama's layers through their two halves, with plain fused attention between."""
    cos, sin = rotary_angles(positions, model.inverse_frequencies, model.config.dtype)  # (T, D)
    x = F.embedding(ids, model.embedding)
    for layer in model.layers:
        q, k, v = layer.project(x)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
        x = layer.finish(x, attended)
    return F.linear(rms_norm(x, model.norm_final, model.config.rms_norm_eps), model.head)


def band_mask(length: int, window: int) -> Tensor:
    """(T, T) on tensor indices: index i sees i - window + 1 .. i."""
    index = torch.arange(length)
    return (index[None, :] <= index[:, None]) & (index[:, None] - index[None, :] < window)


class BandBlock(DecoderBlock):
    """The toy block over the whole sequence with a band of ``window`` on tensor indices: the ring buffer's
    reference on the toy block (the same seeded weights as a DecoderBlock of the same config)."""

    def __init__(self, config: ModelConfig, window: int) -> None:
        super().__init__(config)
        self.window = window

    def attend(self, q: Tensor, k: Tensor, v: Tensor, offset: int) -> Tensor:
        if offset:
            raise ValueError("the band reference runs whole sequences, with no cache")
        return F.scaled_dot_product_attention(q, k, v, attn_mask=band_mask(q.shape[2], self.window),
                                              enable_gqa=q.shape[1] != k.shape[1])


def kept_attention(q: Tensor, keys: Tensor, values: Tensor, inverse: Tensor) -> Tensor:
    """StreamingLLM's rule written out for one query: the n kept keys (B, Hkv, n, D), unrotated and in cache
    order, rotated at 0 .. n - 1, the query (B, H, 1, D) at n - 1, every kept key visible -> (B, H, 1, D)."""
    count = keys.shape[2]
    cos, sin = rotary_angles(torch.arange(count), inverse, torch.float32)  # (n, D)
    keys, q = rotate(keys.float(), cos, sin), rotate(q.float(), cos[-1:], sin[-1:])
    group = q.shape[1] // keys.shape[1]
    keys, values = keys.repeat_interleave(group, dim=1), values.float().repeat_interleave(group, dim=1)
    scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, 1, n)
    return scores.softmax(dim=-1) @ values
