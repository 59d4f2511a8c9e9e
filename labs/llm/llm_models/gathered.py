"""Many tensors copied into one buffer, so that the kernel can put them on 2 MiB pages.

NOTE: why: the kernel backs memory with a 2 MiB page only where a whole aligned 2 MiB range lies inside one
allocation. Apart, an int8 layer's matrices (0.3-1.8 MiB each), a float32 attention output (1.3 MiB) and every norm
never can: they stay on 4 KiB pages wherever the allocator put them, which changes from process to process, and
two copies of one step's weights ran 5-11% apart in one run. Gathered, all but the buffer's two ends can be moved
onto 2 MiB pages (labkit.huge_pages settles them), in every process alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

ALIGN_BYTES = 64  # where each tensor starts in the buffer: a cache line, as torch's own allocations do


def gathered(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Contiguous copies of ``tensors`` in one buffer, each starting on a cache line: views of it, so the buffer
    lives as long as any of them."""
    sizes = [tensor.numel() * tensor.element_size() for tensor in tensors]
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + -(-size // ALIGN_BYTES) * ALIGN_BYTES)
    buffer = torch.empty(starts[-1], dtype=torch.uint8)
    copies = []
    for tensor, start, size in zip(tensors, starts, sizes):
        copy = buffer[start:start + size].view(tensor.dtype).view(tensor.shape)
        copy.copy_(tensor)
        copies.append(copy)
    return copies


def gather_parameters(module: nn.Module) -> nn.Module:
    """``module`` with every parameter and buffer moved into one buffer (``gathered``), in place; a parameter
    shared by two submodules (a tied output head) stays one tensor. The module, for chaining."""
    tensors = [*dict.fromkeys(module.parameters()), *dict.fromkeys(module.buffers())]
    with torch.no_grad():
        for tensor, copy in zip(tensors, gathered([t.detach() for t in tensors])):
            tensor.data = copy
    return module
