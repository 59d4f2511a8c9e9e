"""The shape of a Llama-family decoder; the defaults are SmolLM2-135M's, the trained model the labs ship."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from transformers import LlamaConfig


@dataclass(frozen=True)
class LlamaDecoderConfig:
    vocab_size: int = 49_152  # SmolLM2's tokenizer; the tied output head is this many rows of width
    width: int = 576  # the residual stream: 9 query heads x 64 features
    layers: int = 30
    heads: int = 9  # query heads
    kv_heads: int = 3  # key/value heads, each shared by 3 query heads: the cache holds a third of multi-head's
    head_dim: int = 64  # features per head; RoPE rotates them in 32 pairs
    hidden: int = 1536  # SwiGLU's inner width: gate and up are (hidden, width), down is (width, hidden)
    rope_theta: float = 100_000.0  # RoPE's base: pair i turns by position * theta^(-2i / head_dim) radians
    # Added to the mean square before the reciprocal square root: 1e-5 as the GGUF file stores it, in float32.
    rms_norm_eps: float = 9.999999747378752e-06
    max_positions: int = 8192  # the trained context; RoPE has no position table, so this is only a bound
    tie_embeddings: bool = True  # the output head is the token embedding: one (vocab, width) matrix, read twice
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        for name in ("vocab_size", "width", "layers", "heads", "kv_heads", "head_dim", "hidden", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"LlamaDecoderConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise ValueError(f"LlamaDecoderConfig.heads ({self.heads}) must be a multiple of "
                             f"kv_heads ({self.kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"LlamaDecoderConfig.head_dim ({self.head_dim}) must be even: RoPE rotates pairs")
        if not self.dtype.is_floating_point:
            raise ValueError(f"LlamaDecoderConfig.dtype must be a floating-point dtype, got {self.dtype}")

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @classmethod
    def from_hf(cls, config: LlamaConfig, dtype: torch.dtype = torch.float32) -> LlamaDecoderConfig:
        """The same shape as transformers' ``LlamaConfig``; refuses the variants this decoder does not implement."""
        rope = dict(config.rope_parameters or {})
        unsupported = {
            "rope_type": (rope.get("rope_type", "default"), "default"),
            "hidden_act": (config.hidden_act, "silu"),
            "attention_bias": (bool(config.attention_bias), False),
            "mlp_bias": (bool(config.mlp_bias), False),
        }
        for name, (found, needed) in unsupported.items():
            if found != needed:
                raise ValueError(f"LlamaConfig.{name} is {found!r}; this decoder implements only {needed!r}")
        return cls(
            vocab_size=config.vocab_size, width=config.hidden_size, layers=config.num_hidden_layers,
            heads=config.num_attention_heads, kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
            hidden=config.intermediate_size, rope_theta=float(rope["rope_theta"]), rms_norm_eps=config.rms_norm_eps,
            max_positions=config.max_position_embeddings, tie_embeddings=bool(config.tie_word_embeddings),
            dtype=dtype,
        )

    def as_record(self) -> dict[str, object]:
        """The configuration as JSON-ready values, for a measurement record."""
        fields = asdict(self)
        fields["dtype"] = str(self.dtype).removeprefix("torch.")
        return fields
