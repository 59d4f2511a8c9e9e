"""Each cache format's byte formula, its effective bits per element, and what fits a byte budget.

Torch-free: the page, the serving lab's admission and the site build budget with these without torch.
The caches in kv_quant.cache count their bytes from the tensors they hold; the tests prove the two agree
at every length. Scales and zero points are float32 (4 bytes; this lab's model dtype, and quanto and KIVI
keep theirs in the activations' dtype), so the round-trip bound needs no scale rounding; llama.cpp's
blocks keep one fp16 scale (2 bytes), and its tests show what that rounding costs.
"""

from __future__ import annotations

from .config import GGML_BLOCK, CacheFormat

META_BYTES = 4  # one float32 scale or zero point (the model's dtype)
GGML_SCALE_BYTES = 2  # llama.cpp's ggml_half d


def kivi_split(fmt: CacheFormat, tokens: int) -> tuple[int, int]:
    """(quantized, residual) tokens after ``tokens`` appends: whole groups of G leave the residual once it
    holds R + G, so the residual keeps between R and R + G - 1 tokens and never splits a key group."""
    if tokens < fmt.residual + fmt.group_size:
        return 0, tokens
    quantized = fmt.group_size * ((tokens - fmt.residual) // fmt.group_size)
    return quantized, tokens - quantized


def per_token_head_bytes(fmt: CacheFormat, head_dim: int) -> float:
    """Bytes one token costs per key/value head (keys and values together), ignoring any per-layer
    constant (fp8's scales) and any full-precision residual (kivi's): the long-context rate."""
    fmt.check_head_dim(head_dim)
    d, g = head_dim, fmt.group_size
    per_side = {
        "float32": 4 * d,
        "bfloat16": 2 * d,
        "int8": d + META_BYTES,  # int8 codes + one scale per token
        "int4": d / 2 + 2 * META_BYTES * d / g,  # packed nibbles + a scale and a zero per group
        "q8_0": d // GGML_BLOCK * (GGML_SCALE_BYTES + GGML_BLOCK),  # block_q8_0: 34 bytes per 32 values
        "q4_0": d // GGML_BLOCK * (GGML_SCALE_BYTES + GGML_BLOCK // 2),  # block_q4_0: 18 bytes per 32 values
        "fp8": d,
    }
    if fmt.name == "kivi":  # keys: a scale and zero per channel per G tokens; values: per G channels per token
        codes = d * fmt.bits / 8
        return (codes + 2 * META_BYTES * d / g) + (codes + 2 * META_BYTES * d / g)
    return 2 * per_side[fmt.name]


def formula_bytes(fmt: CacheFormat, batch: int, kv_heads: int, head_dim: int, tokens: int,
                  residual_bytes: int = 4) -> int:
    """Bytes of one layer's cache after ``tokens`` positions, from the format's definition alone
    (``residual_bytes``: one element of kivi's full-precision residual, the model's dtype)."""
    for name, value in (("batch", batch), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if tokens < 0:
        raise ValueError(f"tokens must be at least 0, got {tokens}")
    fmt.check_head_dim(head_dim)
    rows = batch * kv_heads
    if fmt.name == "kivi":
        quantized, residual = kivi_split(fmt, tokens)
        d, g, codes = head_dim, fmt.group_size, head_dim * fmt.bits // 8
        keys = quantized * codes + (quantized // g) * d * 2 * META_BYTES
        values = quantized * codes + quantized * (d // g) * 2 * META_BYTES
        return rows * (keys + values + 2 * residual * d * residual_bytes)
    total = rows * tokens * per_token_head_bytes(fmt, head_dim)
    if fmt.name == "fp8":  # one float32 scale for keys and one for values, per layer or per key/value head
        total += 2 * META_BYTES * (kv_heads if fmt.scale == "head" else 1)
    return int(total)


def bits_per_element(fmt: CacheFormat, head_dim: int) -> float:
    """Effective bits per cached element at long context: codes plus their share of scales and zeros."""
    return per_token_head_bytes(fmt, head_dim) * 8 / (2 * head_dim)


def effective_bits(fmt: CacheFormat, batch: int, kv_heads: int, head_dim: int, tokens: int) -> float:
    """Bits per element at one length, residual and per-layer scales included."""
    if tokens < 1:
        raise ValueError(f"tokens must be at least 1, got {tokens}")
    return formula_bytes(fmt, batch, kv_heads, head_dim, tokens) * 8 / (2 * batch * kv_heads * tokens * head_dim)


def tokens_in_budget(fmt: CacheFormat, budget: int, batch: int, kv_heads: int, head_dim: int) -> int:
    """The most positions whose cache fits ``budget`` bytes, by the format's real formula."""
    if budget < 0:
        raise ValueError(f"budget must be at least 0 bytes, got {budget}")
    if formula_bytes(fmt, batch, kv_heads, head_dim, 0) > budget:
        return 0
    low, high = 0, 1
    while formula_bytes(fmt, batch, kv_heads, head_dim, high) <= budget:  # bytes only grow with tokens
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        if formula_bytes(fmt, batch, kv_heads, head_dim, middle) <= budget:
            low = middle
        else:
            high = middle
    return low


def naive_tokens(budget: int, batch: int, kv_heads: int, head_dim: int, bits: float) -> int:
    """What a budget admits by 2 x B x Hkv x T x D x bits / 8, the first lab's formula with nominal bits:
    32 or 16 for a full-precision estimate (too few tokens), 4 or 2 billed as the code width alone (too many,
    since scales, zeros and the residual are not free)."""
    if bits <= 0:
        raise ValueError(f"bits must be positive, got {bits}")
    return int(budget * 8 // (2 * batch * kv_heads * head_dim * bits))
