"""transformers' quantized cache layers (QuantizedCache's quanto, HQQ and fp8 backends) measured like ours.

Needs optimum-quanto (quanto backend) or hqq (HQQ backend), which requirements.txt does not pin yet:
``labs/.venv/bin/pip install optimum-quanto==0.2.7 hqq==0.2.8.post1``; the tests that use this module are
skipped without them. A layer is driven directly (``layer.update(k, v)`` with (B, Hkv, T, D) entries), so
no model config is needed, and ``TransformersStore`` lets llm_models.toy.model.DecoderBlock and
kv_quant.errors.error_chain use it exactly as they use our caches.

What the layers do, read from transformers 5.23.0 (cache_utils.QuantizedLayer.update): the first update
quantizes the whole prompt and returns it unquantized; later tokens go to a full-precision residual, and
when the residual would reach ``residual_length`` the whole cache is dequantized, concatenated with it and
quantized again, and the residual is emptied (so between 0 and R - 1 recent tokens are exact, against
KIVI's at least R). Every update returns every position dequantized at once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def stored_tensors(layer: Any) -> dict[str, Tensor]:
    """Every tensor a transformers quantized layer keeps: codes, scales, zeros or shifts, the residual."""
    tensors: dict[str, Tensor] = {}
    for side, state in (("keys", layer._quantized_keys), ("values", layer._quantized_values)):
        if isinstance(state, tuple) and isinstance(state[1], dict):  # HQQ: (codes, meta)
            tensors[f"{side}.codes"] = state[0]
            tensors.update({f"{side}.{name}": state[1][name] for name in ("scale", "zero")})
        elif isinstance(state, tuple):  # fp8: (codes, scale)
            tensors[f"{side}.codes"], tensors[f"{side}.scale"] = state
        else:  # quanto: a WeightQBitsTensor with packed codes, float scale and float shift
            tensors.update({f"{side}.codes": state._data._data, f"{side}.scale": state._scale,
                            f"{side}.shift": state._shift})
    if isinstance(getattr(layer, "keys", None), Tensor) and layer.keys.dim() == 4:
        tensors.update({"residual.keys": layer.keys, "residual.values": layer.values})
    return tensors


def stored_bytes(layer: Any) -> int:
    return sum(t.numel() * t.element_size() for t in stored_tensors(layer).values())


def keys_values(layer: Any) -> tuple[Tensor, Tensor]:
    """Every position as the layer would hand it to attention now: dequantized part, then residual."""
    keys, values = layer._dequantize(layer._quantized_keys), layer._dequantize(layer._quantized_values)
    if isinstance(getattr(layer, "keys", None), Tensor) and layer.keys.dim() == 4 and layer.keys.shape[-2]:
        keys, values = torch.cat((keys, layer.keys), dim=-2), torch.cat((values, layer.values), dim=-2)
    return keys, values


def group_members(make_layer: Any, keys: Tensor, values: Tensor, index: tuple[int, int, int, int]) -> Tensor:
    """Which key elements share a quantization group with ``keys[index]``: quantize the keys with that element
    made hugely positive, then hugely negative, and see which other dequantized elements move against the
    plain keys (two probes, since the group's minimum, or maximum, stays exact under one of them).
    A boolean (B, H, T, D)."""
    plain = make_layer()
    plain.update(keys.clone(), values.clone())
    reference = plain._dequantize(plain._quantized_keys)
    moved = torch.zeros_like(keys, dtype=torch.bool)
    for sign in (1, -1):
        bumped = keys.clone()
        bumped[index] = sign * 1000 * keys.abs().max()
        marked = make_layer()
        marked.update(bumped, values.clone())
        moved |= (reference - marked._dequantize(marked._quantized_keys)).abs() > 1e-3
    moved[index] = False
    return moved


class TransformersStore:
    """A transformers cache layer as a KVStore (``length``, ``update``) with ``keys_values``."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer

    @property
    def length(self) -> int:
        return self.layer.cumulative_length

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        return self.layer.update(keys, values)

    def keys_values(self) -> tuple[Tensor, Tensor]:
        return keys_values(self.layer)
