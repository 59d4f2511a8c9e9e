"""A policy's per-layer store, made for a model's cache shape: the one place that maps ``Policy`` to code."""

from __future__ import annotations

import torch

from .config import Policy
from .ring import RingStore
from .rotary import Rotary
from .sinks import SinkStore
from .snapkv import SnapStore
from .stores import FullStore, Store

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def make_store(policy: Policy, batch: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
               device: torch.device | str, rotary: Rotary) -> Store:
    """One layer's store; ``dtype`` is the model's, which every policy stores but sinks (its own dtype)."""
    shape = (batch, kv_heads, head_dim)
    if policy.name == "full":
        return FullStore(*shape, dtype, device, rotary)
    if policy.name == "window":
        return RingStore(policy.slots, *shape, dtype, device, rotary)
    if policy.name == "sinks":
        return SinkStore(policy.sinks, policy.slots, policy.rule, *shape, DTYPES[policy.dtype], device, rotary)
    return SnapStore(policy.slots, policy.observation, policy.kernel, *shape, dtype, device, rotary)
