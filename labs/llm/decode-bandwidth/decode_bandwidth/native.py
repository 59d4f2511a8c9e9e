"""One token's attention over its cache in C (``llm_models/llama/attend_rows.c``, whose per-head loop the one-call
decode step runs too), built at run time and called through ctypes.

Why a hand-written attention: one token's scores are G = H / Hkv rows times a transposed (D, P) matrix per
key/value head, then G rows of weights times a (P, D) matrix: shapes a CPU BLAS is not tuned for, and torch's fused
attention does no better (both read SmolLM2's cache at about 6 GB/s on a 2-core Xeon whose plain sum reads 16).
The loop reads each stored key row and value row once, only the positions the cache holds (no mask), serving a
key/value head's G queries from the same row. The benchmark times it beside the two products it replaces. (The
int8 weight-only product's loop is llm_models.kernels.int8_loop.)

The build is llm_models.native's (once per process; its seconds are recorded). The attention is also a custom
operator, so a compiled region calls it as one opaque step, at the thread count in force.
"""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.llama.native_step import build_attention as build  # the loop the one-call step attends with too


def unavailable() -> str | None:
    """None, or why the C loop cannot run here."""
    return build().reason


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
    build().require("the C loop").attend_rows(q.data_ptr(), keys.data_ptr(), values.data_ptr(), out.data_ptr(), scores.data_ptr(),
                         kv_heads, group, dim, capacity, length, torch.get_num_threads())
    return out


@attend_rows_op.register_fake
def _attend_rows_shape(q: Tensor, keys: Tensor, values: Tensor, position: Tensor) -> Tensor:
    return torch.empty_like(q)
