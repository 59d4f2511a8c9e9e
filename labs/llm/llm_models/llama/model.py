"""A Llama-family decoder: RMSNorm, rotary positions, grouped-query attention, SwiGLU, tied embeddings.

``forward(ids)`` runs a whole sequence with no cache (the naive computation,
kept as the reference); ``forward(new_ids, cache)`` runs only the new tokens
against every layer's stored keys and values. The positions of new tokens and
the attention over a cached prefix are the same code the KV-cache lab's toy
block runs (``llm_models.inputs.new_positions`` and
``llm_models.attention.causal_attention``), not copied: new tokens are
numbered from the cache's length, and each query sees the keys at or before
its absolute position.

Weights come from a transformers ``LlamaForCausalLM`` state dict, by the
explicit name map ``LAYER_NAMES``; they are used as stored there, (out, in)
matrices for ``F.linear``, and in the model's dtype they are shared, not
copied. The arithmetic follows transformers' Llama where rounding could
differ: RMSNorm in float32, the rotation angles in float32, cos and sin then
cast to the model's dtype.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import causal_attention
from ..inputs import check_token_ids, new_positions
from .cache import LayerCache, new_cache
from .config import LlamaDecoderConfig

# Ours -> transformers' names inside model.layers.<i>.; the names outside the layers are in LlamaDecoder.__init__.
LAYER_NAMES = {
    "attention_norm": "input_layernorm.weight",  # (C,)
    "q": "self_attn.q_proj.weight",  # (H*D, C)
    "k": "self_attn.k_proj.weight",  # (Hkv*D, C)
    "v": "self_attn.v_proj.weight",  # (Hkv*D, C)
    "o": "self_attn.o_proj.weight",  # (C, H*D)
    "mlp_norm": "post_attention_layernorm.weight",  # (C,)
    "gate": "mlp.gate_proj.weight",  # (F, C)
    "up": "mlp.up_proj.weight",  # (F, C)
    "down": "mlp.down_proj.weight",  # (C, F)
}


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32 as transformers does, then cast back."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def inverse_frequencies(config: LlamaDecoderConfig) -> Tensor:
    """(D/2,) float32: pair i of every head turns by theta^(-2i/D) radians per position."""
    exponents = torch.arange(0, config.head_dim, 2, dtype=torch.float32) / config.head_dim
    return 1.0 / (config.rope_theta ** exponents)


def rotary_angles(positions: Tensor, inverse: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin, (..., T, D), of the absolute ``positions`` (..., T): angles in float32, then cast to ``dtype``.

    One row of positions (T,) gives (T, D), shared by every sequence of a batch; positions per sequence (B, T)
    give (B, T, D): index them ``[:, None]`` to broadcast over the heads of (B, H, T, D).
    """
    angles = positions.float()[..., None] * inverse  # (..., T, D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (..., T, D): feature j pairs with feature j + D/2
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Turn each (j, j + D/2) feature pair of x (B, H, T, D) by its position's angle."""
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # (x1, x2) -> (-x2, x1)
    return x * cos + turned * sin


class LlamaLayer(nn.Module):
    """Pre-norm: x + attention(rms_norm(x)), then x + swiglu(rms_norm(x)).

    Two halves around the attention: ``project`` (the queries, keys and values of the new tokens, not yet
    rotated) and ``finish`` (the output projection, the residual and the SwiGLU block). ``forward`` is the
    contiguous cache's path between them; a cache that numbers, keeps or evicts its slots another way (the
    serving lab's block pool, the window lab's ring buffer) calls the two halves around its own attention.
    """

    def __init__(self, config: LlamaDecoderConfig, weights: Mapping[str, Tensor]) -> None:
        super().__init__()
        self.config = config
        for name, tensor in weights.items():
            self.register_parameter(name, nn.Parameter(tensor, requires_grad=False))

    # --8<-- [start:layer]
    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, offset: int,
                cache: LayerCache | None) -> Tensor:
        """x (B, T, C) -> (B, T, C); cos and sin (T, D) belong to the new tokens' absolute positions."""
        q, k, v = self.project(x)  # (B, H, T, D), k and v (B, Hkv, T, D)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # keys are cached after rotation: they never turn again
        keys, values = (k, v) if cache is None else cache.update(k, v)  # (B, Hkv, offset + T, D)
        attended = causal_attention(q, keys, values, offset)  # (B, H, T, D); each Hkv head serves H/Hkv queries
        return self.finish(x, attended)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, C) -> the new tokens' queries (B, H, T, D), keys and values (B, Hkv, T, D), unrotated."""
        config = self.config
        batch, length, _ = x.shape
        h = rms_norm(x, self.attention_norm, config.rms_norm_eps)
        q = F.linear(h, self.q).view(batch, length, config.heads, config.head_dim).transpose(1, 2)
        k = F.linear(h, self.k).view(batch, length, config.kv_heads, config.head_dim).transpose(1, 2)
        v = F.linear(h, self.v).view(batch, length, config.kv_heads, config.head_dim).transpose(1, 2)
        return q, k, v

    def finish(self, x: Tensor, attended: Tensor) -> Tensor:
        """The residual stream x (B, T, C) after the attention's output (B, H, T, D) and the SwiGLU block."""
        batch, length, _ = x.shape
        x = x + F.linear(attended.transpose(1, 2).reshape(batch, length, -1), self.o)
        h = rms_norm(x, self.mlp_norm, self.config.rms_norm_eps)
        return x + F.linear(F.silu(F.linear(h, self.gate)) * F.linear(h, self.up), self.down)  # SwiGLU
    # --8<-- [end:layer]


