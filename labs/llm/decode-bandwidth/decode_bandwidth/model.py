"""A GPT-2-style decoder: pre-norm layers, learned positions, tanh-GELU, tied output head, random weights.

``forward(ids, cache=None)`` runs the whole prefix; ``forward(new_ids, cache)``
runs only the new tokens against the stored keys and values of every layer.
The positions of new tokens and the attention over a cached prefix are the
shared llm_models code, imported (``llm_models.toy.model.DecoderBlock.positions``
and ``llm_models.attention.causal_attention``), not copied.

Layout, chosen for decode by measurement (``decode_bandwidth.layout``, kept in
the record as ``layout``): every weight is one contiguous matrix read once per
step. The fused qkv, the attention output and the MLP's fc are stored
(in, out) and multiplied with ``addmm(bias, x, W)``; the MLP's proj is stored
(out, in) and multiplied with ``F.linear``, whose kernel streamed that
tall-and-narrow matrix faster at batch 1 on the development CPU. The output
head, tied to the token embedding as GPT-2 ties it, is one (width, vocab)
matrix: at batch 1 on the development CPU that (in, out) multiply took about
half the time of ``F.linear`` over the (vocab, width) embedding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from llm_models.attention import causal_attention
from llm_models.toy.model import DecoderBlock

from .cache import ConcatCache, PreallocatedCache
from .config import DecoderConfig
from .grid import LAYOUT


def _draw(shape: tuple[int, ...], std: float, generator: torch.Generator) -> Tensor:
    # Drawn in float32 on the CPU from one generator, so every dtype and device gets the same weights.
    return torch.randn(shape, generator=generator, dtype=torch.float32) * std


def one_row(kernel: Callable[[Tensor, Tensor, Tensor | None], Tensor], x: Tensor, weight: Tensor,
            bias: Tensor | None) -> Tensor:
    """x (1, 1, in) through a one-row kernel over an (out, in) matrix (decode_bandwidth.compiled): (1, 1, out)."""
    return kernel(x.view(1, -1), weight, bias).view(1, 1, -1)


def affine(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (..., in) @ weight (in, out) + bias: one addmm over a contiguous (in, out) matrix."""
    flat = x.reshape(-1, x.shape[-1])  # (B*T, in)
    out = torch.mm(flat, weight) if bias is None else torch.addmm(bias, flat, weight)
    return out.view(*x.shape[:-1], weight.shape[1])


