"""Attention over a quantized cache, two ways, and the peak of the temporaries each creates.

``dequantized_attention`` dequantizes the whole cache into float tensors first and runs the first lab's
fused attention on them: simple, and the float copy of every position is alive at once (the mlx-lm report
of peak memory 40-50 % over fp16). ``blockwise_attention`` dequantizes one block of positions at a time
and combines the blocks with an online softmax (a running max, a running denominator and a rescaled
accumulator, as flash attention does), so only one block's float copy is alive at a time.

``AllocationTracker`` measures either: a dispatch mode that sees every tensor an operator returns,
counts the bytes of each new storage while a tensor still refers to it, and keeps the peak and the
largest single allocation. It is deterministic (CPython frees a temporary when its last reference goes),
and it sees what operators return, not the scratch a kernel allocates inside itself.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from llm_models.attention import causal_attention

from .cache import QuantizedKVCache


# --8<-- [start:dequantized_attention]
def dequantized_attention(q: Tensor, cache: QuantizedKVCache, offset: int) -> Tensor:
    """All at once: q (B, H, Tq, D) over every cached position, the cache dequantized first."""
    keys, values = cache.keys_values()  # (B, Hkv, T, D) each: the whole cache in float, alive together
    return causal_attention(q, keys, values, offset)
# --8<-- [end:dequantized_attention]


# --8<-- [start:blockwise_attention]
def blockwise_attention(q: Tensor, cache: QuantizedKVCache, offset: int, block_tokens: int = 64) -> Tensor:
    """Block by block: the same attention, one dequantized block of positions alive at a time."""
    batch, heads, queries, head_dim = q.shape
    kv_heads = cache.kv_heads
    if heads % kv_heads or offset + queries != cache.length:
        raise ValueError(f"{heads} query heads at offset {offset} with {queries} queries do not fit a cache "
                         f"of {kv_heads} key/value heads and {cache.length} positions")
    group = heads // kv_heads  # query heads per key/value head: one matmul serves all of them
    q = q.reshape(batch, kv_heads, group * queries, head_dim) / math.sqrt(head_dim)  # (B, Hkv, g*Tq, D)
    query_positions = (offset + torch.arange(queries, device=q.device)).repeat(group)  # (g*Tq,)
    running_max = torch.full((batch, kv_heads, group * queries, 1), float("-inf"), dtype=q.dtype)
    denominator = torch.zeros_like(running_max)
    accumulator = torch.zeros_like(q)  # (B, Hkv, g*Tq, D)
    for start, keys, values in cache.blocks(block_tokens):  # keys, values (B, Hkv, C, D)
        scores = q @ keys.transpose(-2, -1)  # (B, Hkv, g*Tq, C)
        key_positions = torch.arange(start, start + keys.shape[2], device=q.device)
        scores = scores.masked_fill(key_positions[None, :] > query_positions[:, None], float("-inf"))
        new_max = torch.maximum(running_max, scores.amax(-1, keepdim=True))  # finite: key 0 is always visible
        weights = torch.exp(scores - new_max)  # (B, Hkv, g*Tq, C)
        rescale = torch.exp(running_max - new_max)  # earlier blocks were weighted against a smaller max
        denominator = denominator * rescale + weights.sum(-1, keepdim=True)
        accumulator = accumulator * rescale + weights @ values
        running_max = new_max
    return (accumulator / denominator).reshape(batch, heads, queries, head_dim)
# --8<-- [end:blockwise_attention]


class AllocationTracker(TorchDispatchMode):
    """Bytes of the tensors operators create while the mode is active: live now, peak, largest one.

    A new storage is one no input of the operator shares (a view or an in-place result is not an
    allocation); its bytes count until the last tensor seen referring to it is gone.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.largest = 0
        self._references: dict[int, int] = {}  # storage address -> tracked tensors still referring to it
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)}
        for tensor in tree_flatten(result)[0]:
            if not isinstance(tensor, Tensor):
                continue
            storage = tensor.untyped_storage()
            address = storage.data_ptr()
            if address in self._references:  # another tensor on a storage we count: keep it counted
                self._references[address] += 1
            elif address in inputs or storage.nbytes() == 0:
                continue  # a view of, or a write into, memory that existed before
            else:
                self._references[address], self._sizes[address] = 1, storage.nbytes()
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
                self.largest = max(self.largest, storage.nbytes())
            weakref.finalize(tensor, self._release, address)
        return result

    def _release(self, address: int) -> None:
        self._references[address] -= 1
        if self._references[address] == 0:
            del self._references[address]
            self.live -= self._sizes.pop(address)


def peak_bytes(function: Any, *args: Any, **kwargs: Any) -> tuple[Any, AllocationTracker]:
    """Run ``function`` under an AllocationTracker; its result and the tracker (peak, largest)."""
    with torch.inference_mode(), AllocationTracker() as tracker:
        result = function(*args, **kwargs)
    return result, tracker
