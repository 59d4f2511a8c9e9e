"""One new token per request attending over its own blocks of a paged cache, two ways that give the same answer.

A paged pool stores keys and values as (blocks, Hkv, S, D): a block holds S positions, and a request's block table
lists its blocks in order, so its position p lives in block ``table[p // S]``, row ``p % S``.

- ``gathered`` (the reference, and the way where no C compiler is found): copy each request's blocks through its
  table into one padded (B, Hkv, width x S, D) tensor, mask the padding and the positions past the request's own,
  two products. Per layer and step that writes a copy of every request's whole context (keys and values), then
  reads it back: 2 x B x width x S x Hkv x D elements written beyond the rows attention needs.
- ``in_place`` (``attend_blocks.c``): reads each stored row once, where it lies, through the table; each request
  reads its own positions only, so there is neither padding nor mask.

``in_place`` matches ``gathered`` within ATOL (tests), for float32 and bfloat16 caches.
"""

from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from llm_models import native
from llm_models.native import Build

SOURCES = (Path(__file__).with_name("attend_blocks.c"),)
# Both ways sum in float32; they differ only in order (the loop's per-row sums against BLAS's blocked ones).
# Over SmolLM2-size heads (64 wide, contexts to 2,048) float32 sums in another order part by about 1e-6 at outputs
# of order 1; 1e-4 leaves room for longer contexts and still fails a row that reads a wrong block or one position
# too many or too few (tests show those part by 1e-2 or more).
ATOL = 1e-4
CACHE_DTYPES = {torch.float32: 0, torch.bfloat16: 1}  # the loop's flag for each storage type it reads


@functools.cache
def loops() -> Build:
    """attend_blocks, built once per process (llm_models.native), its argument types declared."""
    built = native.build(SOURCES)
    if built.library is not None:
        built.library.attend_blocks.restype = None
        built.library.attend_blocks.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_long] * 8 + [ctypes.c_int] * 2
    return built


def unavailable() -> str | None:
    """None, or why the in-place loop cannot run here (then serving gathers)."""
    return loops().reason


def check(q: Tensor, keys: Tensor, values: Tensor, tables: Tensor, lengths: Tensor) -> None:
    """What both ways need, named where it is wrong."""
    check_shapes(q, keys, values)
    check_tables(q.shape[0], tables, lengths, keys.shape[0], keys.shape[2])


def check_shapes(q: Tensor, keys: Tensor, values: Tensor) -> None:
    _, heads, one, dim = q.shape
    _, kv_heads, _, kv_dim = keys.shape
    if one != 1 or kv_dim != dim or keys.shape != values.shape or heads % kv_heads:
        raise ValueError(f"paged attention takes q (B, H, 1, D) over keys and values (blocks, Hkv, S, D) with H a "
                         f"multiple of Hkv, got q {tuple(q.shape)}, keys {tuple(keys.shape)}, values {tuple(values.shape)}")


def check_tables(batch: int, tables: Tensor, lengths: Tensor, blocks: int, size: int) -> None:
    if tables.dim() != 2 or tables.shape[0] != batch or lengths.shape != (batch,):
        raise ValueError(f"paged attention needs one table row and one length per request ({batch}), got tables "
                         f"{tuple(tables.shape)} and lengths {tuple(lengths.shape)}")
    if int(lengths.min()) < 1 or int(lengths.max()) > tables.shape[1] * size:
        raise ValueError(f"paged attention: lengths {lengths.tolist()} must lie in 1 .. {tables.shape[1] * size} "
                         f"(the tables' {tables.shape[1]} blocks of {size} positions)")
    if int(tables.min()) < 0 or int(tables.max()) >= blocks:
        raise ValueError(f"paged attention: the tables name blocks outside 0 .. {blocks - 1}")


@dataclass(frozen=True)
class StepTables:
    """One decode step's block tables and lengths, checked and laid out as the loop reads them once for every layer:
    each layer's call then costs the loop and its output, not four reductions and two copies (``step_tables``)."""

    tables: Tensor  # (B, width) int64, contiguous
    lengths: Tensor  # (B,) int64
    longest: int  # the most positions any row reads
    blocks: int  # the pool's blocks and positions per block the tables were checked against
    size: int


