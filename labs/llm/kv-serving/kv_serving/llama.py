"""The shared Llama decoder (``llm_models.llama``) served over the block pool: the trained SmolLM2-135M.

The same three paths as the random model (kv_serving.model), on the decoder's own weights and pieces, not a
copy of its layer: ``LlamaLayer.project`` (the new tokens' q, k, v), ``rotate`` by each token's own absolute
position (``rotary_angles`` takes positions per row), the pool's blocks in place of the contiguous cache, and
``LlamaLayer.finish`` (output projection, residual, SwiGLU). Keys are stored after rotation, as the decoder's
own cache stores them, so a block never needs to know where its request started.

* ``reference_logits``: the decoder's own forward over the whole prefix, no cache (the oracle);
* ``prefill``: one new request's prompt, keys and values written into its blocks;
* ``decode``: one new token for each of B requests, each at its own position, attending over its own blocks
  (``kv_serving.model.PagedRows``, the random model's gather-and-mask).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.attention import causal_attention
from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.model import LlamaDecoder, rms_norm, rotary_angles, rotate

from .model import PagedRows, PromptSlots
from .pool import LayeredPool


class LlamaServingModel:
    """``decoder``'s weights behind the interface the scheduler drives (``check_ids``, ``prefill``, ``decode``)."""

    def __init__(self, decoder: LlamaDecoder) -> None:
        self.decoder = decoder
        self.config: LlamaDecoderConfig = decoder.config
        self.layers = decoder.config.layers

    def check_ids(self, ids: list[int]) -> None:
        vocab = self.config.vocab_size
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise ValueError(f"token ids must lie in [0, {vocab}), got {bad[:5]}")

    def _angles(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        return rotary_angles(positions, self.decoder.inverse_frequencies, self.config.dtype)

    def _head(self, x: Tensor) -> Tensor:
        return F.linear(rms_norm(x, self.decoder.norm_final, self.config.rms_norm_eps), self.decoder.head)

    @torch.inference_mode()
    def reference_logits(self, ids: list[int]) -> Tensor:
        """Last-position logits (vocab,) of the whole prefix, from the decoder's own forward without a cache."""
        self.check_ids(ids)
        return self.decoder(torch.tensor([ids]), last_only=True)[0, -1]

    @torch.inference_mode()
    def prefill(self, pool: LayeredPool, ids: list[int], table: list[int]) -> Tensor:
        """Write the prompt's rotated keys and values into ``table``'s blocks; last-position logits (vocab,)."""
        self.check_ids(ids)
        slots = PromptSlots(pool, len(ids), table)
        cos, sin = self._angles(slots.positions)  # (T, D): positions 0 .. T-1
        x = F.embedding(torch.tensor([ids]), self.decoder.embedding)  # (1, T, C)
        for index, layer in enumerate(self.decoder.layers):
            q, k, v = layer.project(x)  # (1, H, T, D), k and v (1, Hkv, T, D)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            slots.write(index, k, v)
            x = layer.finish(x, causal_attention(q, k, v, 0))  # a fresh request: its own keys only
        return self._head(x[:, -1:])[0, -1]

    # --8<-- [start:decode]
    @torch.inference_mode()
    def decode(self, pool: LayeredPool, tokens: list[int], positions: list[int],
               tables: list[list[int]]) -> Tensor:
        """One step for B requests: token b sits at position b, keys in tables[b]; logits (B, vocab)."""
        self.check_ids(tokens)
        rows = PagedRows(pool, tokens, positions, tables)
        cos, sin = self._angles(rows.position[:, None])  # (B, 1, D): each row turns by its own position
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, 1, D): the same angle for every head of a row
        x = F.embedding(torch.tensor(tokens)[:, None], self.decoder.embedding)  # (B, 1, C)
        for index, layer in enumerate(self.decoder.layers):
            q, k, v = layer.project(x)  # q (B, H, 1, D), k and v (B, Hkv, 1, D)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            x = layer.finish(x, rows.attend(index, q, k, v))
        return self._head(x)[:, -1]
    # --8<-- [end:decode]
