"""How to read a format's name: every label of the record spelled out from its CacheFormat's fields, with the
bits per element it really stores (the record's long-run figure). The KV-cache page's calculator uses the same
names (kv_cache.memory.KV_FORMATS)."""

from __future__ import annotations

from typing import Any

from llm_models.cache_formats import FLOAT_SIDE_BITS, GGML_BLOCK, CacheFormat, format_of
from site_hooks.blocks import Block, Table

from .common import bits


def stored_as(fmt: CacheFormat) -> str:
    """What a format keeps per element, in words."""
    if fmt.sides != "both":
        other = "values" if fmt.sides == "keys" else "keys"
        return f"{fmt.sides} as {fmt.family} stores them, {other} as float32 ({FLOAT_SIDE_BITS} bits): one side alone"
    if fmt.name == "float32":
        return "every element as computed: the reference"
    if fmt.name == "bfloat16":
        return "every element rounded to bfloat16 (8 exponent bits, 7 mantissa bits)"
    if fmt.name == "int8":
        return "8-bit codes, one float32 scale per token and head"
    if fmt.name == "int4":
        return (f"4-bit codes, a float32 scale and a float32 zero point per {fmt.group_size} channels of a token "
                f"(the same code width as q4_0, more bytes of metadata)")
    if fmt.name == "kivi":
        return (f"KIVI: {fmt.bits}-bit keys grouped per channel over {fmt.group_size} tokens, {fmt.bits}-bit values "
                f"per {fmt.group_size} channels of a token, each group with a float32 scale and zero; the newest "
                f"{fmt.residual} or more tokens exact")
    if fmt.name in ("q8_0", "q4_0"):
        return f"llama.cpp's {fmt.name}: {fmt.code_bits}-bit codes, one fp16 scale per block of {GGML_BLOCK} values"
    variant = "e4m3fn (largest 448)" if fmt.variant == "e4m3fn" else "e4m3fnuz (largest 240)"
    scale = "one float32 scale per layer" if fmt.scale == "tensor" else "one float32 scale per key/value head"
    calibration = ("left at 1.0, as vLLM does with no scales loaded" if fmt.calibration == "none" else
                   "set from the largest magnitude of the first chunk appended")
    return f"fp8 {variant}, {scale}, {calibration}"


def names_view(record: dict[str, Any]) -> Block:
    rows = [(label, stored_as(format_of(label)), bits(entry["long_run_bits"]))
            for label, entry in record["formats"].items()]
    return Block(tables=[Table(["name", "what it stores", "bits per element, long run"], rows,
                               caption="Every format on this page. The bits count codes, scales, zero points and "
                                       "the float side; KIVI's exact residual adds more at any finite length.")])
