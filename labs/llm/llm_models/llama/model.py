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
explicit name map ``LAYER_NAMES``: (out, in) matrices for ``F.linear``. In the
model's dtype the norms, o, down and the embedding are shared with the state
dict, not copied; q, k and v are stacked into one matrix and gate and up into
another (``fuse``), the layout every path multiplies by. The arithmetic follows transformers' Llama where rounding could
differ: RMSNorm in float32, the rotation angles in float32, cos and sin then
cast to the model's dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

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
    """x / sqrt(mean(x^2) + eps) * weight, normalised in float32 as transformers does, then cast back. In float32
    it is torch's fused ``F.rms_norm``: the same sums in one call where the formula written out takes six (a one-row
    step spends more on calls than on these sums; the formula is tested against it)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
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


# One product of a layer: the rows x (..., in) times one weight matrix (out, in), transposed -> (..., out). The
# reference decoder's is F.linear over its own matrix; the decode lab's fast twin and the server multiply by the
# kernel timed fastest for that matrix's kind, over float32 weights or int8 codes (llm_models.kernels).
Product = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class LayerShape:
    """What a layer's arithmetic needs of the config (hashable and tensor-free, so a compiled region guards on it)."""

    heads: int
    kv_heads: int
    head_dim: int
    eps: float

    @classmethod
    def of(cls, config: LlamaDecoderConfig) -> LayerShape:
        return cls(config.heads, config.kv_heads, config.head_dim, config.rms_norm_eps)


# --8<-- [start:halves]
def project(x: Tensor, norm: Tensor, qkv: Product, shape: LayerShape) -> tuple[Tensor, Tensor, Tensor]:
    """x (B, T, C) -> the new tokens' queries (B, H, T, D), keys and values (B, Hkv, T, D), unrotated: one product
    by q, k and v stacked in one matrix."""
    batch, length, _ = x.shape
    heads, kv_heads, dim = shape.heads, shape.kv_heads, shape.head_dim
    q, k, v = qkv(rms_norm(x, norm, shape.eps)).split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    return (q.view(batch, length, heads, dim).transpose(1, 2),
            k.view(batch, length, kv_heads, dim).transpose(1, 2),
            v.view(batch, length, kv_heads, dim).transpose(1, 2))


def finish(x: Tensor, attended: Tensor, o: Product, norm: Tensor, gate_up: Product, down: Product,
           shape: LayerShape) -> Tensor:
    """The residual stream x (B, T, C) after the attention's output (B, H, T, D) and the SwiGLU block: gate and up
    stacked in one matrix, so one product."""
    batch, length, _ = x.shape
    x = x + o(attended.transpose(1, 2).reshape(batch, length, -1))
    gate, up = gate_up(rms_norm(x, norm, shape.eps)).chunk(2, dim=-1)
    return x + down(F.silu(gate) * up)  # SwiGLU
# --8<-- [end:halves]


def fuse(weights: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """One layer's tensors in our names (LAYER_NAMES) -> as the layer holds them, its two norms and its four matrices
    (LAYER_KINDS): q, k and v stacked into one (H*D + 2*Hkv*D, C) matrix and gate and up into one (2F, C), so a layer
    makes four weight products instead of seven, each a longer stream of one matrix. The stacked matrices are new
    tensors (the others stay the caller's own); q, k, v, gate and up are then views of them."""
    return {"attention_norm": weights["attention_norm"], "qkv": torch.cat([weights["q"], weights["k"], weights["v"]]),
            "o": weights["o"], "mlp_norm": weights["mlp_norm"], "gate_up": torch.cat([weights["gate"], weights["up"]]),
            "down": weights["down"]}


class LlamaLayer(nn.Module):
    """Pre-norm: x + attention(rms_norm(x)), then x + swiglu(rms_norm(x)), written once for every path.

    Two halves around the attention, ``project`` and ``finish`` (module functions, above): every path that runs the
    trained Llama calls them, each with its own products and its own attention between. ``forward`` is the
    contiguous cache's path, with F.linear over the layer's own matrices: the reference every faster path is checked
    against. The decode lab's fast twin (decode_bandwidth.fast_llama) calls the same halves with its chosen kernels,
    eager or inside a compiled region; the server (llm_models.serving.llama) with its kernel table around the block
    pool; the window lab's stores around a ring buffer.
    """

    def __init__(self, config: LlamaDecoderConfig, weights: Mapping[str, Tensor]) -> None:
        """``weights`` in our names (LAYER_NAMES), as the checkpoint stores them; held stacked (``fuse``)."""
        super().__init__()
        self.config, self.shape = config, LayerShape.of(config)
        for name, tensor in fuse(weights).items():
            self.register_parameter(name, nn.Parameter(tensor, requires_grad=False))

    # The checkpoint's matrices, as views of the stacked ones (no copy).
    @property
    def q(self) -> Tensor:
        return self.qkv[: self.config.heads * self.config.head_dim]

    @property
    def k(self) -> Tensor:
        start = self.config.heads * self.config.head_dim
        return self.qkv[start : start + self.config.kv_width]

    @property
    def v(self) -> Tensor:
        return self.qkv[self.config.heads * self.config.head_dim + self.config.kv_width :]

    @property
    def gate(self) -> Tensor:
        return self.gate_up[: self.config.hidden]

    @property
    def up(self) -> Tensor:
        return self.gate_up[self.config.hidden :]

    # --8<-- [start:layer]
    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, offset: int,
                cache: LayerCache | None) -> Tensor:
        """x (B, T, C) -> (B, T, C); cos and sin (T, D) belong to the new tokens' absolute positions."""
        q, k, v = self.project(x)  # (B, H, T, D), k and v (B, Hkv, T, D)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # keys are cached after rotation: they never turn again
        keys, values = (k, v) if cache is None else cache.update(k, v)  # (B, Hkv, offset + T, D)
        attended = causal_attention(q, keys, values, offset)  # (B, H, T, D); each Hkv head serves H/Hkv queries
        return self.finish(x, attended)
    # --8<-- [end:layer]

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``project`` with F.linear over this layer's matrices."""
        return project(x, self.attention_norm, functools.partial(F.linear, weight=self.qkv), self.shape)

    def finish(self, x: Tensor, attended: Tensor) -> Tensor:
        """``finish`` with F.linear over this layer's matrices."""
        return finish(x, attended, functools.partial(F.linear, weight=self.o), self.mlp_norm,
                      functools.partial(F.linear, weight=self.gate_up), functools.partial(F.linear, weight=self.down),
                      self.shape)


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
