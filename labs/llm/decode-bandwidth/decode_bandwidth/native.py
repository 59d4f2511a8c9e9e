"""This lab's two loops in C, built at run time and called through ctypes: the int8 weight-only product
(``int8_rows.c``) and one token's attention over its cache (``attend_rows.c``).

Why a hand-written product: at batch 1 an int8 weight-only step is as fast as the loop that widens each code to
float32 while it streams. The pinned PyTorch has two such products on a CPU, ``torch._weight_int8pack_mm`` and
the loop inductor generates for ``(x * codes.float()).sum(-1) * scale``; on an AVX2 CPU both stream well under a
gigabyte per second (the kernel table measures them beside this one), slower than the float32 matrix they stand
in for. A loop written for the one-row case, four rows at a time where the CPU has AVX-512, reads several times
faster.

Why a hand-written attention: one token's scores are G = H / Hkv rows times a transposed (D, P) matrix per
key/value head, then G rows of weights times a (P, D) matrix: shapes a CPU BLAS is not tuned for, and torch's fused
attention does no better (both read SmolLM2's cache at about 6 GB/s on a 2-core Xeon whose plain sum reads 16).
The loop reads each stored key row and value row once, only the positions the cache holds (no mask), serving a
key/value head's G queries from the same row. The benchmark times it beside the two products it replaces.

The build is llm_models.native's (once per process; its seconds are recorded). The attention is also a custom operator, so a compiled region
calls it as one opaque step, at the thread count in force.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from llm_models import native
from llm_models.native import Build

SOURCES = (Path(__file__).with_name("int8_rows.c"), Path(__file__).with_name("attend_rows.c"))


@functools.cache
def build() -> Build:
    """The two loops, built once per process (llm_models.native), their argument types declared."""
    built = native.build(SOURCES)
    if built.library is not None:
        loaded = built.library
        loaded.int8_rows.restype = loaded.attend_rows.restype = None
        loaded.int8_rows.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long, ctypes.c_long, ctypes.c_int]
        loaded.attend_rows.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_long] * 5 + [ctypes.c_int]
    return built


def unavailable() -> str | None:
    """None, or why the C loops cannot run here."""
    return build().reason


def loaded() -> ctypes.CDLL:
    library = build().library
    if library is None:
        raise RuntimeError(f"the C loops cannot run: {build().reason}")
    return library


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
    loaded().int8_rows(x.data_ptr(), codes.data_ptr(), scale.data_ptr(), out.data_ptr(), rows, cols, torch.get_num_threads())
    return out if bias is None else out + bias


def attend(q: Tensor, keys: Tensor, values: Tensor, position: Tensor) -> Tensor:
    """One token's attention: q (Hkv, G, D) over positions 0 .. ``position`` (a one-element tensor) of float32 keys
    and values (1, Hkv, P, D), read where they lie -> (Hkv, G, D)."""
    return torch.ops.decode_bandwidth.attend_rows(q, keys, values, position)


# NOTE: a compiled region cannot trace into ctypes; as a custom operator with a fake (shape-only) twin the loop is
# one opaque call in its graph, run at the thread count in force when the step runs.
@torch.library.custom_op("decode_bandwidth::attend_rows", mutates_args=())
def attend_rows_op(q: Tensor, keys: Tensor, values: Tensor, position: Tensor) -> Tensor:
    kv_heads, group, dim = q.shape
    if (q.dtype != torch.float32 or keys.dtype != torch.float32 or values.dtype != torch.float32
            or keys.shape != values.shape or tuple(keys.shape[:2]) != (1, kv_heads) or keys.shape[3] != dim
            or position.numel() != 1):
        raise ValueError(f"attend_rows takes float32 q (Hkv, G, D) over float32 keys and values (1, Hkv, P, D) and "
                         f"one position, got q {tuple(q.shape)} {q.dtype}, keys {tuple(keys.shape)} {keys.dtype}, "
                         f"values {tuple(values.shape)} {values.dtype}, {position.numel()} positions")
    capacity, length = keys.shape[2], int(position.reshape(-1)[0]) + 1
    if not 1 <= length <= capacity:
        raise ValueError(f"attend_rows: position {length - 1} is outside a cache of {capacity} positions")
    q, keys, values = q.contiguous(), keys.contiguous(), values.contiguous()  # the cache's buffers already are
    out = torch.empty(kv_heads, group, dim, dtype=torch.float32)
    scores = torch.empty(kv_heads, group, length, dtype=torch.float32)
    loaded().attend_rows(q.data_ptr(), keys.data_ptr(), values.data_ptr(), out.data_ptr(), scores.data_ptr(),
                         kv_heads, group, dim, capacity, length, torch.get_num_threads())
    return out


@attend_rows_op.register_fake
def _attend_rows_shape(q: Tensor, keys: Tensor, values: Tensor, position: Tensor) -> Tensor:
    return torch.empty_like(q)
