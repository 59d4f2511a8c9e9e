"""Which cache format, with which parameters, and how many bytes it stores: one frozen dataclass, checked once
against the head width, the format a label names, and each format's byte formulas from its definition alone.

Here, below the labs, because two labs use them: the quantized-cache lab stores keys and values in these formats
(kv_quant.cache counts its bytes from its tensors and must equal ``formula_bytes``; that lab's modules, views and
tests import them from here) and the serving lab's admission prices its blocks in them (``block_bytes``).

Torch-free: the site build (kv_quant.figures), the serving lab's admission and the page budget with these without
torch. Scales and zero points are float32 (4 bytes; the quantized-cache lab's model dtype, and quanto and KIVI keep
theirs in the activations' dtype); llama.cpp's blocks keep one fp16 scale (2 bytes).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

# Every format the quantized-cache lab stores, in the order its page lists them: baselines first, then by family.
FORMAT_NAMES = ("float32", "bfloat16", "int8", "int4", "kivi", "q8_0", "q4_0", "fp8")

GGML_BLOCK = 32  # llama.cpp's QK8_0 = QK4_0: values per block, each block with one fp16 scale
FP8_MAX = {"e4m3fn": 448.0, "e4m3fnuz": 240.0}  # largest finite value: 1.75 x 2^8 and 1.875 x 2^7
FP8_SMALLEST_NORMAL = 2.0 ** -6  # e4m3fn: below it, values are subnormal and keep fewer significant bits
FP8_SCALES = ("tensor", "head")  # one scale for the whole layer's keys (values), or one per key/value head
FP8_CALIBRATIONS = ("none", "amax")  # scale 1.0 (vLLM's default when no scales are loaded), or amax / max
KIVI_BITS = (2, 4)  # code widths that pack whole codes into a byte
# Which side a format quantizes: both, or keys only / values only with the other side kept in float32, so a
# reader can see which one hurts (llama.cpp varies --cache-type-k and --cache-type-v apart). Only the formats
# that encode each token on its own, with nothing per layer, can split: int8, int4, q8_0, q4_0.
SIDES = ("both", "keys", "values")
SPLITTABLE = ("int8", "int4", "q8_0", "q4_0")
FLOAT_SIDE_BITS = 32  # the side left unquantized is stored as float32, the model's dtype


@dataclass(frozen=True)
class CacheFormat:
    name: str = "float32"  # one of FORMAT_NAMES
    group_size: int = 32  # int4: values per scale/zero along the head dim; kivi: tokens per key group, values per value group (KIVI's G = 32)
    residual: int = 128  # kivi: the most recent tokens kept in full precision (KIVI's R = 128)
    bits: int = 2  # kivi: code width; KIVI's headline setting is 2 bits
    scale: str = "tensor"  # fp8: "tensor" or "head" (vLLM's two granularities)
    calibration: str = "none"  # fp8: "none" keeps scale 1.0, "amax" sets amax / max from the first append
    variant: str = "e4m3fn"  # fp8: "e4m3fn" (max 448, torch.float8_e4m3fn) or "e4m3fnuz" (max 240)
    sides: str = "both"  # "keys" or "values": only that side in this format, the other float32 (SPLITTABLE only)

    def __post_init__(self) -> None:
        if self.name not in FORMAT_NAMES:
            raise ValueError(f"unknown cache format {self.name!r}; known formats: {', '.join(FORMAT_NAMES)}")
        if self.group_size < 1:
            raise ValueError(f"group_size must be at least 1, got {self.group_size}")
        if self.residual < 0:
            raise ValueError(f"residual must be at least 0 tokens, got {self.residual}")
        if self.bits not in KIVI_BITS:
            raise ValueError(f"kivi bits must be one of {KIVI_BITS}, got {self.bits}")
        if self.scale not in FP8_SCALES:
            raise ValueError(f"fp8 scale must be one of {FP8_SCALES}, got {self.scale!r}")
        if self.calibration not in FP8_CALIBRATIONS:
            raise ValueError(f"fp8 calibration must be one of {FP8_CALIBRATIONS}, got {self.calibration!r}")
        if self.variant not in FP8_MAX:
            raise ValueError(f"fp8 variant must be one of {tuple(FP8_MAX)}, got {self.variant!r}")
        if self.sides not in SIDES:
            raise ValueError(f"sides must be one of {SIDES}, got {self.sides!r}")
        if self.sides != "both" and self.name not in SPLITTABLE:
            raise ValueError(f"{self.name} cannot quantize {self.sides} alone; formats that can: {', '.join(SPLITTABLE)}")

    def check_head_dim(self, head_dim: int) -> None:
        """Refuse a head width this format cannot split, in one ValueError naming both numbers."""
        if head_dim < 1:
            raise ValueError(f"head_dim must be at least 1, got {head_dim}")
        if self.name in ("int4", "kivi") and head_dim % self.group_size:
            raise ValueError(f"{self.name} group size {self.group_size} does not divide head_dim {head_dim}")
        if self.name in ("int4", "kivi") and self.group_size % self.codes_per_byte:
            raise ValueError(f"{self.name} group size {self.group_size} does not hold whole bytes of "
                             f"{self.codes_per_byte} codes")
        if self.name in ("q8_0", "q4_0") and head_dim % GGML_BLOCK:
            raise ValueError(f"{self.name} blocks of {GGML_BLOCK} do not divide head_dim {head_dim}")

    @property
    def code_bits(self) -> int:
        """Bits of one stored code (or element), before any scale or zero point."""
        return {"float32": 32, "bfloat16": 16, "int8": 8, "int4": 4, "kivi": self.bits,
                "q8_0": 8, "q4_0": 4, "fp8": 8}[self.name]

    def quantizes(self, side: str) -> bool:
        """Whether this format stores ``side`` ("keys" or "values") in its codes, not in float32."""
        return self.sides in ("both", side)

    @property
    def nominal_bits(self) -> float:
        """Bits per element counting code widths alone, over both sides: what a budget by code width assumes."""
        sides = [self.code_bits if self.quantizes(side) else FLOAT_SIDE_BITS for side in ("keys", "values")]
        return sum(sides) / 2

    @property
    def codes_per_byte(self) -> int:
        return max(1, 8 // self.code_bits)

    @property
    def label(self) -> str:
        """A short name that tells formats of one family apart: 'kivi-2b-g32-r128', 'fp8-head-amax', and
        'q4_0-keys' for q4_0 keys beside float32 values (the page's legend spells each one out)."""
        return self.family + ("" if self.sides == "both" else f"-{self.sides}")

    @property
    def family(self) -> str:
        """The label without the sides: the format both sides would be stored in."""
        if self.name == "int4":
            return f"int4-g{self.group_size}"
        if self.name == "kivi":
            return f"kivi-{self.bits}b-g{self.group_size}-r{self.residual}"
        if self.name == "fp8":
            variant = "" if self.variant == "e4m3fn" else f"-{self.variant}"
            return f"fp8-{self.scale}-{self.calibration}{variant}"
        return self.name

    def as_record(self) -> dict[str, object]:
        return {"label": self.label, **asdict(self)}


def format_of(label: str) -> CacheFormat:
    """The format a label names ('int4-g64', 'kivi-2b-g32-r128', 'fp8-head-amax', 'q4_0-keys'); one ValueError
    otherwise."""
    family, sides = label, "both"
    for side in ("keys", "values"):
        if label.endswith(f"-{side}"):
            family, sides = label.removesuffix(f"-{side}"), side
    parts = family.split("-")
    try:
        if parts[0] == "int4" and len(parts) == 2 and parts[1].startswith("g"):
            fmt = CacheFormat("int4", group_size=int(parts[1][1:]))
        elif parts[0] == "kivi" and len(parts) == 4:
            fmt = CacheFormat("kivi", bits=int(parts[1].removesuffix("b")), group_size=int(parts[2][1:]),
                              residual=int(parts[3][1:]))
        elif parts[0] == "fp8" and len(parts) in (3, 4):
            fmt = CacheFormat("fp8", scale=parts[1], calibration=parts[2],
                              variant=parts[3] if len(parts) == 4 else "e4m3fn")
        elif len(parts) == 1:
            fmt = CacheFormat(family)
        else:
            raise ValueError
        fmt = replace(fmt, sides=sides)
    except ValueError as error:
        raise ValueError(f"unknown cache format label {label!r}: {error}" if str(error) else
                         f"unknown cache format label {label!r}") from None
    if fmt.label != label:
        raise ValueError(f"cache format label {label!r} is not canonical; the format's label is {fmt.label!r}")
    return fmt


# ---- the bytes each format stores --------------------------------------------------------------------------------

META_BYTES = 4  # one float32 scale or zero point (the model's dtype)
GGML_SCALE_BYTES = 2  # llama.cpp's ggml_half d


def kivi_residual_range(fmt: CacheFormat) -> tuple[int, int]:
    """The fewest and most tokens KIVI's exact residual holds once groups leave it: R to R + G - 1."""
    return fmt.residual, fmt.residual + fmt.group_size - 1


def kivi_split(fmt: CacheFormat, tokens: int) -> tuple[int, int]:
    """(quantized, residual) tokens after ``tokens`` appends: whole groups of G leave the residual once it
    holds R + G, so the residual keeps between R and R + G - 1 tokens and never splits a key group."""
    if tokens <= kivi_residual_range(fmt)[1]:
        return 0, tokens
    quantized = fmt.group_size * ((tokens - fmt.residual) // fmt.group_size)
    return quantized, tokens - quantized


def per_token_head_bytes(fmt: CacheFormat, head_dim: int) -> float:
    """Bytes one token costs per key/value head (keys and values together), ignoring any per-layer
    constant (fp8's scales) and any full-precision residual (kivi's): the long-context rate. A side the
    format leaves unquantized (``sides``) costs float32's 4 bytes per element."""
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
    return sum(per_side[fmt.name] if fmt.quantizes(side) else per_side["float32"] for side in ("keys", "values"))


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


def block_bytes(fmt: CacheFormat, layers: int, block_size: int, kv_heads: int, head_dim: int) -> int:
    """Keys and values of one serving block (``block_size`` positions in every layer) at the format's
    long-run rate, rounded up to a whole byte. KIVI is refused: its full-precision residual belongs to a
    request, not to a block. fp8's per-layer scales (8 bytes a layer) are a constant of the server, not of
    a block, and are left out."""
    if fmt.name == "kivi":
        raise ValueError("kivi keeps a full-precision residual per request, not per block: "
                         "price it per request with formula_bytes")
    for name, value in (("layers", layers), ("block_size", block_size), ("kv_heads", kv_heads)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    return math.ceil(layers * kv_heads * block_size * per_token_head_bytes(fmt, head_dim))