class LlamaDecoder(nn.Module):
    def __init__(self, config: LlamaDecoderConfig, state_dict: Mapping[str, Tensor]) -> None:
        """``state_dict`` in transformers' ``LlamaForCausalLM`` names; every tensor is checked against ``config``."""
        super().__init__()
        self.config = config
        expected = self.expected_shapes(config)
        tied_head = "lm_head.weight" if config.tie_embeddings else None
        unexpected = sorted(set(state_dict) - set(expected) - {tied_head})
        missing = sorted(set(expected) - set(state_dict))
        if missing or unexpected:
            raise ValueError(f"state dict does not fit the config: missing {missing[:3]} ({len(missing)}), "
                             f"unexpected {unexpected[:3]} ({len(unexpected)})")
        for name, shape in expected.items():
            if tuple(state_dict[name].shape) != shape:
                raise ValueError(f"{name} has shape {tuple(state_dict[name].shape)}, the config needs {shape}")

        def tensor(name: str) -> Tensor:
            return state_dict[name].detach().to(config.dtype)  # the same storage when the dtype already matches

        self.embedding = nn.Parameter(tensor("model.embed_tokens.weight"), requires_grad=False)  # (V, C)
        self.layers = nn.ModuleList(
            LlamaLayer(config, {ours: tensor(f"model.layers.{index}.{theirs}") for ours, theirs in LAYER_NAMES.items()})
            for index in range(config.layers)
        )
        self.norm_final = nn.Parameter(tensor("model.norm.weight"), requires_grad=False)  # (C,)
        # Tied: the head *is* the embedding, one matrix counted once; untied checkpoints carry their own.
        self.head = self.embedding if config.tie_embeddings else nn.Parameter(tensor("lm_head.weight"),
                                                                               requires_grad=False)  # (V, C)
        self.register_buffer("inverse_frequencies", inverse_frequencies(config), persistent=False)  # (D/2,) float32
        self.eval()

    @staticmethod
    def expected_shapes(config: LlamaDecoderConfig) -> dict[str, tuple[int, ...]]:
        """Every tensor the decoder reads, in transformers' names, with its shape."""
        c, f, q_width = config.width, config.hidden, config.heads * config.head_dim
        layer = {"attention_norm": (c,), "q": (q_width, c), "k": (config.kv_width, c), "v": (config.kv_width, c),
                 "o": (c, q_width), "mlp_norm": (c,), "gate": (f, c), "up": (f, c), "down": (c, f)}
        shapes = {"model.embed_tokens.weight": (config.vocab_size, c), "model.norm.weight": (c,)}
        for index in range(config.layers):
            shapes |= {f"model.layers.{index}.{LAYER_NAMES[ours]}": shape for ours, shape in layer.items()}
        if not config.tie_embeddings:
            shapes["lm_head.weight"] = (config.vocab_size, c)
        return shapes

    @property
    def device(self) -> torch.device:
        return self.embedding.device

    def positions(self, offset: int, length: int, device: torch.device) -> Tensor:
        """Absolute positions of the new tokens: they continue after the cached prefix (a method, so a broken
        variant can override it)."""
        return new_positions(offset, length, device)

    def new_cache(self, batch: int, capacity: int) -> list[LayerCache]:
        """Empty per-layer stores for ``batch`` sequences of up to ``capacity`` positions."""
        config = self.config
        if capacity > config.max_positions:
            raise ValueError(f"cache capacity {capacity} is beyond the model's {config.max_positions} positions")
        return new_cache(config.layers, batch, config.kv_heads, capacity, config.head_dim, config.dtype, self.device)

    # --8<-- [start:forward]
    def forward(self, ids: Tensor, cache: list[LayerCache] | None = None, *, last_only: bool = False) -> Tensor:
        """Logits (B, T, vocab) for the T tokens in ``ids`` ((B, 1, vocab) with ``last_only``); extends ``cache``."""
        batch, length = check_token_ids(ids, self.config.vocab_size)
        offset = self._offset(cache, batch, length)
        positions = self.positions(offset, length, ids.device)  # offset .. offset + T - 1
        cos, sin = rotary_angles(positions, self.inverse_frequencies, self.config.dtype)  # (T, D) each
        x = F.embedding(ids, self.embedding)  # (B, T, C)
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, offset, None if cache is None else cache[index])
        if last_only:
            x = x[:, -1:]
        return F.linear(rms_norm(x, self.norm_final, self.config.rms_norm_eps), self.head)  # (B, T, V)
    # --8<-- [end:forward]

    def _offset(self, cache: list[LayerCache] | None, batch: int, length: int) -> int:
        """The cached length, after checking that the cache fits this model, this batch and ``length`` more."""
        config = self.config
        if cache is None:
            offset, capacity = 0, config.max_positions
        else:
            if not isinstance(cache, list) or len(cache) != config.layers:
                found = len(cache) if isinstance(cache, list) else type(cache).__name__
                raise ValueError(f"cache must be a list of {config.layers} LayerCache stores, got {found}")
            lengths = sorted({store.length for store in cache})
            if len(lengths) != 1:
                raise ValueError(f"cache layers hold different lengths {lengths}")
            first = cache[0].keys
            expected = (batch, config.kv_heads, config.head_dim, config.dtype, self.device)
            found = (first.shape[0], first.shape[1], first.shape[-1], first.dtype, first.device)
            if found != expected:
                raise ValueError(f"cache (batch, kv_heads, head_dim, dtype, device) = {found}, "
                                 f"the model and ids need {expected}")
            offset, capacity = lengths[0], min(cache[0].capacity, config.max_positions)
        if offset + length > capacity:
            raise ValueError(f"{offset} cached + {length} new positions = {offset + length}, "
                             f"beyond the capacity of {capacity}")
        return offset
