"""Many tensors copied into one buffer, so that the kernel can put them on 2 MiB pages.

NOTE: why: the kernel backs memory with a 2 MiB page only where a whole aligned 2 MiB range lies inside one
allocation. Apart, an int8 layer's matrices (0.3-1.8 MiB each), a float32 attention output (1.3 MiB) and every norm
never can: they stay on 4 KiB pages wherever the allocator put them, which changes from process to process, and
two copies of one step's weights ran 5-11% apart in one run. Gathered, all but the buffer's two ends can be moved
onto 2 MiB pages (labkit.huge_pages settles them), in every process alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

ALIGN_BYTES = 64  # where each tensor starts in the buffer: a cache line, as torch's own allocations do


def gathered_empty(layouts: Sequence[tuple[tuple[int, ...], torch.dtype]]) -> list[Tensor]:
    """Uninitialised tensors of the given (shape, dtype) in one buffer, each starting on a cache line: views of it,
    so the buffer lives as long as any of them. For a caller that writes each one straight into place."""
    sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in layouts]
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + -(-size // ALIGN_BYTES) * ALIGN_BYTES)
    buffer = torch.empty(starts[-1], dtype=torch.uint8)
    return [buffer[start:start + size].view(dtype).view(shape)
            for (shape, dtype), start, size in zip(layouts, starts, sizes)]


def gathered(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Contiguous copies of ``tensors`` in one buffer (``gathered_empty``)."""
    copies = gathered_empty([(tuple(tensor.shape), tensor.dtype) for tensor in tensors])
    for copy, tensor in zip(copies, tensors):
        copy.copy_(tensor)
    return copies


def gather_parameters(module: nn.Module) -> nn.Module:
    """``module`` with every parameter and buffer moved into one buffer (``gathered``), in place; a parameter
    shared by two submodules (a tied output head) stays one tensor. The module, for chaining."""
    tensors = [*dict.fromkeys(module.parameters()), *dict.fromkeys(module.buffers())]
    with torch.no_grad():
        for tensor, copy in zip(tensors, gathered([t.detach() for t in tensors])):
            tensor.data = copy
    return module
