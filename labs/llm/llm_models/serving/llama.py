"""The shared Llama decoder (``llm_models.llama``) served over the block pool: the trained SmolLM2-135M.

The decoder's own layer (``project``, ``rotate`` by each token's absolute position, ``finish``) around the pool's
blocks in place of the contiguous cache, over the decoder's own stacked matrices (q, k and v in one, gate and up
in another: four weight products per layer, each one stream of a matrix for the whole batch), each multiplied by
the kernel timed fastest here for its kind, at one row and at several (``ServedLayer``,
``llm_models.serving.kernels``). Keys are stored after rotation, as the decoder's own cache stores them, so a block
never needs to know where its request started.

* ``reference_logits``: the decoder's own forward over the whole prefix, no cache (the oracle);
* ``prefill``: new requests' prompts packed into one sequence (vLLM's batched prefill): one pass of every
  weight matrix for all of their tokens, each prompt attending only over its own keys, its keys and values
  written into its blocks;
* ``decode``: one new token for each of B requests, each at its own position, attending over its own blocks:
  the decode lab's one-call step (``llm_models.llama.native_step``, every layer in one C loop that reads each
  request's blocks through its table), so the server runs the step the decode lab measures; where that step cannot
  run (no C compiler, a bfloat16 pool, a shape its loop does not take), the layer above in torch, over
  ``llm_models.serving.model.PagedRows`` (the blocks read where they lie, as for the random model).
"""

from __future__ import annotations

import copy as copy_module
import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.kernels.quantize import dequantize, quantize_rows
from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.kinds import IN_TORCH, LAYER_KINDS, ONE_CALL, WEIGHTS
from llm_models.llama.model import (
    LayerShape,
    LlamaDecoder,
    LlamaLayer,
    finish,
    project,
    rms_norm,
    rotary_angles,
    rotate,
)
from llm_models.llama.native_step import NativeStep, refusal, unavailable

from .kernels import KernelTable, Weight, dump_timings, kernel_table, parse_timings, timings_of
from .model import MixedPass, PackedPrompts, PacksPrompts, PagedRows
from .pool import LayeredPool


