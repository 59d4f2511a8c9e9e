"""Which cache format, with which parameters: one frozen dataclass, checked once against the head width.

Torch-free: the figures module (and through it the site build and the serving lab's admission) budgets
with these formats without importing torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# Every format the lab stores, in the order the page lists them: baselines first, then by family.
FORMAT_NAMES = ("float32", "bfloat16", "int8", "int4", "kivi", "q8_0", "q4_0", "fp8")

GGML_BLOCK = 32  # llama.cpp's QK8_0 = QK4_0: values per block, each block with one fp16 scale
FP8_MAX = {"e4m3fn": 448.0, "e4m3fnuz": 240.0}  # largest finite value: 1.75 x 2^8 and 1.875 x 2^7
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
