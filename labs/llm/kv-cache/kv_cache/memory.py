"""The KV-cache page's formats: the bits per cached element of each format it prices, and a whole cache's bytes.

The byte formula itself, and the bytes counted from a cache's tensors, are shared by every lab and live below
them (llm_models.kv_bytes, which this page's article shows). Torch-free: the site build imports this module
through kv_cache.figures.
"""

from __future__ import annotations

# Bits one cached element takes in each format the pages price, scales included, under the names the quantized-cache
# lab gives the same formats (llm_models.cache_formats; its test_quant_bytes holds these bits to their byte formulas).
# fp8: one scale per tensor, nothing per token. q8_0 and q4_0: llama.cpp's blocks of GROUP values with one fp16
# scale each (8 + 16 / 32 and 4 + 16 / 32 bits). int4-g32: 4-bit codes with a float32 scale and a float32 zero
# point per GROUP values (4 + 64 / 32 bits): the same code width as q4_0, a third more bytes.
KV_FORMATS = {"float32": 32.0, "float16": 16.0, "fp8": 8.0, "q8_0": 8.5, "int4-g32": 6.0, "q4_0": 4.5}
GROUP = 32  # values sharing one scale in q8_0, q4_0 and int4-g32


def whole_cache_bytes(bytes_per_token: float, batch: int, tokens: int) -> float:
    """The whole cache: bytes per token x batch x tokens per sequence. A batch counts whole sequences and a
    context whole tokens, so a fraction is refused (the page's calculator refuses the same)."""
    for name, value in (("batch", batch), ("tokens", tokens)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    return bytes_per_token * batch * tokens
