"""The measurement behind the weight layout: each matrix kind at a batch, stored (in, out) or (out, in).

(in, out) is multiplied as ``addmm(bias, x, W)``, the layout of transformers'
Conv1D; (out, in) as ``F.linear(x, W, bias)``, nn.Linear's layout and that of
transformers' tied output head. The model stores each kind in the layout
named in ``DecoderLayer.LAYOUT``; the record keeps both timings beside it. Each pass runs every
layer's matrix of a kind once, so the weights stream from memory as they do
in a step instead of sitting in cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .model import Decoder, DecoderLayer


def _best_ns(work: Any, passes: int, device: torch.device) -> int:
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    work()
    best = None
    for _ in range(passes):
        synchronize()
        start = time.perf_counter_ns()
        work()
        synchronize()
        elapsed = time.perf_counter_ns() - start
        best = elapsed if best is None else min(best, elapsed)
    return int(best)


def onednn_linear(weight_out_in: Tensor) -> Any:
    """oneDNN's linear over a copy of the (out, in) matrix in its own blocked layout (packed once, as a
    serving engine would at load): a third library kernel for the same product. None where it is absent."""
    if not torch.backends.mkldnn.is_available() or weight_out_in.device.type != "cpu":
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight_out_in, 1)
    except RuntimeError:  # a dtype this build's oneDNN has no linear for: the row says so by lacking onednn_ns
        return None
    return lambda x, bias: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def measure_layouts(model: Decoder, passes: int, batch: int = 1,
                    compiled: Callable[[Tensor, Tensor, Tensor | None], Tensor] | None = None) -> dict[str, Any]:
    """Per kind: ns per matrix in each layout (best pass), the bytes of one matrix, and the layout the model uses.

    At batch 1 a multiply is a matrix-vector product; at larger batches BLAS runs a matrix-matrix kernel on
    the same bytes, which the batches beyond 1 show. At batch 1 two more kernels run the same products over
    (out, in) copies: oneDNN's packed linear (``onednn_ns``) and, given ``compiled``, ours-compiled's kernel
    (``compiled_ns``, decode_bandwidth.compiled).
    """
    config = model.config
    x = torch.randn(batch, config.width, dtype=config.dtype, device=model.device)  # (B, C)
    h = torch.randn(batch, config.hidden, dtype=config.dtype, device=model.device)  # (B, 4C)
    # Each matrix as a logical (in, out) view, whatever its storage; both layouts are made from it.
    kinds: dict[str, tuple[Tensor, list[tuple[Tensor, Tensor | None]]]] = {
        "qkv": (x, [(layer.qkv_weight, layer.qkv_bias) for layer in model.layers]),
        "attention out": (x, [(layer.out_weight, layer.out_bias) for layer in model.layers]),
        "mlp fc": (x, [(layer.fc_weight, layer.fc_bias) for layer in model.layers]),
        "mlp proj": (h, [(layer.proj_weight.t(), layer.proj_bias) for layer in model.layers]),
        "output head": (x, [(model.tied_head, None)]),
    }
    rows = []
    for kind, (inputs, matrices) in kinds.items():
        in_out_copies = [(weight.contiguous(), bias) for weight, bias in matrices]  # (in, out)
        out_in_copies = [(weight.t().contiguous(), bias) for weight, bias in matrices]  # (out, in)

        def in_out(inputs: Tensor = inputs, matrices: list = in_out_copies) -> None:
            for weight, bias in matrices:
                torch.mm(inputs, weight) if bias is None else torch.addmm(bias, inputs, weight)

        def out_in(inputs: Tensor = inputs, matrices: list = out_in_copies) -> None:
            for weight, bias in matrices:
                F.linear(inputs, weight, bias)

        weight = matrices[0][0]
        row = {"kind": kind, "shape_in_out": list(weight.shape), "matrices": len(matrices),
               "bytes_per_matrix": weight.numel() * weight.element_size(),
               "stored": DecoderLayer.LAYOUT[kind],
               "in_out_ns": _best_ns(in_out, passes, model.device) / len(matrices),
               "out_in_ns": _best_ns(out_in, passes, model.device) / len(matrices)}
        if batch == 1:
            packed = [(onednn_linear(weight), bias) for weight, bias in out_in_copies]
            if all(kernel is not None for kernel, _ in packed):
                def onednn(inputs: Tensor = inputs, packed: list = packed) -> None:
                    for kernel, bias in packed:
                        kernel(inputs, bias)
                row["onednn_ns"] = _best_ns(onednn, passes, model.device) / len(matrices)
            del packed
            if compiled is not None:
                def generated(inputs: Tensor = inputs, matrices: list = out_in_copies) -> None:
                    for weight, bias in matrices:
                        compiled(inputs, weight, bias)
                row["compiled_ns"] = _best_ns(generated, passes, model.device) / len(matrices)
        rows.append(row)
        del in_out_copies, out_in_copies
    return {"batch": batch, "passes": passes, "dtype": str(config.dtype).removeprefix("torch."), "rows": rows}