@dataclass(frozen=True)
class ServedLayer:
    """One decoder layer as the server multiplies it: its norms, and each of its four matrices (``LAYER_KINDS``,
    q/k/v and gate/up stacked as the decoder holds them) a ``Weight``, multiplied by its kind's chosen kernel. The
    arithmetic is the decoder's own (``llm_models.llama.model.project`` and ``finish``)."""

    attention_norm: Tensor  # (C,)
    qkv: Weight  # (H*D + 2*Hkv*D, C): queries, then keys, then values
    o: Weight  # (C, H*D)
    mlp_norm: Tensor  # (C,)
    gate_up: Weight  # (2F, C): gate, then up
    down: Weight  # (C, F)
    shape: LayerShape

    @classmethod
    def of(cls, layer: LlamaLayer, chosen: Mapping[str, Mapping[int, str]]) -> ServedLayer:
        """``layer``'s norms and matrices, each multiplied by its kind's ``chosen`` kernels."""
        weight = {kind: Weight(getattr(layer, kind), chosen[kind]) for kind in LAYER_KINDS}
        return cls(layer.attention_norm, weight["qkv"], weight["o"], layer.mlp_norm, weight["gate_up"], weight["down"],
                   layer.shape)

    def project(self, x: Tensor, prefill: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, C) -> queries (B, H, T, D), keys and values (B, Hkv, T, D), unrotated. ``prefill``: multiplied by
        ``Weight.prefill`` (a BLAS kernel above PREFILL_PACKED_ROWS rows), else as a decode step."""
        return project(x, self.attention_norm, self.qkv.prefill if prefill else self.qkv, self.shape)

    def finish(self, x: Tensor, attended: Tensor, prefill: bool = False) -> Tensor:
        """The residual stream x (B, T, C) after the attention's output (B, H, T, D) and SwiGLU; ``prefill`` as in
        ``project``."""
        if prefill:
            return finish(x, attended, self.o.prefill, self.mlp_norm, self.gate_up.prefill, self.down.prefill,
                          self.shape)
        return finish(x, attended, self.o, self.mlp_norm, self.gate_up, self.down, self.shape)


class LlamaServingModel(PacksPrompts):
    """``decoder``'s weights behind the interface the scheduler drives (``check_ids``, ``prefill``, ``decode``),
    each matrix multiplied by the kernel timed fastest here for its kind and number of rows (llm_models.serving.kernels);
    ``kernel_ns`` (kind -> rows -> kernel -> ns) supplies those timings instead (a test fixing the outcome).

    ``weights="int8"``: every matrix becomes int8 codes with one scale per row (llm_models.kernels.quantize, the
    decode lab's ``ours-int8``). Decode steps read the codes (the one-call step; a quarter of the bytes); prefill,
    the reference and the torch way run on the float32 matrices the codes stand for (``round_trip``), so a request's
    every token comes from that one model. int8 needs the one-call step: without it there is no int8 decode here."""

    def __init__(self, decoder: LlamaDecoder,
                 kernel_ns: Mapping[str, Mapping[int, Mapping[str, float]]] | None = None,
                 weights: str = "float32") -> None:
        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
        self.weights = weights
        if weights == "int8":
            decoder = round_trip(decoder)
        self.decoder = decoder
        self.config: LlamaDecoderConfig = decoder.config
        self.layers = decoder.config.layers
        with torch.inference_mode():
            kinds = {kind: [getattr(layer, kind) for layer in decoder.layers] for kind in LAYER_KINDS}
            self.kernels: KernelTable = kernel_table({**kinds, "head": [decoder.head]}, kernel_ns)
            chosen = self.kernels.chosen
            self.served = [ServedLayer.of(layer, chosen) for layer in decoder.layers]
            self.head = Weight(decoder.head, chosen["head"])  # the tied embedding, (vocab, C)
        self.decode_why = unavailable() or refusal(decoder, weights)  # None: decode steps take the one-call step
        if weights == "int8" and self.decode_why is not None:
            raise ValueError(f"int8 weights are read by the one-call step only, which cannot run here: "
                             f"{self.decode_why}")

    @functools.cached_property
    def native(self) -> NativeStep | None:
        """The one-call step over this model's matrices as ``weights``, made at the first decode step (its packed
        copy of the weights is as large as they are, and a model that never decodes needs none); None where it
        cannot run (``decode_why``)."""
        return None if self.decode_why is not None else NativeStep(self.decoder, self.weights)

    @property
    def decode_way(self) -> str:
        """ONE_CALL where a float32 pool's steps run the decode lab's one-call step, else IN_TORCH (``decode_why``)."""
        return ONE_CALL if self.decode_why is None else IN_TORCH

    def steps_in_one_call(self, pool: LayeredPool) -> bool:
        """Whether ``decode`` over ``pool`` runs the one-call step (a float32 pool and a step that could be made)."""
        return self.decode_why is None and pool.blocks.keys.dtype == torch.float32

    def check_ids(self, ids: list[int]) -> None:
        vocab = self.config.vocab_size
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise ValueError(f"token ids must lie in [0, {vocab}), got {bad[:5]}")

    def _angles(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        return rotary_angles(positions, self.decoder.inverse_frequencies, self.config.dtype)

    def _head(self, x: Tensor, prefill: bool = False) -> Tensor:
        normed = rms_norm(x, self.decoder.norm_final, self.config.rms_norm_eps)
        return self.head.prefill(normed) if prefill else self.head(normed)

    @torch.inference_mode()
    def reference_logits(self, ids: list[int]) -> Tensor:
        """Last-position logits (vocab,) of the whole prefix, from the decoder's own forward without a cache."""
        self.check_ids(ids)
        return self.decoder(torch.tensor([ids]), last_only=True)[0, -1]

    @torch.inference_mode()
    def prefill(self, pool: LayeredPool, prompts: list[list[int]], tables: list[list[int]],
                starts: list[int] | None = None) -> Tensor:
        """Each prompt's rotated keys and values into its table's blocks; each one's last-position logits (N, vocab).
        The prompts are packed into one sequence for the weight products (``PackedPrompts``); each attends over
        its own keys only, rotated from its own position 0. ``starts``: positions of each prompt already in its
        blocks (prefix caching), not computed again; the rest turn by their own positions from there. The weight
        products go through ``Weight.prefill``: sum T is nearly always a row count never seen, and oneDNN's packed
        kernel would keep a primitive for each (NOTE at llm_models.serving.kernel_rows.PREFILL_PACKED_ROWS)."""
        return self._packed_forward(self.packing(pool, prompts, tables, self.check_ids, starts))

    def _packed_forward(self, packed: PackedPrompts | MixedPass) -> Tensor:
        cos, sin = self._angles(packed.positions)  # (sum T, D)
        x = F.embedding(packed.ids, self.decoder.embedding)  # (1, sum T, C)
        for index, layer in enumerate(self.served):
            q, k, v = layer.project(x, prefill=True)  # (1, H, sum T, D), k and v (1, Hkv, sum T, D)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            x = layer.finish(x, packed.attend(index, q, k, v), prefill=True)
        return self._head(x[0, packed.last], prefill=True)  # (N, vocab)

    # --8<-- [start:decode]
    @torch.inference_mode()
    def decode(self, pool: LayeredPool, tokens: list[int], positions: list[int],
               tables: list[list[int]]) -> Tensor:
        """One step for B requests: token b sits at position b, keys in tables[b]; logits (B, vocab)."""
        self.check_ids(tokens)
        if self.steps_in_one_call(pool) and self.native is not None:
            return self.native.step_paged(tokens, positions, tables, pool.blocks.keys, pool.blocks.values)
        rows = PagedRows(pool, tokens, positions, tables)
        cos, sin = self._angles(rows.position[:, None])  # (B, 1, D): each row turns by its own position
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, 1, D): the same angle for every head of a row
        x = F.embedding(torch.tensor(tokens)[:, None], self.decoder.embedding)  # (B, 1, C)
        for index, layer in enumerate(self.served):
            q, k, v = layer.project(x)  # q (B, H, 1, D), k and v (B, Hkv, 1, D)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            x = layer.finish(x, rows.attend(index, q, k, v))
        return self._head(x)[:, -1]
    # --8<-- [end:decode]


