"""The project's Llama decoder over a policy's cache: each layer's two halves around the store's attention.

``LlamaLayer.project`` gives the new tokens' unrotated queries, keys and values, the store rotates and
attends as its policy says, ``LlamaLayer.finish`` adds the output projection, the residual and the SwiGLU
block: the same weights and arithmetic as ``LlamaDecoder.forward``, with the contiguous cache's offset rule
replaced by positions the caller or the cache states.

``WindowCache`` holds one store per layer and the cache's logical length: the number of tokens each row has
seen, which numbers the next ones. It is never the number of slots held, which stops growing once a policy
evicts (``broken.PhysicalLengthCache`` shows what taking it from there does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.inputs import check_token_ids, new_positions
from llm_models.llama.model import LlamaDecoder, rms_norm

from .config import Policy
from .policies import make_store
from .rotary import Rotary
from .stores import Store


class WindowCache:
    def __init__(self, layers: list[Store]) -> None:
        self.layers = layers
        self.length = 0  # tokens seen per row: the logical length, apart from the slots kept

    def positions(self, batch: int, length: int, device: torch.device) -> Tensor:
        """(B, T) positions of ``length`` new tokens: they continue after the tokens seen (the offset rule)."""
        return new_positions(self.length, length, device).expand(batch, length)

    def stored_bytes(self) -> int:
        """Bytes every layer keeps between calls, entries and metadata, counted from the tensors."""
        return sum(store.stored_bytes() for store in self.layers)


def new_cache(model: LlamaDecoder, policy: Policy, batch: int = 1) -> WindowCache:
    """One ``policy`` store per layer of ``model``, rotating with the model's RoPE frequencies."""
    config, rotary = model.config, Rotary(model.inverse_frequencies)
    return WindowCache([make_store(policy, batch, config.kv_heads, config.head_dim, config.dtype, model.device,
                                   rotary) for _ in range(config.layers)])


def sequence_inputs(ids: Tensor, cache: WindowCache, positions: Tensor | None,
                    sequences: Tensor | None) -> tuple[Tensor, Tensor]:
    """Each new token's position and sequence id (B, T): given (a packed row), or after the cache's tokens."""
    batch, length = ids.shape
    if positions is None:
        positions = cache.positions(batch, length, ids.device)
    if sequences is None:
        sequences = torch.zeros_like(positions)
    for name, tensor in (("positions", positions), ("sequences", sequences)):
        if tensor.shape != ids.shape:
            raise ValueError(f"{name} must have the shape of ids {tuple(ids.shape)}, got {tuple(tensor.shape)}")
    return positions, sequences


# --8<-- [start:forward]
def forward(model: LlamaDecoder, ids: Tensor, cache: WindowCache, positions: Tensor | None = None,
            sequences: Tensor | None = None, last_only: bool = False) -> Tensor:
    """Logits (B, T, vocab) of the new tokens ``ids`` (B, T), attending through ``cache``'s stores."""
    check_token_ids(ids, model.config.vocab_size)
    if len(cache.layers) != model.config.layers:
        raise ValueError(f"the cache holds {len(cache.layers)} layers, the model {model.config.layers}")
    positions, sequences = sequence_inputs(ids, cache, positions, sequences)
    x = F.embedding(ids, model.embedding)  # (B, T, C)
    for layer, store in zip(model.layers, cache.layers):
        q, k, v = layer.project(x)  # (B, H, T, D), (B, Hkv, T, D): unrotated
        x = layer.finish(x, store.attend(q, k, v, positions, sequences))
    cache.length += ids.shape[1]
    if last_only:
        x = x[:, -1:]
    return F.linear(rms_norm(x, model.norm_final, model.config.rms_norm_eps), model.head)  # (B, T, V)
# --8<-- [end:forward]
