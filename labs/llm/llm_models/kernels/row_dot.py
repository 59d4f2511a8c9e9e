"""One row times a weight matrix as the reduction it is, ``(x * W).sum(-1) + b``, and the static-shape
``torch.compile`` that turns it into one vectorised C++ loop per row.

At batch 1 every weight multiply is a matrix-vector product, and a step is bounded by how fast those products
stream their matrices; inductor's loop reads each row of W once, contiguously, and keeps nothing else in memory.
``compile_static`` is also how the decode lab compiles whole layers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# Each matrix kind in each dtype and thread count is a compiled variant of the one function below, and dynamo
# counts variants of one function against a small limit (8) past which it would silently run it eagerly:
# the limit is raised to cover every variant a run makes, and reaching it is made an error instead.
RECOMPILE_LIMIT = 64


def row_dot(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (1, in) times weight (out, in), plus bias: out dot products of contiguous rows, (1, out)."""
    out = (x.unsqueeze(-2) * weight).sum(-1)  # (1, 1, in) * (out, in) -> (1, out, in) -> (1, out), fused
    return out if bias is None else out + bias


def compile_static(function: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``function`` through inductor, static shapes; one compiled variant per (shape, dtype, threads)."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch.compile(function, dynamic=False, fullgraph=True)


def compiled_row_dot() -> Callable[[Tensor, Tensor, Tensor | None], Tensor]:
    """row_dot through inductor, static shapes; one compiled variant per (shape, dtype, threads)."""
    return compile_static(row_dot)
