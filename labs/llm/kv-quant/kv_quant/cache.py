"""One layer's keys and values stored in a chosen format, behind one interface.

    cache = make_cache(CacheFormat("int4", group_size=32), batch=1, kv_heads=2, head_dim=64)
    cache.append(k, v)            # new positions, (B, Hkv, T_new, D) each, in the model's dtype
    keys, values = cache.keys_values()   # every position, dequantized all at once, (B, Hkv, T, D)
    for start, k_block, v_block in cache.blocks(64): ...   # or block by block (kv_quant.attention)
    cache.stored_bytes() == cache.formula_bytes()          # counted from tensors == the format's formula

Everything a format keeps is a tensor, listed by ``stored()``: codes, scales, zero points, kivi's
full-precision residual, fp8's per-layer scales; ``stored_bytes`` adds up exactly those tensors' bytes.
``update(k, v)`` (append, then return ``keys_values()``) makes every cache a KVStore for
llm_models.toy.model.DecoderBlock: that path dequantizes the whole cache at every step, as transformers'
QuantizedCache does; kv_quant.attention.blockwise_attention dequantizes one block at a time instead.
Caches grow by concatenation along the token axis, like the first lab's cache: what they hold is what
they use, so stored bytes can be compared with a formula without any capacity slack.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from llm_models.cache_formats import FP8_MAX, CacheFormat, formula_bytes
from llm_models.kv_bytes import kv_cache_bytes

from . import codecs
from .codecs import Fields

TOKEN_AXIS = -2  # every stored field keeps tokens (or token groups) second to last


class QuantizedKVCache:
    """Formats that encode every token on its own: the baselines, int8, int4, q8_0, q4_0, fp8; for int8, int4,
    q8_0 and q4_0 on one side only (``CacheFormat.sides``), the other side stored as float32.

    Shape contract: ``append`` takes keys and values (B, Hkv, T_new, D); ``keys_values`` and ``blocks``
    return them in ``dtype`` (the model's), dequantized.
    """

    def __init__(self, fmt: CacheFormat, batch: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32) -> None:
        if min(batch, kv_heads) < 1:
            raise ValueError(f"batch and kv_heads must be at least 1, got {batch} and {kv_heads}")
        fmt.check_head_dim(head_dim)
        if not dtype.is_floating_point:
            raise ValueError(f"the model's dtype must be floating point, got {dtype}")
        self.fmt, self.batch, self.kv_heads, self.head_dim, self.dtype = fmt, batch, kv_heads, head_dim, dtype
        self._length = 0
        self._keys: Fields = {}
        self._values: Fields = {}
        if fmt.name == "fp8":
            codecs.fp8_dtype(fmt.variant)  # refuse an fp8 variant this PyTorch lacks now, not at the first append
            count = kv_heads if fmt.scale == "head" else 1
            self.key_scale = torch.ones(count)  # 1.0 until calibrated: vLLM's default without loaded scales
            self.value_scale = torch.ones(count)

    @property
    def length(self) -> int:
        """Positions stored so far: the offset of the next token."""
        return self._length

    # --- writing ----------------------------------------------------------------------------------

    def append(self, keys: Tensor, values: Tensor) -> None:
        """Store new positions, keys and values (B, Hkv, T_new, D)."""
        self._check_entries(keys, values)
        if self.fmt.name == "fp8" and self.fmt.calibration == "amax" and self._length == 0:
            self.key_scale, self.value_scale = self._amax_scale(keys), self._amax_scale(values)
        self._keys = self._concat(self._keys, self._encode(keys, "keys", self.key_scale if self._is_fp8 else None))
        self._values = self._concat(self._values, self._encode(values, "values",
                                                               self.value_scale if self._is_fp8 else None))
        self._length += keys.shape[2]

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """KVStore for llm_models.toy.model.DecoderBlock: append, then every position dequantized all at once."""
        self.append(keys, values)
        return self.keys_values()

    # --- reading ----------------------------------------------------------------------------------

    def keys_values(self) -> tuple[Tensor, Tensor]:
        """All at once: every position dequantized into two new (B, Hkv, T, D) tensors in ``dtype``
        (for float32 stored as float32, views of the storage itself, as a plain cache reads)."""
        self._check_nonempty()
        return self._decode(self._keys, "keys"), self._decode(self._values, "values")

    def blocks(self, block_tokens: int) -> Iterator[tuple[int, Tensor, Tensor]]:
        """Block by block: (first position, keys, values) for consecutive runs of ``block_tokens``
        positions, each dequantized only when it is reached, so one block's float copy is alive at a time."""
        self._check_nonempty()
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be at least 1, got {block_tokens}")
        for start in range(0, self._length, block_tokens):
            end = min(start + block_tokens, self._length)
            yield (start, self._decode(self._slice(self._keys, start, end), "keys"),
                   self._decode(self._slice(self._values, start, end), "values"))

    def steps(self) -> tuple[Tensor, Tensor]:
        """Every stored element's quantization step, in value units, (B, Hkv, T, D) for keys and values."""
        self._check_nonempty()
        return self._steps(self._keys, "keys"), self._steps(self._values, "values")

    # --- bytes ------------------------------------------------------------------------------------

    def stored(self) -> dict[str, Tensor]:
        """Every tensor the format keeps, by name: what ``stored_bytes`` counts."""
        tensors = {f"keys.{name}": t for name, t in self._keys.items()}
        tensors.update({f"values.{name}": t for name, t in self._values.items()})
        if self._is_fp8:
            tensors.update({"keys.fp8_scale": self.key_scale, "values.fp8_scale": self.value_scale})
        return tensors

    def stored_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.stored().values())

    def formula_bytes(self, tokens: int | None = None) -> int:
        """The format's formula (llm_models.cache_formats.formula_bytes) at ``tokens`` positions, default now."""
        tokens = self._length if tokens is None else tokens
        residual_bytes = torch.empty((), dtype=self.dtype).element_size()  # kivi's residual: the model's dtype
        return formula_bytes(self.fmt, self.batch, self.kv_heads, self.head_dim, tokens, residual_bytes)

    @property
    def bits_per_element(self) -> float:
        """Effective bits per cached element now, from the stored tensors: codes and all their metadata."""
        self._check_nonempty()
        elements = kv_cache_bytes(self.batch, self.kv_heads, self._length, self.head_dim, bytes_per_element=1)
        return self.stored_bytes() * 8 / elements

    # --- the formats ------------------------------------------------------------------------------

    @property
    def _is_fp8(self) -> bool:
        return self.fmt.name == "fp8"

    def _name(self, side: str) -> str:
        """The format ``side`` ("keys" or "values") is stored in: the format's own, or float32 for the side a
        keys-only or values-only format leaves alone."""
        return self.fmt.name if self.fmt.quantizes(side) else "float32"

    def _encode(self, x: Tensor, side: str, fp8_scale: Tensor | None) -> Fields:
        name = self._name(side)
        if name in ("float32", "bfloat16"):
            return codecs.encode_float(x, getattr(torch, name))
        if name == "int8":
            return codecs.encode_int8(x)
        if name == "int4":
            return codecs.encode_groups(x, 4, self.fmt.group_size)
        if name == "q8_0":
            return codecs.encode_q8_0(x)
        if name == "q4_0":
            return codecs.encode_q4_0(x)
        assert fp8_scale is not None
        return codecs.encode_fp8(x, fp8_scale, self.fmt.variant)

    def _decode(self, fields: Fields, side: str) -> Tensor:
        name = self._name(side)
        if name in ("float32", "bfloat16"):
            return codecs.decode_float(fields, self.dtype)
        if name == "int8":
            return codecs.decode_int8(fields, self.dtype)
        if name == "int4":
            return codecs.decode_groups(fields, 4, self.dtype)
        if name == "q8_0":
            return codecs.decode_q8_0(fields, self.dtype)
        if name == "q4_0":
            return codecs.decode_q4_0(fields, self.dtype)
        return codecs.decode_fp8(fields, self._fp8_scale(side), self.dtype)

    def _steps(self, fields: Fields, side: str) -> Tensor:
        name = self._name(side)
        if name == "float32":
            return codecs.float_ulp(fields["codes"], 23, -126)
        if name == "bfloat16":
            return codecs.float_ulp(fields["codes"], 7, -126)
        if name == "int8":
            return codecs.steps_int8(fields)
        if name == "int4":
            return codecs.steps_groups(fields, 4)
        if name in ("q8_0", "q4_0"):
            return codecs.steps_ggml(fields)
        return codecs.steps_fp8(fields, self._fp8_scale(side), self.fmt.variant)

    def _fp8_scale(self, side: str) -> Tensor:
        return self.key_scale if side == "keys" else self.value_scale

    def _amax_scale(self, x: Tensor) -> Tensor:
        """amax / max from the first append (the prompt): later entries beyond it saturate."""
        dims = (0, 2, 3) if self.fmt.scale == "head" else (0, 1, 2, 3)
        amax = x.float().abs().amax(dim=dims).reshape(-1)  # (Hkv,) or (1,)
        return torch.where(amax > 0, amax / FP8_MAX[self.fmt.variant], torch.ones_like(amax))

    # --- plumbing ---------------------------------------------------------------------------------

    @staticmethod
    def _concat(stored: Fields, new: Fields) -> Fields:
        if not stored:
            return new
        return {name: torch.cat((stored[name], new[name]), dim=TOKEN_AXIS) for name in stored}

    @staticmethod
    def _slice(fields: Fields, start: int, end: int) -> Fields:
        return {name: t[..., start:end, :] for name, t in fields.items()}

    def _check_entries(self, keys: Tensor, values: Tensor) -> None:
        expected = (self.batch, self.kv_heads, self.head_dim)
        if keys.dim() != 4 or keys.shape != values.shape or (keys.shape[0], keys.shape[1], keys.shape[3]) != expected:
            raise ValueError(f"new keys {tuple(keys.shape)} / values {tuple(values.shape)} do not fit "
                             f"(B, Hkv, T, D) = ({self.batch}, {self.kv_heads}, T, {self.head_dim})")
        if keys.shape[2] < 1:
            raise ValueError("append at least one position, got 0")
        if not (keys.dtype.is_floating_point and values.dtype.is_floating_point):
            raise ValueError(f"keys and values must be floating point, got {keys.dtype} and {values.dtype}")

    def _check_nonempty(self) -> None:
        if self._length == 0:
            raise ValueError("the cache is empty: append positions before reading it")


