"""The quantizers themselves: tensors in, stored tensors (codes, scales, zeros) out, and back.

Each ``encode_*`` takes float entries (..., T, D) and returns a dict of the tensors a cache keeps, with the
token axis second to last (so a cache appends by concatenating along it and reads a block by slicing it);
each ``decode_*`` inverts it; each ``steps_*`` gives every element's quantization step in value units (the
distance between two neighbouring representable values at that element), which the round-trip bound
"error at most half a step" is stated against. Arithmetic is float32 throughout, whatever the model's
dtype, so that q8_0 and q4_0 reproduce llama.cpp's reference (gguf.quants) bit for bit.
"""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.cache_formats import FP8_MAX, GGML_BLOCK

Fields = dict[str, Tensor]


# --- bit packing: whole codes per byte, lowest code in the lowest bits -----------------------------------

def pack(codes: Tensor, bits: int) -> Tensor:
    """uint8 codes (..., N) of ``bits`` each -> (..., N * bits / 8) bytes; code i of a byte at bits i*b."""
    per = 8 // bits
    grouped = codes.reshape(*codes.shape[:-1], codes.shape[-1] // per, per).to(torch.uint8)
    packed = grouped[..., 0].clone()
    for i in range(1, per):
        packed |= grouped[..., i] << (bits * i)
    return packed


def unpack(packed: Tensor, bits: int) -> Tensor:
    """The inverse of ``pack``: (..., M) bytes -> (..., M * 8 / bits) uint8 codes."""
    per, mask = 8 // bits, (1 << bits) - 1
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    return ((packed[..., None] >> shifts) & mask).reshape(*packed.shape[:-1], packed.shape[-1] * per)


# --- plain floats: the baselines ----------------------------------------------------------------------

def encode_float(x: Tensor, dtype: torch.dtype) -> Fields:
    return {"codes": x.to(dtype, copy=True)}


def decode_float(fields: Fields, dtype: torch.dtype) -> Tensor:
    return fields["codes"].to(dtype)  # no copy when the stored dtype is the model's: a plain cache


def float_ulp(values: Tensor, mantissa_bits: int, min_exponent: int) -> Tensor:
    """Distance to the next representable value of a binary float format at each |value| (subnormals
    below 2^min_exponent have the fixed spacing 2^(min_exponent - mantissa_bits))."""
    magnitude = values.float().abs()
    exponent = torch.floor(torch.log2(magnitude.clamp_min(2.0 ** min_exponent)))
    return torch.exp2(exponent - mantissa_bits)


# --- int8, symmetric, one scale per token per head ----------------------------------------------------

def encode_int8(x: Tensor) -> Fields:
    x = x.float()  # (..., T, D)
    amax = x.abs().amax(-1, keepdim=True)  # (..., T, 1)
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))  # an all-zero token stores code 0
    codes = torch.round(x / scale).clamp(-127, 127).to(torch.int8)  # -128 unused: the range stays symmetric
    return {"codes": codes, "scale": scale}


def decode_int8(fields: Fields, dtype: torch.dtype) -> Tensor:
    return (fields["codes"].float() * fields["scale"]).to(dtype)


def steps_int8(fields: Fields) -> Tensor:
    return fields["scale"].expand(fields["codes"].shape)


# --- asymmetric groups: scale and float zero point (the group's minimum) per group ------------------------