class DecoderLayer(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + mlp(norm(x)), as GPT-2."""

    # The layout of each weight matrix: (in, out) for addmm, (out, in) for F.linear (see the module docstring);
    # decode_bandwidth.grid holds it (torch-free), so the site checks the record's layout rows against the same table.
    LAYOUT = LAYOUT

    def __init__(self, config: DecoderConfig, generator: torch.Generator) -> None:
        super().__init__()
        self.config = config
        width, kv_width, hidden = config.width, config.kv_width, config.hidden
        std, residual = config.init_std, config.residual_std

        def parameter(tensor: Tensor) -> nn.Parameter:
            return nn.Parameter(tensor, requires_grad=False)

        self.norm_attention_weight = parameter(torch.ones(width))
        self.norm_attention_bias = parameter(torch.zeros(width))
        self.qkv_weight = parameter(_draw((width, width + 2 * kv_width), std, generator))  # (C, C + 2 Ckv)
        self.qkv_bias = parameter(torch.zeros(width + 2 * kv_width))
        self.out_weight = parameter(_draw((width, width), residual, generator))  # (C, C)
        self.out_bias = parameter(torch.zeros(width))
        self.norm_mlp_weight = parameter(torch.ones(width))
        self.norm_mlp_bias = parameter(torch.zeros(width))
        self.fc_weight = parameter(_draw((width, hidden), std, generator))  # (C, 4C)
        self.fc_bias = parameter(torch.zeros(hidden))
        self.proj_weight = parameter(_draw((hidden, width), residual, generator).t().contiguous())  # (C, 4C): (out, in)
        self.proj_bias = parameter(torch.zeros(width))
        # Set by decode_bandwidth.compiled: per kind an (out, in) matrix and its bias, and the compiled
        # kernel that multiplies one row by them. None here: every multiply is the BLAS call of its layout.
        self.one_row: dict[str, tuple[Tensor, Tensor | None]] | None = None
        self.kernel: Callable[[Tensor, Tensor, Tensor | None], Tensor] | None = None

    def multiply(self, kind: str, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """x (B, T, in) times this kind's matrix, stored in the layout LAYOUT names (see the module docstring)."""
        if self.one_row is not None and x.shape[0] * x.shape[1] == 1:
            return one_row(self.kernel, x, *self.one_row[kind])  # type: ignore[arg-type]
        return affine(x, weight, bias) if LAYOUT[kind] == "in_out" else F.linear(x, weight, bias)

    # --8<-- [start:layer]
    def forward(self, x: Tensor, index: int, offset: int,
                cache: ConcatCache | PreallocatedCache | None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x (B, T, C) -> (B, T, C), and this layer's keys and values of every position so far."""
        config = self.config
        batch, length, width = x.shape
        h = F.layer_norm(x, (width,), self.norm_attention_weight, self.norm_attention_bias, config.layer_norm_eps)
        q, k, v = self.multiply("qkv", h, self.qkv_weight, self.qkv_bias).split(
            [width, config.kv_width, config.kv_width], dim=-1)
        q = q.view(batch, length, config.heads, config.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = k.view(batch, length, config.kv_heads, config.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(batch, length, config.kv_heads, config.head_dim).transpose(1, 2)
        if isinstance(cache, PreallocatedCache):
            keys, values = cache.write(index, k, v, offset)  # (B, Hkv, offset + T, D) views
        elif cache is None:
            keys, values = k, v
        else:  # concatenate, as the first lab: a new, longer pair every call
            keys = torch.cat((cache[index][0], k), dim=-2)
            values = torch.cat((cache[index][1], v), dim=-2)
        attended = causal_attention(q, keys, values, offset)  # (B, H, T, D)
        x = x + self.multiply("attention out", attended.transpose(1, 2).reshape(batch, length, width),
                              self.out_weight, self.out_bias)
        h = F.layer_norm(x, (width,), self.norm_mlp_weight, self.norm_mlp_bias, config.layer_norm_eps)
        h = F.gelu(self.multiply("mlp fc", h, self.fc_weight, self.fc_bias), approximate="tanh")  # GPT-2's "gelu_new"
        return x + self.multiply("mlp proj", h, self.proj_weight, self.proj_bias), (keys, values)
    # --8<-- [end:layer]


class Decoder(nn.Module):
    positions = DecoderBlock.positions  # the first lab's offset rule: new positions continue after the prefix

    def __init__(self, config: DecoderConfig, device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.config = config
        generator = torch.Generator().manual_seed(config.seed)
        # The token embedding, stored transposed (C, vocab): it is also the output head (tied, as GPT-2),
        # and a decode step reads it whole only as the head, where (in, out) is the faster layout.
        self.tied_head = nn.Parameter(_draw((config.vocab_size, config.width), config.init_std, generator)
                                      .t().contiguous(), requires_grad=False)
        self.position = nn.Parameter(_draw((config.max_positions, config.width), config.init_std, generator),
                                     requires_grad=False)  # (P, C)
        self.layers = nn.ModuleList(DecoderLayer(config, generator) for _ in range(config.layers))
        self.norm_final_weight = nn.Parameter(torch.ones(config.width), requires_grad=False)
        self.norm_final_bias = nn.Parameter(torch.zeros(config.width), requires_grad=False)
        self.to(device=device, dtype=config.dtype)
        self.eval()

    @property
    def device(self) -> torch.device:
        return self.tied_head.device

    def forward(self, ids: Tensor, cache: ConcatCache | PreallocatedCache | None = None, *,
                last_only: bool = False, check_values: bool = True) -> tuple[Tensor, ConcatCache | PreallocatedCache]:
        """Logits (B, T, vocab) (or (B, 1, vocab) with ``last_only``) and the cache extended by ``ids``.

        ``check_values=False`` skips the range check of the ids, which reads them back to the host: the
        decode loop passes it for tokens the model chose itself, so a GPU step never waits on the host.
        """
        batch, length = self._check_ids(ids, check_values)
        offset = self._offset(cache, batch)
        if offset + length > self.config.max_positions:
            raise ValueError(f"{offset} cached + {length} new positions = {offset + length}, "
                             f"beyond the position capacity of {self.config.max_positions}")
        positions = self.positions(offset, length, ids.device)  # offset .. offset + T - 1
        x = F.embedding(ids, self.tied_head.t()) + F.embedding(positions, self.position)  # (B, T, C)
        pairs = []
        for index, layer in enumerate(self.layers):
            x, pair = layer(x, index, offset, cache)
            pairs.append(pair)
        if last_only:
            x = x[:, -1:]
        x = F.layer_norm(x, (self.config.width,), self.norm_final_weight, self.norm_final_bias,
                         self.config.layer_norm_eps)
        logits = self.head(x)  # (B, T, vocab)
        if isinstance(cache, PreallocatedCache):
            cache.advance(length)
            return logits, cache
        return logits, pairs

    def head(self, x: Tensor) -> Tensor:
        """x (B, T, C) -> logits (B, T, vocab) through the tied head, stored (in, out)."""
        return affine(x, self.tied_head, None)

    def _check_ids(self, ids: Tensor, check_values: bool) -> tuple[int, int]:
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"ids must be a 2-D (batch, tokens) tensor, got {shape}")
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise ValueError(f"ids must hold integer token ids, got dtype {ids.dtype}")
        batch, length = ids.shape
        if batch < 1 or length < 1:
            raise ValueError(f"ids must hold at least one token per row, got shape {(batch, length)}")
        if check_values:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= self.config.vocab_size:
                raise ValueError(f"token ids must lie in [0, {self.config.vocab_size}), got {low} to {high}")
        return batch, length

    def _offset(self, cache: ConcatCache | PreallocatedCache | None, batch: int) -> int:
        """The cached length, after checking the cache fits this model and this batch."""
        config = self.config
        if cache is None:
            return 0
        if isinstance(cache, PreallocatedCache):
            stored = cache.keys[0]
            length = cache.length
        else:
            if not isinstance(cache, list) or len(cache) != config.layers:
                found = len(cache) if isinstance(cache, list) else type(cache).__name__
                raise ValueError(f"cache must be a list of {config.layers} (keys, values) pairs, got {found}")
            stored = cache[0][0]
            length = stored.shape[-2]
            for index, (keys, values) in enumerate(cache):
                if keys.shape != stored.shape or values.shape != stored.shape:
                    raise ValueError(f"cache layer {index} holds {tuple(keys.shape)} / {tuple(values.shape)}, "
                                     f"layer 0 holds {tuple(stored.shape)}")
        expected = (batch, config.kv_heads, config.head_dim)
        found = (stored.shape[0], stored.shape[1], stored.shape[-1]) if stored.dim() == 4 else tuple(stored.shape)
        if found != expected:
            raise ValueError(f"cache of shape {tuple(stored.shape)} does not fit (batch={batch}, "
                             f"kv_heads={config.kv_heads}, T, head_dim={config.head_dim})")
        if stored.dtype != self.tied_head.dtype or stored.device != self.tied_head.device:
            raise ValueError(f"cache is {stored.dtype} on {stored.device}, "
                             f"the model is {self.tied_head.dtype} on {self.tied_head.device}")
        return length
