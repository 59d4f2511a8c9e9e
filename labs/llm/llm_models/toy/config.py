"""``ModelConfig``: the shape, dtype and seed of the toy decoder block (llm_models.toy.model)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 96  # random token ids, no tokenizer: small keeps the output head cheap
    width: int = 32  # 4 heads x 8 features: the article's worked numbers
    heads: int = 4  # query heads
    kv_heads: int | None = None  # key/value heads; None means one per query head (plain multi-head)
    max_positions: int = 512  # rows of the learned position table = longest prefix
    ffn_multiplier: int = 4  # hidden width of the feed-forward network = 4 x width
    dtype: torch.dtype = torch.float32
    seed: int = 0  # weights are random but reproducible

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)  # frozen: resolve the default once
        for name in ("vocab_size", "width", "heads", "kv_heads", "max_positions", "ffn_multiplier"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.width % self.heads:
            raise ValueError(
                f"ModelConfig.width ({self.width}) must be divisible by heads ({self.heads})"
            )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"ModelConfig.heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if not self.dtype.is_floating_point:
            raise ValueError(f"ModelConfig.dtype must be a floating-point dtype, got {self.dtype}")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def bytes_per_element(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def as_record(self) -> dict[str, object]:
        """The configuration as JSON-ready values, for the measurement record."""
        fields = asdict(self)
        fields["dtype"] = str(self.dtype).removeprefix("torch.")
        fields["head_dim"] = self.head_dim
        fields["bytes_per_element"] = self.bytes_per_element
        return fields