def step_tables(tables: Tensor, lengths: Tensor, blocks: int, size: int) -> StepTables:
    """``tables`` (B, width) and ``lengths`` (B,) checked against a pool of ``blocks`` blocks of ``size``."""
    check_tables(tables.shape[0], tables, lengths, blocks, size)
    lengths = lengths.to(torch.int64).contiguous()
    return StepTables(tables.to(torch.int64).contiguous(), lengths, int(lengths.max()), blocks, size)


def gathered(q: Tensor, keys: Tensor, values: Tensor, tables: Tensor, lengths: Tensor) -> Tensor:
    """The reference: q (B, H, 1, D) over each request's first ``lengths[b]`` positions, its blocks copied through
    ``tables`` (B, width) into one padded tensor -> (B, H, 1, D). Every block of every row of ``tables`` is copied;
    the mask hides what the request does not hold."""
    check(q, keys, values, tables, lengths)
    batch, heads, _, dim = q.shape
    kv_heads, size = keys.shape[1], keys.shape[2]
    width = tables.shape[1]

    def gather(storage: Tensor) -> Tensor:  # (B, width, Hkv, S, D) -> (B, Hkv, width x S, D)
        return storage[tables].transpose(1, 2).reshape(batch, kv_heads, width * size, dim)

    visible = torch.arange(width * size)[None, :] < lengths[:, None]  # (B, K): positions 0 .. length - 1
    grouped = q.reshape(batch, kv_heads, heads // kv_heads, dim).float()  # (B, Hkv, G, D)
    scores = grouped @ gather(keys).float().transpose(-1, -2) / math.sqrt(dim)  # (B, Hkv, G, K)
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    attended = scores.softmax(dim=-1) @ gather(values).float()  # (B, Hkv, G, D)
    return attended.to(q.dtype).reshape(batch, heads, 1, dim)


def in_place(q: Tensor, keys: Tensor, values: Tensor, tables: Tensor, lengths: Tensor) -> Tensor:
    """The same attention, each stored row read once where it lies (attend_blocks.c) -> (B, H, 1, D). ``keys``
    and ``values`` may be views with a larger step between blocks (the serving pool keeps every layer's heads side
    by side); within a block their rows must be contiguous."""
    return in_place_over(q, keys, values, step_tables(tables, lengths, keys.shape[0], keys.shape[2]))


def in_place_over(q: Tensor, keys: Tensor, values: Tensor, step: StepTables) -> Tensor:
    """``in_place`` over tables already checked for this step (``step_tables``), the way every layer calls it."""
    check_shapes(q, keys, values)
    if (keys.shape[0], keys.shape[2]) != (step.blocks, step.size) or q.shape[0] != step.tables.shape[0]:
        raise ValueError(f"paged attention: the step's tables were checked for {step.tables.shape[0]} rows over "
                         f"{step.blocks} blocks of {step.size}, got q {tuple(q.shape)} over keys {tuple(keys.shape)}")
    if keys.dtype not in CACHE_DTYPES or values.dtype != keys.dtype:
        raise ValueError(f"the in-place loop reads float32 or bfloat16 caches, got {keys.dtype} and {values.dtype}")
    batch, heads, _, dim = q.shape
    kv_heads, size = keys.shape[1], keys.shape[2]
    inner = (size * dim, dim, 1)
    if tuple(keys.stride()[1:]) != inner or values.stride() != keys.stride():
        raise ValueError(f"the in-place loop needs each block's rows contiguous (strides (*, {inner[0]}, {dim}, 1)), "
                         f"got keys {keys.stride()} and values {values.stride()}")
    library = loops().library
    if library is None:
        raise RuntimeError(f"the in-place loop cannot run: {loops().reason}")
    grouped = q.reshape(batch, kv_heads, heads // kv_heads, dim).float().contiguous()  # (B, Hkv, G, D)
    out = torch.empty_like(grouped)
    scores = torch.empty(batch, kv_heads, grouped.shape[2], step.longest, dtype=torch.float32)
    library.attend_blocks(grouped.data_ptr(), keys.data_ptr(), values.data_ptr(), step.tables.data_ptr(),
                          step.lengths.data_ptr(), out.data_ptr(), scores.data_ptr(), batch, kv_heads,
                          grouped.shape[2], dim, size, keys.stride(0), step.tables.shape[1], step.longest,
                          CACHE_DTYPES[keys.dtype], torch.get_num_threads())
    return out.to(q.dtype).reshape(batch, heads, 1, dim)