def round_trip(decoder: LlamaDecoder) -> LlamaDecoder:
    """A copy of ``decoder`` whose every matrix is its int8 round trip (codes x row scales), norms untouched: the
    float32 model the int8 codes stand for. Quantizing a stacked matrix row by row gives each stacked matrix's own
    rows, so the fused q/k/v and gate/up round-trip as the separate ones would."""
    copy = copy_module.deepcopy(decoder)
    with torch.inference_mode():
        for layer in copy.layers:
            for kind in LAYER_KINDS:
                getattr(layer, kind).copy_(dequantize(*quantize_rows(getattr(layer, kind))))
        copy.embedding.copy_(dequantize(*quantize_rows(copy.embedding)))
        if copy.head.data_ptr() != copy.embedding.data_ptr():  # an untied head is a matrix of its own
            copy.head.copy_(dequantize(*quantize_rows(copy.head)))
    return copy


_SERVED = threading.Lock()
_BUILT: dict[tuple[LlamaDecoder, str | None, str], LlamaServingModel] = {}


def served(decoder: LlamaDecoder, kernel_ns: str | None = None, weights: str = "float32") -> LlamaServingModel:
    """``decoder`` arranged for serving, once per process, decoder and kernel timings (a deliberate cache): the fused
    and packed copies take seconds to build and only ever read, so servers sharing a process (the quick run's
    threads, the tests) share them. Each server process of a timed run builds its own. ``kernel_ns``: the kernel
    table's timings as JSON (llm_models.serving.kernels.dump_timings), so it chooses as they say instead of timing."""
    # NOTE: servers started together in threads of one process each ask from their own thread, and a cache alone
    # lets every caller that misses build a copy: seven trained servers held seven (1.6 GB each, 15 GB in one quick
    # benchmark run, whose page faults slowed every suite running beside it). One builds; the others wait for it.
    with _SERVED:
        key = (decoder, kernel_ns, weights)
        if key not in _BUILT:
            model = LlamaServingModel(decoder, None if kernel_ns is None else parse_timings(kernel_ns), weights)
            _ = model.native  # packed now: a server arranges its weights when it starts, not in its first request's step
            _BUILT[key] = model
            if kernel_ns is None:
                # NOTE: a table handed its own timings chooses as it did, so the servers a process starts with the
                # timings it measured (the benchmark's quick run) serve this model instead of building a second
                _BUILT.setdefault((decoder, dump_timings(timings_of(model.kernels.rows)), weights), model)
        return _BUILT[key]
