"""One pre-norm decoder block with random weights, usable with or without a KV cache.

``forward(ids, cache=None)`` is the full-prefix path: pass the whole prefix.
``forward(new_ids, cache)`` is the incremental path: pass only the new
token(s) and the (keys, values) returned by the previous call. Both paths run
the same layers; the model keeps no cache on itself, so a cache belongs to
the caller and to one request.

The `--8<--` comments mark the excerpt that the KV-cache article includes verbatim.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from llm_models.attention import causal_attention
from llm_models.inputs import check_token_ids, new_positions
from llm_models.toy.config import ModelConfig

# (keys, values), each (B, Hkv, T, D): batch, key/value heads, cached positions, head width.
Cache = tuple[Tensor, Tensor]


class KVStore(Protocol):
    """Key/value storage that writes in place instead of concatenating (the kv-storage lab's layouts)."""

    @property
    def length(self) -> int:
        """Positions stored so far: the offset of the next token."""

    def update(self, keys: Tensor, values: Tensor) -> Cache:
        """Store new (B, Hkv, T, D) entries; return every stored position, (B, Hkv, length, D)."""


class DecoderBlock(nn.Module):
    def __init__(self, config: ModelConfig = ModelConfig()) -> None:
        super().__init__()
        self.config = config
        width = config.width
        with torch.random.fork_rng(devices=[]):  # seed the weights without touching the caller's RNG
            torch.manual_seed(config.seed)
            self.token = nn.Embedding(config.vocab_size, width)
            self.position = nn.Embedding(config.max_positions, width)
            self.norm_attention = nn.LayerNorm(width)
            kv_width = config.kv_heads * config.head_dim
            self.qkv = nn.Linear(width, width + 2 * kv_width)  # fused query/key/value projection
            self.out = nn.Linear(width, width)
            self.norm_ffn = nn.LayerNorm(width)
            self.ffn = nn.Sequential(
                nn.Linear(width, config.ffn_multiplier * width),
                nn.GELU(),
                nn.Linear(config.ffn_multiplier * width, width),
            )
            self.norm_final = nn.LayerNorm(width)
            self.head = nn.Linear(width, config.vocab_size, bias=False)
        self.to(config.dtype)
        self.eval()

    # --8<-- [start:forward]
    def forward(self, ids: Tensor, cache: Cache | KVStore | None = None) -> tuple[Tensor, Cache | KVStore]:
        """Logits (B, T, vocab) for the T tokens in ``ids``, and the cache extended by them."""
        batch, length = check_token_ids(ids, self.config.vocab_size)
        offset = 0 if cache is None else self._check_cache(cache, batch)
        if offset + length > self.config.max_positions:
            raise ValueError(
                f"{offset} cached + {length} new positions = {offset + length}, "
                f"beyond the position capacity of {self.config.max_positions}"
            )
        x = self.token(ids) + self.position(self.positions(offset, length, ids.device))  # (B, T, C)
        q, k, v = self._split_heads(self.qkv(self.norm_attention(x)))  # (B, H, T, D), k/v (B, Hkv, T, D)
        if cache is None or isinstance(cache, tuple):  # concatenate: a new, longer pair every call
            keys, values = (k, v) if cache is None else (
                torch.cat((cache[0], k), dim=-2),  # (B, Hkv, offset + T, D)
                torch.cat((cache[1], v), dim=-2),
            )
            cache = (keys, values)
        else:  # a store writes in place and returns views of all offset + T positions
            keys, values = cache.update(k, v)
        attended = self.attend(q, keys, values, offset)  # (B, H, T, D)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, self.config.width))
        x = x + self.ffn(self.norm_ffn(x))
        return self.head(self.norm_final(x)), cache
    # --8<-- [end:forward]

    def positions(self, offset: int, length: int, device: torch.device) -> Tensor:
        """Absolute positions of the new tokens: they continue after the cached prefix (a method, so a broken
        variant can override it)."""
        return new_positions(offset, length, device)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, offset: int) -> Tensor:
        """Attention of the new queries over every key so far."""
        return causal_attention(q, k, v, offset)

    def _split_heads(self, projected: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        batch, length, _ = projected.shape
        heads, kv_heads, head_dim = self.config.heads, self.config.kv_heads, self.config.head_dim
        q, k, v = projected.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
        return (
            q.view(batch, length, heads, head_dim).transpose(1, 2),
            k.view(batch, length, kv_heads, head_dim).transpose(1, 2),
            v.view(batch, length, kv_heads, head_dim).transpose(1, 2),
        )

    def _check_cache(self, cache: Cache | KVStore, batch: int) -> int:
        """Return the cached length after checking the cache fits this model and batch."""
        if hasattr(cache, "update") and hasattr(cache, "length"):
            return cache.length  # a store checks shapes itself when it is updated
        if not isinstance(cache, tuple) or len(cache) != 2:
            raise ValueError("cache must be the (keys, values) tuple returned by forward")
        keys, values = cache
        if not (isinstance(keys, Tensor) and isinstance(values, Tensor)):
            raise ValueError(f"cache must hold two tensors (keys, values), got "
                             f"({type(keys).__name__}, {type(values).__name__})")
        if keys.shape != values.shape:
            raise ValueError(
                f"cache keys {tuple(keys.shape)} and values {tuple(values.shape)} differ in shape"
            )
        expected = (batch, self.config.kv_heads, self.config.head_dim)
        found = (keys.shape[0], keys.shape[1], keys.shape[-1]) if keys.dim() == 4 else None
        if found != expected:
            raise ValueError(
                f"cache shape {tuple(keys.shape)} does not fit (batch={batch}, "
                f"kv_heads={self.config.kv_heads}, T, head_dim={self.config.head_dim})"
            )
        weight = self.token.weight
        for name, tensor in (("keys", keys), ("values", values)):
            if tensor.dtype != weight.dtype or tensor.device != weight.device:
                raise ValueError(
                    f"cache {name} are {tensor.dtype} on {tensor.device}, "
                    f"the model is {weight.dtype} on {weight.device}"
                )
        return keys.shape[-2]
