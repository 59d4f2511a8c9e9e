"""The trained Llama's decode step at batch 1: the decoder's own layer, the fastest kernel per kind, compiled layers.

A twin of ``llm_models.llama.model.LlamaDecoder`` built from its tensors, for one-token steps over the same
per-layer ``LayerCache`` stores (so the shared decoder can prefill a cache the twin then decodes). Each layer is
the decoder's own two halves (``project`` and ``finish``, the code the server and the reference run), called with
other products and another attention:

- **a kernel per kind:** each of the decoder's matrices (``MATRIX_KINDS``: q/k/v stacked, o, gate/up stacked,
  down, the head) is multiplied by the kernel ``llm_models.kernels.matvec`` measured fastest for its kind in this
  run, over float32 weights or over int8 codes with row scales;
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

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.gathered import gathered
from llm_models.kernels.matvec import KERNELS, Kernel
from llm_models.kernels.row_dot import compile_static
from llm_models.kernels.timing import Prepared
from llm_models.llama.cache import LayerCache
from llm_models.llama.kinds import LAYER_KINDS, MATRIX_KINDS
from llm_models.llama.model import LayerShape, LlamaDecoder, Product, finish, project, rms_norm, rotary_angles, rotate

from .attention import attend
from .llama_modes import ATTENTION

Region = Callable[..., Tensor]


def product(apply: Callable[..., Tensor], prepared: Prepared) -> Product:
    """One matrix's product as the layer calls it, x (..., in) -> (..., out), through a kernel that multiplies rows
    (N, in) by its ``prepared`` copy (inside a compiled region the reshapes are free)."""
    def multiply(x: Tensor) -> Tensor:
        return apply(x.reshape(-1, x.shape[-1]), *prepared).view(*x.shape[:-1], -1)
    return multiply


def layer_step(x: Tensor, cos: Tensor, sin: Tensor, position: Tensor, keys: Tensor, values: Tensor,
               norms: tuple[Tensor, Tensor], matrices: tuple[Prepared, ...], apply: tuple[Callable[..., Tensor], ...],
               shape: LayerShape, attention: str) -> Tensor:
    """One layer of one token, the decoder's own halves (``project``, ``finish``): x (1, 1, C) -> (1, 1, C); writes
    the token's key and value at ``position`` of the (1, Hkv, P, D) buffers and attends over positions 0 ..
    ``position`` the ``attention`` way."""
    qkv, o, gate_up, down = (product(kernel, prepared) for kernel, prepared in zip(apply, matrices, strict=True))
    q, k, v = project(x, norms[0], qkv, shape)  # (1, H, 1, D), k and v (1, Hkv, 1, D)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    keys.index_copy_(2, position, k)  # in place: the cache is allocated once
    values.index_copy_(2, position, v)
    group = shape.heads // shape.kv_heads
    attended = attend(attention, q.reshape(shape.kv_heads, group, shape.head_dim), keys, values, position)
    return finish(x, attended.view(1, shape.heads, 1, shape.head_dim), o, norms[1], gate_up, down, shape)


def head_step(x: Tensor, norm: Tensor, head: Prepared, apply: Callable[..., Tensor], eps: float) -> Tensor:
    """The final norm and the output head: (1, 1, C) -> logits (1, 1, V)."""
    return product(apply, head)(rms_norm(x, norm, eps))


def fused_matrices(model: LlamaDecoder) -> dict[str, list[Tensor]]:
    """Per kind, every layer's float32 (out, in) matrix as the decoder holds it (q/k/v and gate/up stacked); the
    head is the (tied) embedding. The matrices the kernel table measures and the twin is built from."""
    return {**{kind: [getattr(layer, kind).float() for layer in model.layers] for kind in LAYER_KINDS},
            "head": [model.head.float()]}


def gathered_prepared(layers: list[tuple[Prepared, ...]], head: Prepared, model: LlamaDecoder
                      ) -> tuple[list[tuple[Prepared, ...]], Prepared]:
    """The prepared matrices with every plain tensor among them in one buffer (llm_models.gathered: on 2 MiB pages
    once settled, as the native step's are); a packed oneDNN weight or a missing bias stays as it is, and so does a
    tensor a kernel's prepare handed back as ``model``'s own (the out_in kernel reads the decoder's matrices as
    they are): it already sits wherever the decoder's parameters do, and a second copy would only hold memory."""
    held = {parameter.untyped_storage().data_ptr() for parameter in model.parameters()}

    def plain(tensor: object) -> bool:
        return (isinstance(tensor, Tensor) and tensor.layout == torch.strided and not tensor.is_mkldnn
                and tensor.untyped_storage().data_ptr() not in held)

    tensors = [t for layer in layers for prepared in layer for t in prepared if plain(t)] + [t for t in head if plain(t)]
    copies = iter(gathered(tensors))

    def swap(prepared: Prepared) -> Prepared:
        return tuple(next(copies) if plain(t) else t for t in prepared)

    return [tuple(swap(prepared) for prepared in layer) for layer in layers], swap(head)


class FastLlama:
    """One-token steps of ``model`` at batch 1 with the kernel ``kernels[kind]`` for each matrix kind."""

    def __init__(self, model: LlamaDecoder, kernels: Mapping[str, str], compiled: bool,
                 attention: str = "products") -> None:
        if attention not in ATTENTION:
            raise ValueError(f"FastLlama attends by one of {list(ATTENTION)}, got {attention!r}")
        if sorted(kernels) != sorted(MATRIX_KINDS):
            raise ValueError(f"FastLlama needs a kernel for each of {list(MATRIX_KINDS)}, got {sorted(kernels)}")
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
        self.shape, self.attention = LayerShape.of(config), attention
        chosen: dict[str, Kernel] = {kind: KERNELS[name] for kind, name in kernels.items()}
        fused = fused_matrices(model)
        self.layers = [tuple(chosen[kind].prepare(fused[kind][index], None) for kind in LAYER_KINDS)
                       for index in range(config.layers)]
        self.head = chosen["head"].prepare(fused["head"][0], None)
        del fused
        self.layers, self.head = gathered_prepared(self.layers, self.head, model)
        self.norms = [(layer.attention_norm, layer.mlp_norm) for layer in model.layers]
        self.apply = tuple((chosen[kind].traced if compiled else chosen[kind].eager)  # type: ignore[misc]
                           for kind in MATRIX_KINDS)
        self.layer: Region = CompiledRegion(layer_step, cached=True) if compiled else layer_step
        self.final: Region = CompiledRegion(head_step, cached=False) if compiled else head_step

    def embed(self, token: Tensor) -> Tensor:
        """The token's row of the (tied) embedding, as float32 (1, 1, C): dequantized from its codes in int8."""
        if self.weights == "int8":
            codes, scale = self.head[0], self.head[1]
            return (codes[token[0]].float() * scale[token[0], None])[None]
        return F.embedding(token, self.model.embedding)

    def step(self, token: Tensor, cache: list[LayerCache]) -> Tensor:
        """Logits (1, 1, V) of one token (1, 1) after the ``cache``'s positions; writes its keys and values."""
        length = cache[0].length
        if token.shape != (1, 1) or length >= cache[0].capacity:
            raise ValueError(f"FastLlama steps one token (1, 1) into a cache with room, got {tuple(token.shape)} "
                             f"with {length} of {cache[0].capacity} positions stored")
        position = torch.tensor([length], device=token.device)
        cos, sin = rotary_angles(position, self.model.inverse_frequencies, torch.float32)  # (1, D)
        x = self.embed(token)
        for index, store in enumerate(cache):
            x = self.layer(x, cos, sin, position, store.keys, store.values, self.norms[index], self.layers[index],
                           self.apply[:4], self.shape, self.attention)
        for store in cache:
            store.length = length + 1
        return self.final(x, self.model.norm_final, self.head, self.apply[4], self.shape.eps)

    def warm(self, capacity: int = 2) -> float:
        """Compile (or first-run) every region at the thread count in force by one step; the seconds it took."""
        started = time.perf_counter()
        cache = self.model.new_cache(1, capacity)
        with torch.inference_mode():
            self.step(torch.zeros(1, 1, dtype=torch.long, device=self.model.device), cache)
        return time.perf_counter() - started


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
