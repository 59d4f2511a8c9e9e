"""The trained Llama's decode step, rebuilt for batch 1: fused matrices, the fastest kernel per kind, compiled layers.

A twin of ``llm_models.llama.model.LlamaDecoder`` built from its tensors, for one-token steps over the same
per-layer ``LayerCache`` stores (so the shared decoder can prefill a cache the twin then decodes):

- **fused matrices:** q, k and v are one (H*D + 2*Hkv*D, C) matrix and gate and up one (2F, C), so a layer makes
  four matrix products instead of seven, each a longer stream of one matrix;
- **a kernel per kind:** each kind of matrix (``LLAMA_KINDS``) is multiplied by the kernel ``llm_models.kernels.matvec``
  measured fastest for it in this run, over float32 weights or over int8 codes with row scales;
- **compiled layers (``compiled=True``):** the step's thirty identical layers are one region for ``torch.compile``,
  compiled once and called per layer: inductor fuses each layer's norms, rotary turns, cache writes, softmax,
  SwiGLU and residual adds into a few loops, the matrix kernels stay calls. One region instead of the whole
  step's graph keeps the compile to seconds (PyTorch's regional compilation); the cache's length is a dynamic
  dimension, so every context runs the same compiled code.

Attention (``decode_bandwidth.attention``) either goes through two batched products over the whole cache buffer, the positions past
the new token's masked (a cache sized to the context, as the benchmark's are, holds none), or through this lab's
C loop, which reads only the positions stored, each row once. Every step is checked against the shared decoder's
logits (``LlamaDecoder`` on the same weights, or on their int8 round trip) before it is timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.kernels.matvec import KERNELS, Kernel, Prepared
from llm_models.kernels.row_dot import compile_static
from llm_models.llama.cache import LayerCache
from llm_models.llama.model import LlamaDecoder, rms_norm
from llm_models.serving.llama import fused_matrices as layer_matrices

from .attention import ATTENTION, attend
from .llama_modes import LLAMA_KINDS

Region = Callable[..., Tensor]


@dataclass(frozen=True)
class Shape:
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    attention: str  # one of decode_bandwidth.attention.ATTENTION


def layer_step(x: Tensor, cos: Tensor, sin: Tensor, position: Tensor, keys: Tensor, values: Tensor,
               norms: tuple[Tensor, Tensor], matrices: tuple[Prepared, ...], apply: tuple[Callable[..., Tensor], ...],
               shape: Shape) -> Tensor:
    """One layer of one token: x (1, C) -> (1, C); writes the token's key and value at ``position`` of the
    (1, Hkv, P, D) buffers and attends over positions 0 .. ``position``."""
    heads, kv_heads, dim = shape.heads, shape.kv_heads, shape.head_dim
    group, half = heads // kv_heads, dim // 2
    qkv, o, gate_up, down = matrices
    h = rms_norm(x, norms[0], shape.eps)
    q, k, v = apply[0](h, *qkv).split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q, k, v = q.view(heads, dim), k.view(kv_heads, dim), v.view(kv_heads, dim)  # (H, D), (Hkv, D)
    q = q * cos + torch.cat((-q[:, half:], q[:, :half]), dim=-1) * sin  # rotary, as llm_models.llama.model.rotate
    k = k * cos + torch.cat((-k[:, half:], k[:, :half]), dim=-1) * sin
    keys.index_copy_(2, position, k.view(1, kv_heads, 1, dim))  # in place: the cache is allocated once
    values.index_copy_(2, position, v.view(1, kv_heads, 1, dim))
    attended = attend(shape.attention, q.view(kv_heads, group, dim), keys, values, position)  # (Hkv, G, D)
    attended = attended.reshape(1, heads * dim)  # -> (1, H*D)
    x = x + apply[1](attended, *o)
    h = rms_norm(x, norms[1], shape.eps)
    gate, up = apply[2](h, *gate_up).chunk(2, dim=-1)
    return x + apply[3](F.silu(gate) * up, *down)  # SwiGLU


def head_step(x: Tensor, norm: Tensor, head: Prepared, apply: Callable[..., Tensor], eps: float) -> Tensor:
    """The final norm and the output head: (1, C) -> logits (1, V)."""
    return apply(rms_norm(x, norm, eps), *head)


def fused_matrices(model: LlamaDecoder) -> dict[str, list[tuple[Tensor, None]]]:
    """Per kind, every layer's float32 (out, in) matrix, q/k/v and gate/up concatenated; the head is the
    (tied) embedding. The matrices the kernel table measures and the twin is built from."""
    fused = [layer_matrices(layer) for layer in model.layers]  # the server's fusion, layer by layer
    return {**{kind: [(matrices[kind].float(), None) for matrices in fused] for kind in LLAMA_KINDS[:4]},
            "head": [(model.head.float(), None)]}


class FastLlama:
    """One-token steps of ``model`` at batch 1 with the kernel ``kernels[kind]`` for each matrix kind."""

    def __init__(self, model: LlamaDecoder, kernels: Mapping[str, str], compiled: bool,
                 attention: str = "products") -> None:
        if attention not in ATTENTION:
            raise ValueError(f"FastLlama attends by one of {list(ATTENTION)}, got {attention!r}")
        if sorted(kernels) != sorted(LLAMA_KINDS):
            raise ValueError(f"FastLlama needs a kernel for each of {list(LLAMA_KINDS)}, got {sorted(kernels)}")
        formats = {KERNELS[name].weights for name in kernels.values()}
        if len(formats) != 1:
            raise ValueError(f"FastLlama's kernels must share one weight format, got {sorted(formats)}")
        config = model.config
        if config.dtype != torch.float32:
            raise ValueError(f"FastLlama steps float32 activations, the model is {config.dtype}")
        eager_only = sorted(name for name in set(kernels.values()) if KERNELS[name].traced is None)
        if compiled and eager_only:
            raise ValueError(f"FastLlama cannot compile its layers around {eager_only}: they run in eager steps only")
        self.model, self.kernels, self.compiled = model, dict(kernels), compiled
        self.weights = formats.pop()
        self.shape = Shape(config.heads, config.kv_heads, config.head_dim, config.rms_norm_eps, attention)
        chosen: dict[str, Kernel] = {kind: KERNELS[name] for kind, name in kernels.items()}
        fused = fused_matrices(model)
        self.layers = [tuple(chosen[kind].prepare(*fused[kind][index]) for kind in LLAMA_KINDS[:4])
                       for index in range(config.layers)]
        self.head = chosen["head"].prepare(*fused["head"][0])
        del fused
        self.norms = [(layer.attention_norm, layer.mlp_norm) for layer in model.layers]
        self.apply = tuple((chosen[kind].traced if compiled else chosen[kind].eager)  # type: ignore[misc]
                           for kind in LLAMA_KINDS)
        self.layer: Region = CompiledRegion(layer_step, cached=True) if compiled else layer_step
        self.final: Region = CompiledRegion(head_step, cached=False) if compiled else head_step

    def embed(self, token: Tensor) -> Tensor:
        """The token's row of the (tied) embedding, as float32 (1, C): dequantized from its codes in int8."""
        if self.weights == "int8":
            codes, scale = self.head[0], self.head[1]
            return codes[token[0]].float() * scale[token[0], None]
        return F.embedding(token[0], self.model.embedding)

    def step(self, token: Tensor, cache: list[LayerCache]) -> Tensor:
        """Logits (1, 1, V) of one token (1, 1) after the ``cache``'s positions; writes its keys and values."""
        length = cache[0].length
        if token.shape != (1, 1) or length >= cache[0].capacity:
            raise ValueError(f"FastLlama steps one token (1, 1) into a cache with room, got {tuple(token.shape)} "
                             f"with {length} of {cache[0].capacity} positions stored")
        position = torch.tensor([length], device=token.device)
        cos, sin = rotary(position, self.model.inverse_frequencies)
        x = self.embed(token)
        for index, store in enumerate(cache):
            x = self.layer(x, cos, sin, position, store.keys, store.values, self.norms[index], self.layers[index],
                           self.apply[:4], self.shape)
        for store in cache:
            store.length = length + 1
        return self.final(x, self.model.norm_final, self.head, self.apply[4], self.shape.eps).view(1, 1, -1)

    def warm(self, capacity: int = 2) -> float:
        """Compile (or first-run) every region at the thread count in force by one step; the seconds it took."""
        started = time.perf_counter()
        cache = self.model.new_cache(1, capacity)
        with torch.inference_mode():
            self.step(torch.zeros(1, 1, dtype=torch.long, device=self.model.device), cache)
        return time.perf_counter() - started


def rotary(position: Tensor, inverse: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin (1, D) of one absolute position, float32, as llm_models.llama.model.rotary_angles computes them."""
    angles = position.float()[:, None] * inverse  # (1, D/2)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


class CompiledRegion:
    """A layer or the head through inductor. Until the first call has compiled it, each call marks the cache
    buffers' length dynamic (one compiled graph for every context) and compiles with inductor's thread count
    read at run time (``cpp.dynamic_threads``), so the same code serves one thread and two."""

    def __init__(self, function: Region, cached: bool) -> None:
        self.compiled, self.cached, self.ready = compile_static(function), cached, False

    def __call__(self, *args: object) -> Tensor:
        if self.ready:
            return self.compiled(*args)
        if self.cached:
            torch._dynamo.mark_dynamic(args[4], 2)  # keys, values (1, Hkv, P, D): P varies with the context
            torch._dynamo.mark_dynamic(args[5], 2)
        with torch._inductor.config.patch({"cpp.dynamic_threads": True}):
            out = self.compiled(*args)
        self.ready = True
        return out