class KiviCache(QuantizedKVCache):
    """KIVI: keys per channel in groups of G consecutive tokens, values per token in groups of G channels,
    and the most recent tokens in full precision (the model's dtype).

    Tokens leave the residual only in whole groups: once it holds R + G tokens, its oldest G become one key
    group (one scale and zero per channel) and G quantized value rows; so the residual always keeps at least
    the R most recent tokens exact, and no key group is ever smaller than G, however tokens arrive.
    """

    def __init__(self, fmt: CacheFormat, batch: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(fmt, batch, kv_heads, head_dim, dtype)
        self.residual_keys = torch.empty(batch, kv_heads, 0, head_dim, dtype=dtype)  # (B, Hkv, r, D)
        self.residual_values = torch.empty_like(self.residual_keys)
        self.key_group_sizes: list[int] = []  # tokens behind each stored key scale, in order

    @property
    def key_group(self) -> int:
        return self.fmt.group_size

    @property
    def quantized_length(self) -> int:
        return self._length - self.residual_keys.shape[2]

    def append(self, keys: Tensor, values: Tensor) -> None:
        self._check_entries(keys, values)
        self.residual_keys = torch.cat((self.residual_keys, keys.to(self.dtype)), dim=2)
        self.residual_values = torch.cat((self.residual_values, values.to(self.dtype)), dim=2)
        self._length += keys.shape[2]
        self._flush()

    def _flush(self) -> None:
        """Move the oldest whole key groups beyond the residual window into quantized storage."""
        group, overflow = self.key_group, self.residual_keys.shape[2] - self.fmt.residual
        count = overflow // group * group if overflow >= group else 0
        if count == 0:
            return
        old_keys, self.residual_keys = self.residual_keys[:, :, :count], self.residual_keys[:, :, count:].clone()
        old_values, self.residual_values = (self.residual_values[:, :, :count],
                                            self.residual_values[:, :, count:].clone())
        bits = self.fmt.bits
        self._keys = self._concat(self._keys, codecs.encode_key_groups(old_keys, bits, group))
        self._values = self._concat(self._values, codecs.encode_groups(old_values, bits, self.fmt.group_size))
        self.key_group_sizes += [group] * (count // group)

    def keys_values(self) -> tuple[Tensor, Tensor]:
        """All at once: the quantized part dequantized, followed by the exact residual."""
        self._check_nonempty()
        if not self._keys:
            return self.residual_keys, self.residual_values
        bits = self.fmt.bits
        keys = torch.cat((codecs.decode_key_groups(self._keys, bits, self.dtype), self.residual_keys), dim=2)
        values = torch.cat((codecs.decode_groups(self._values, bits, self.dtype), self.residual_values), dim=2)
        return keys, values

    def blocks(self, block_tokens: int) -> Iterator[tuple[int, Tensor, Tensor]]:
        """Block by block; a quantized block holds whole key groups (``block_tokens`` rounded down to a
        multiple of G, at least G), the residual follows in blocks of ``block_tokens``."""
        self._check_nonempty()
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be at least 1, got {block_tokens}")
        group, bits, quantized = self.key_group, self.fmt.bits, self.quantized_length
        step = max(group, block_tokens // group * group)
        for start in range(0, quantized, step):
            end = min(start + step, quantized)
            key_fields = {"codes": self._keys["codes"][:, :, start:end],
                          "scale": self._keys["scale"][:, :, start // group:end // group],
                          "zero": self._keys["zero"][:, :, start // group:end // group]}
            yield (start, codecs.decode_key_groups(key_fields, bits, self.dtype),
                   codecs.decode_groups(self._slice(self._values, start, end), bits, self.dtype))
        for start in range(0, self.residual_keys.shape[2], block_tokens):
            end = start + block_tokens
            yield (quantized + start, self.residual_keys[:, :, start:end], self.residual_values[:, :, start:end])

    def steps(self) -> tuple[Tensor, Tensor]:
        self._check_nonempty()
        exact = torch.zeros(self.batch, self.kv_heads, self.residual_keys.shape[2], self.head_dim)
        if not self._keys:
            return exact, exact
        bits = self.fmt.bits
        return (torch.cat((codecs.steps_key_groups(self._keys, bits), exact), dim=2),
                torch.cat((codecs.steps_groups(self._values, bits), exact), dim=2))

    def stored(self) -> dict[str, Tensor]:
        tensors = super().stored()
        tensors.update({"residual.keys": self.residual_keys, "residual.values": self.residual_values})
        return tensors


def make_cache(fmt: CacheFormat | str, batch: int, kv_heads: int, head_dim: int,
               dtype: torch.dtype = torch.float32) -> QuantizedKVCache:
    """The cache for a format (or a format name with its defaults)."""
    fmt = CacheFormat(fmt) if isinstance(fmt, str) else fmt
    cls = KiviCache if fmt.name == "kivi" else QuantizedKVCache
    return cls(fmt, batch, kv_heads, head_dim, dtype)

