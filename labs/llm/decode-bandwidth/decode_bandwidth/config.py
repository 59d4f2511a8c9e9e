"""A GPT-2-shaped decoder's configuration, with the presets the tests and the benchmark use."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch


@dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int = 50257
    width: int = 768
    layers: int = 12
    heads: int = 12  # query heads
    kv_heads: int | None = None  # key/value heads; None means one per query head, as GPT-2 has
    max_positions: int = 1024  # rows of the learned position table
    ffn_multiplier: int = 4  # GPT-2's feed-forward width is 4 x width
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02  # GPT-2's initializer_range
    dtype: torch.dtype = torch.float32
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)  # frozen: resolve the default once
        for name in ("vocab_size", "width", "layers", "heads", "kv_heads", "max_positions", "ffn_multiplier"):
            if getattr(self, name) < 1:
                raise ValueError(f"DecoderConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.width % self.heads:
            raise ValueError(f"DecoderConfig.width ({self.width}) must be divisible by heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"DecoderConfig.heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if not self.dtype.is_floating_point:
            raise ValueError(f"DecoderConfig.dtype must be a floating-point dtype, got {self.dtype}")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def hidden(self) -> int:
        return self.ffn_multiplier * self.width

    @property
    def residual_std(self) -> float:
        """GPT-2 scales the two residual projections of every layer by 1 / sqrt(2 x layers)."""
        return self.init_std / math.sqrt(2 * self.layers)

    @property
    def bytes_per_element(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def with_dtype(self, dtype: torch.dtype) -> DecoderConfig:
        return replace(self, dtype=dtype)

    def as_record(self) -> dict[str, object]:
        """JSON-ready values for the measurement record."""
        fields = asdict(self)
        fields["dtype"] = str(self.dtype).removeprefix("torch.")
        fields["head_dim"] = self.head_dim
        fields["bytes_per_element"] = self.bytes_per_element
        fields["tied_head"] = True  # GPT-2's output head is its token embedding
        return fields


PRESETS: dict[str, DecoderConfig] = {
    "gpt2-small": DecoderConfig(),
    # Two layers, width 32: every test runs in milliseconds.
    "tiny": DecoderConfig(vocab_size=101, width=32, layers=2, heads=4, max_positions=64),
}


def preset(name: str, **overrides: object) -> DecoderConfig:
    """A preset by name, with fields replaced (for example ``kv_heads`` or ``dtype``)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(sorted(PRESETS))}")
    return replace(PRESETS[name], **overrides)
