"""Every kernel the labs can multiply rows by a weight matrix with, and the measurement that picks among them.

At batch 1 a decode step's weight multiplies are matrix-vector products: each weight is read once for one
multiply-add, so the kernel that streams its matrix fastest wins, and which one that is depends on the CPU, the
library and the shape. The candidates, over float32 weights:

- ``out_in``: ``F.linear`` over the (out, in) matrix (torch's BLAS, MKL in the pinned build);
- ``in_out``: ``addmm`` over an (in, out) copy, the other layout of the same BLAS;
- ``onednn``: oneDNN's linear over a copy packed once into its blocked layout;
- ``compiled``: the row dot ``(x * W).sum(-1) + b`` that ``torch.compile`` turns into one C++ loop per row;

and over int8 codes with one float32 scale per row (llm_models.kernels.quantize):

- ``int8-compiled``: the dequantize-and-row-dot ``(x * codes).sum(-1) * scale`` written for ``torch.compile``,
  gpt-fast's approach: each code is widened to float32 inside the loop that streams it;
- ``int8pack``: torch's own int8 weight-only product, ``torch._weight_int8pack_mm``;
- ``int8-c``: the same loop written by hand in C (llm_models.kernels.int8_loop), for CPUs where the two above
  stream slowly.

The float32 kernels are torch's own (BLAS, oneDNN, inductor's generated C++); the C loop needs only the
compiler inductor already uses.

``llm_models.kernels.timing`` times them, the one way for every table: the decode lab's benchmark takes the
fastest per kind, at each thread count, and records the table and the choice; the serving core times the float32
kernels that multiply any number of rows (``out_in``, ``in_out``, ``onednn``) the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models.kernels import int8_loop
from llm_models.kernels.quantize import quantize_rows
from llm_models.kernels.row_dot import compile_static, row_dot
from llm_models.kernels.timing import Prepared


def int8_row_dot(x: Tensor, codes: Tensor, scale: Tensor, bias: Tensor | None) -> Tensor:
    """The same over int8 codes (out, in) and their row scales (out,): dequantized inside the reduction."""
    out = (x.unsqueeze(-2) * codes.float()).sum(-1) * scale
    return out if bias is None else out + bias


@functools.cache
def shared_row_dot() -> Callable[[Tensor, Tensor, Tensor | None], Tensor]:
    """row_dot through inductor (one compiled function per process, a deliberate cache)."""
    return compile_static(row_dot)


@functools.cache
def compiled_int8_row_dot() -> Callable[..., Tensor]:
    return compile_static(int8_row_dot)


@dataclass(frozen=True)
class Kernel:
    name: str
    weights: str  # what its prepared matrix holds: "float32", or "int8" codes with float32 row scales
    description: str
    prepare: Callable[[Tensor, Tensor | None], Prepared]  # (out, in) float32 weight and bias -> its tensors
    eager: Callable[..., Tensor]  # (x (1, in), *prepared) -> (1, out), called from Python
    # the same inside a region torch.compile generates (the row dots inline there); None: eager steps only
    traced: Callable[..., Tensor] | None
    available: Callable[[], str | None]  # None, or why this build or machine cannot run it

    def bytes_per_matrix(self, rows: int, cols: int) -> int:
        """What one product reads of its matrix: the codes and their scales, or the float32 weights."""
        return rows * cols + 4 * rows if self.weights == "int8" else 4 * rows * cols


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return F.linear(x, weight, bias)


def in_out(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)


def onednn_pack(weight: Tensor, bias: Tensor | None) -> Prepared:
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 1), bias


def onednn(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def onednn_available() -> str | None:
    if not torch.backends.mkldnn.is_available():
        return "this PyTorch build has no oneDNN"
    try:
        onednn(torch.ones(1, 8), *onednn_pack(torch.ones(4, 8), None))
    except RuntimeError as error:
        return f"oneDNN's linear refused a float32 matrix: {str(error).splitlines()[0]}"
    return None


def int8_prepare(weight: Tensor, bias: Tensor | None) -> Prepared:
    codes, scale = quantize_rows(weight)
    return codes, scale, bias


def int8pack(x: Tensor, codes: Tensor, scale: Tensor, bias: Tensor | None) -> Tensor:
    out = torch._weight_int8pack_mm(x, codes, scale)
    return out if bias is None else out + bias


def int8pack_available() -> str | None:
    try:
        int8pack(torch.ones(1, 8), torch.ones(4, 8, dtype=torch.int8), torch.ones(4), None)
    except (RuntimeError, AttributeError) as error:
        return f"torch._weight_int8pack_mm refused: {str(error).splitlines()[0]}"
    return None


def always() -> str | None:
    return None


def same(weight: Tensor, bias: Tensor | None) -> Prepared:
    return weight.contiguous(), bias


def transposed(weight: Tensor, bias: Tensor | None) -> Prepared:
    return weight.t().contiguous(), bias


def eager_row_dot(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return shared_row_dot()(x, weight, bias)


def eager_int8_row_dot(x: Tensor, codes: Tensor, scale: Tensor, bias: Tensor | None) -> Tensor:
    return compiled_int8_row_dot()(x, codes, scale, bias)


KERNELS: dict[str, Kernel] = {kernel.name: kernel for kernel in (
    Kernel("out_in", "float32", "F.linear over the (out, in) matrix: torch's BLAS", same, linear, linear, always),
    Kernel("in_out", "float32", "addmm over an (in, out) copy: torch's BLAS, the other layout", transposed, in_out,
           in_out, always),
    # eager only: inductor's lowering of the packed linear asserts on a weight that is a region's input
    Kernel("onednn", "float32", "oneDNN's linear over a copy packed once into its blocked layout", onednn_pack,
           onednn, None, onednn_available),
    Kernel("compiled", "float32", "the loop torch.compile generates for (x * W).sum(-1) + b, one pass per row",
           same, eager_row_dot, row_dot, always),
    Kernel("int8-compiled", "int8", "the loop torch.compile generates for (x * codes).sum(-1) x scale + b",
           int8_prepare, eager_int8_row_dot, int8_row_dot, always),
    Kernel("int8pack", "int8", "torch._weight_int8pack_mm, torch's own int8 weight-only product", int8_prepare,
           int8pack, int8pack, int8pack_available),
    Kernel("int8-c", "int8", "a C loop written for the decode lab (int8_rows.c): each code widened to float32 inside the "
           "loop that streams it, four rows at a time where the CPU has AVX-512, the rows split across the threads",
           int8_prepare, int8_loop.int8_rows, None,
           int8_loop.unavailable),
)}
FLOAT32 = tuple(name for name, kernel in KERNELS.items() if kernel.weights == "float32")
INT8 = tuple(name for name, kernel in KERNELS.items() if kernel.weights == "int8")


def available(names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The kernels among ``names`` that run here, and why each other one does not."""
    runs, missing = [], {}
    for name in names:
        reason = KERNELS[name].available()
        if reason is None:
            runs.append(name)
        else:
            missing[name] = reason
    return runs, missing
