"""Published configurations of real decoders (``published/models.toml``), each with the link it was copied from.

Here, below the labs, because more than one lab prices them: the KV-cache page's table and calculator
(kv_cache.figures.capacity) and the decode and serving pages' accelerator arithmetic (decode_bandwidth.accelerator).
Nothing here is measured: the table is read at build time, so editing it stales no record.

Torch-free: reading the table needs no model.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

MODELS_FILE = Path(__file__).resolve().parent / "published" / "models.toml"
WEIGHT_BITS = 16  # the weights beside the cache are fp16 (or bf16): 2 bytes per parameter


@cache  # a deliberate cache: the file is read once per process
def models() -> tuple[dict[str, Any], ...]:
    """The published configurations of published/models.toml, in its order."""
    return tuple(tomllib.loads(MODELS_FILE.read_text(encoding="utf-8"))["model"])


def model(name: str) -> dict[str, Any]:
    return next(m for m in models() if m["name"] == name)


def weight_bytes(entry: dict[str, Any]) -> float:
    """Every published parameter at WEIGHT_BITS."""
    return entry["parameters"] * WEIGHT_BITS / 8