def affine(groups: Tensor, bits: int, dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """Codes 0 .. 2^bits - 1 over ``dim``: x ~ code * scale + zero, zero the group's minimum (a float zero
    point, as KIVI and HQQ keep it, so the group's extremes are represented exactly)."""
    low, high = groups.amin(dim, keepdim=True), groups.amax(dim, keepdim=True)
    levels = (1 << bits) - 1
    span = (high - low) / levels
    scale = torch.where(span > 0, span, torch.ones_like(span))  # a constant group stores code 0 and its value
    codes = torch.round((groups - low) / scale).clamp(0, levels).to(torch.uint8)
    return codes, scale, low


def encode_groups(x: Tensor, bits: int, group: int) -> Fields:
    """Per token, groups of ``group`` along the head dim (int4; KIVI's values)."""
    x = x.float()
    *lead, tokens, d = x.shape
    codes, scale, zero = affine(x.reshape(*lead, tokens, d // group, group), bits, dim=-1)  # (..., T, D/G, G)
    return {"codes": pack(codes.reshape(*lead, tokens, d), bits), "scale": scale.squeeze(-1),
            "zero": zero.squeeze(-1)}  # codes (..., T, D*bits/8), scale and zero (..., T, D/G)


def decode_groups(fields: Fields, bits: int, dtype: torch.dtype) -> Tensor:
    codes, scale = unpack(fields["codes"], bits), fields["scale"]
    *lead, tokens, d = codes.shape
    grouped = codes.reshape(*lead, tokens, scale.shape[-1], -1).float()  # (..., T, D/G, G)
    return (grouped * scale[..., None] + fields["zero"][..., None]).reshape(*lead, tokens, d).to(dtype)


def steps_groups(fields: Fields, bits: int) -> Tensor:
    scale = fields["scale"]
    d = fields["codes"].shape[-1] * (8 // bits)
    return scale.repeat_interleave(d // scale.shape[-1], dim=-1)


def encode_key_groups(x: Tensor, bits: int, group: int) -> Fields:
    """KIVI's keys: per channel, groups of ``group`` consecutive tokens. x (..., n*G, D)."""
    x = x.float()
    *lead, tokens, d = x.shape
    codes, scale, zero = affine(x.reshape(*lead, tokens // group, group, d), bits, dim=-2)  # (..., n, G, D)
    return {"codes": pack(codes.reshape(*lead, tokens, d), bits), "scale": scale.squeeze(-2),
            "zero": zero.squeeze(-2)}  # codes (..., n*G, D*bits/8), scale and zero (..., n, D)


def decode_key_groups(fields: Fields, bits: int, dtype: torch.dtype) -> Tensor:
    codes, scale = unpack(fields["codes"], bits), fields["scale"]
    *lead, tokens, d = codes.shape
    grouped = codes.reshape(*lead, scale.shape[-2], -1, d).float()  # (..., n, G, D)
    return (grouped * scale[..., None, :] + fields["zero"][..., None, :]).reshape(*lead, tokens, d).to(dtype)


def steps_key_groups(fields: Fields, bits: int) -> Tensor:
    scale = fields["scale"]
    tokens = fields["codes"].shape[-2]
    return scale.repeat_interleave(tokens // max(1, scale.shape[-2]), dim=-2)


# --- llama.cpp's blocks: 32 values, one fp16 scale ------------------------------------------------------

def _blocks(x: Tensor) -> Tensor:
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // GGML_BLOCK, GGML_BLOCK)  # (..., T, D/32, 32)


def _round_away(x: Tensor) -> Tensor:
    """Round half away from zero exactly as gguf's np_roundf (C's roundf): floor(a) + floor(2(a - floor a))
    rather than floor(a + 0.5), which rounds 0.49999997 up in float32."""
    magnitude = x.abs()
    floored = torch.floor(magnitude)
    return torch.sign(x) * (floored + torch.floor(2 * (magnitude - floored)))


def encode_q8_0(x: Tensor) -> Fields:
    blocks = _blocks(x)
    d = blocks.abs().amax(-1, keepdim=True) / 127  # float32, as quantize_row_q8_0_ref
    inverse = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    codes = _round_away(blocks * inverse).to(torch.int8)  # with the float32 scale; the fp16 one is stored
    return {"codes": codes.flatten(-2), "scale": d.squeeze(-1).to(torch.float16)}  # (..., T, D), (..., T, D/32)


def decode_q8_0(fields: Fields, dtype: torch.dtype) -> Tensor:
    blocks = fields["codes"].reshape(*fields["scale"].shape, GGML_BLOCK).float()
    return (blocks * fields["scale"].float()[..., None]).flatten(-2).to(dtype)


def encode_q4_0(x: Tensor) -> Fields:
    blocks = _blocks(x)
    largest = blocks.gather(-1, blocks.abs().argmax(-1, keepdim=True))  # signed value of largest magnitude
    d = largest / -8  # that value maps to code 0 (-8 d): exact; the opposite sign clips at code 15 (+7 d)
    inverse = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    codes = torch.trunc(blocks * inverse + 8.5).clamp(0, 15).to(torch.uint8)  # (..., T, D/32, 32)
    # block_q4_0 layout: byte j holds value j in its low nibble and value j + 16 in its high nibble
    packed = codes[..., : GGML_BLOCK // 2] | (codes[..., GGML_BLOCK // 2:] << 4)
    return {"codes": packed.flatten(-2), "scale": d.squeeze(-1).to(torch.float16)}  # (..., T, D/2), (..., T, D/32)


def decode_q4_0(fields: Fields, dtype: torch.dtype) -> Tensor:
    packed = fields["codes"].reshape(*fields["scale"].shape, GGML_BLOCK // 2)
    codes = torch.cat((packed & 0x0F, packed >> 4), dim=-1).to(torch.int8) - 8  # (..., T, D/32, 32)
    return (codes.float() * fields["scale"].float()[..., None]).flatten(-2).to(dtype)


def steps_ggml(fields: Fields) -> Tensor:
    return fields["scale"].float().abs().repeat_interleave(GGML_BLOCK, dim=-1)


def ggml_bytes(fields: Fields, bytes_per_block: int) -> Tensor:
    """The stored tensors in llama.cpp's byte order, (..., T, D/32 * bytes_per_block): per block the fp16
    scale's two bytes, then its codes, as gguf.quants.quantize returns them."""
    scale = fields["scale"].contiguous().view(torch.uint8).reshape(*fields["scale"].shape, 2)
    codes = fields["codes"].contiguous().view(torch.uint8).reshape(*fields["scale"].shape, -1)
    joined = torch.cat((scale, codes), dim=-1)
    if joined.shape[-1] != bytes_per_block:
        raise ValueError(f"blocks of {joined.shape[-1]} bytes, expected {bytes_per_block}")
    return joined.flatten(-2)


# --- fp8 e4m3, one scale per tensor or per head, saturating -------------------------------------------

def fp8_dtype(variant: str) -> torch.dtype:
    dtype = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": getattr(torch, "float8_e4m3fnuz", None)}[variant]
    if dtype is None:
        raise ValueError(f"this PyTorch {torch.__version__} has no float8_{variant}")
    return dtype


def encode_fp8(x: Tensor, scale: Tensor, variant: str) -> Fields:
    """x (B, H, T, D) / scale (1 or H of them, broadcast as (1, H, 1, 1)), clamped to +-max before the cast,
    as vLLM saturates: neither e4m3 variant has an infinity, and PyTorch's cast to float8_e4m3fnuz turns an
    out-of-range value into NaN (its cast to float8_e4m3fn happens to saturate, even infinity to 448)."""
    limit = FP8_MAX[variant]
    scaled = x.float() / scale.reshape(1, -1, 1, 1)
    return {"codes": scaled.clamp(-limit, limit).to(fp8_dtype(variant))}


def decode_fp8(fields: Fields, scale: Tensor, dtype: torch.dtype) -> Tensor:
    return (fields["codes"].float() * scale.reshape(1, -1, 1, 1)).to(dtype)


def steps_fp8(fields: Fields, scale: Tensor, variant: str) -> Tensor:
    # e4m3fn: 3 mantissa bits, smallest normal 2^-6; e4m3fnuz has its exponent bias one higher (2^-7)
    min_exponent = -6 if variant == "e4m3fn" else -7
    return float_ulp(fields["codes"].float(), 3, min_exponent) * scale.reshape(1, -1, 1, 1)
