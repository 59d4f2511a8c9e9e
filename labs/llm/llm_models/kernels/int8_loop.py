"""The int8 weight-only product in C (``int8_rows.c``), built at run time and called through ctypes.

Why a hand-written product: at batch 1 an int8 weight-only step is as fast as the loop that widens each code to
float32 while it streams. The pinned PyTorch has two such products on a CPU, ``torch._weight_int8pack_mm`` and
the loop inductor generates for ``(x * codes.float()).sum(-1) * scale``; on an AVX2 CPU both stream well under a
gigabyte per second (the decode lab's kernel table measures them beside this one), slower than the float32 matrix
they stand in for. A loop written for the one-row case, four rows at a time where the CPU has AVX-512, reads
several times faster.

The build is llm_models.native's (once per process; its seconds are recorded by the decode lab).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from llm_models import native
from llm_models.native import Build

SOURCES = (Path(__file__).with_name("int8_rows.c"),)


@functools.cache
def build() -> Build:
    """The loop, built once per process (llm_models.native), its argument types declared."""
    built = native.build(SOURCES)
    if built.library is not None:
        built.library.int8_rows.restype = None
        built.library.int8_rows.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long, ctypes.c_long, ctypes.c_int]
    return built


def unavailable() -> str | None:
    """None, or why the C loop cannot run here."""
    return build().reason


def int8_rows(x: Tensor, codes: Tensor, scale: Tensor, bias: Tensor | None) -> Tensor:
    """x (1, in) float32 times int8 ``codes`` (out, in) with row ``scale`` (out,): (1, out) float32."""
    rows, cols = codes.shape
    if (x.dtype != torch.float32 or x.numel() != cols or codes.dtype != torch.int8 or scale.shape != (rows,)
            or scale.dtype != torch.float32):
        raise ValueError(f"int8_rows multiplies one float32 row of {cols} by int8 codes ({rows}, {cols}) with "
                         f"{rows} float32 scales, got x {tuple(x.shape)} {x.dtype}, codes {codes.dtype}, "
                         f"scale {tuple(scale.shape)} {scale.dtype}")
    x, codes, scale = x.contiguous(), codes.contiguous(), scale.contiguous()  # the loop reads them row-major
    out = torch.empty(1, rows, dtype=torch.float32)
    build().require("the C loop").int8_rows(x.data_ptr(), codes.data_ptr(), scale.data_ptr(), out.data_ptr(), rows, cols, torch.get_num_threads())
    return out if bias is None else out + bias
