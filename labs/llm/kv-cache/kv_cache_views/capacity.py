"""Real models' caches: the table of published configurations and the page's calculator. The site derives
each model's bytes per token, cache per context and tokens that fit (kv_cache.figures.capacity, priced by
llm_models.kv_bytes.kv_bytes_per_token from llm_models/published/models.toml); the calculator's JavaScript
repeats that one formula in the browser, and tests/test_browser.py checks the two agree for every model and
format."""

from __future__ import annotations

import json
from typing import Any

from kv_cache.figures import BASE_FORMAT, CONTEXTS, EXAMPLE_MODEL, GIB, MEMORY_GIB, TABLE_FORMATS
from kv_cache.memory import GROUP, KV_FORMATS
from llm_models.published import WEIGHT_BITS, models
from site_hooks.blocks import Block, Table, Widget
from site_hooks.formatting import format_bytes


def exact(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def kib(value: float) -> str:
    return f"{exact(value)} ({format_bytes(value, binary=True)})" if value >= 1024 else exact(value)


def gib(value: float) -> str:
    amount = value / GIB
    return f"{amount:.2f}" if amount < 1 else f"{amount:,.1f}" if amount < 100 else f"{amount:,.0f}"


def models_view(record: dict[str, Any]) -> Block:
    rows = []
    for m in models():
        priced = record["capacity"]["models"][m["name"]]
        for index, fmt in enumerate(TABLE_FORMATS):
            cache = priced["formats"][fmt]
            tokens = cache["tokens_fit"]
            rows.append((m["name"] if index == 0 else "", fmt, kib(cache["bytes_per_token"]),
                         *(gib(value) for value in cache["context_bytes"]),
                         f"{tokens:,}" if tokens else f"none (weights {gib(priced['weight_bytes'])} GiB)"))
    capacity = Table(
        headings=["Model", "KV format", "Bytes per token", "GiB at 8k tokens", "GiB at 128k tokens",
                  f"Tokens in {MEMORY_GIB} GiB beside 16-bit weights"],
        rows=rows)
    note = (f"q4_0 is llama.cpp's format: 4 bits per value plus one fp16 scale per block of {GROUP} values "
            f"({KV_FORMATS['q4_0']:g} bits; the quantized-cache page measures it); fp8 keeps one scale per tensor, "
            f"nothing per token. The last column "
            f"divides the {MEMORY_GIB} GiB left after the weights ({WEIGHT_BITS // 8} bytes per parameter) by the "
            f"bytes per token, with nothing kept for activations or workspace: an upper bound, summed over "
            f"every sequence in the batch. 8k is 8,192 tokens and 128k 131,072.")
    return Block(tables=[capacity], notes=[note])


def model_configs_view(record: dict[str, Any]) -> Block:
    """The published configurations the capacity table prices, with the repository of each config.json."""
    configs = Table(
        headings=["Model", "Layers", "KV heads (query heads)", "Head dim", "Parameters", "config.json of"],
        rows=[(m["name"], m["layers"], f"{m['kv_heads']} ({m['heads']})", m["head_dim"],
               f"{m['parameters'] / 1e9:.3g} billion" if m["parameters"] >= 1e9 else f"{m['parameters'] / 1e6:.0f} million",
               m["repo"]) for m in models()])
    return Block(tables=[configs])


def calculator_data() -> dict[str, Any]:
    """What the calculator's script reads: the models, the formats' bits, the weights' bits, the defaults."""
    return {"models": [{k: m[k] for k in ("name", "layers", "kv_heads", "head_dim", "parameters")} for m in models()],
            "formats": KV_FORMATS, "weight_bits": WEIGHT_BITS, "memory_gib": MEMORY_GIB,
            "default": {"model": EXAMPLE_MODEL, "format": BASE_FORMAT, "batch": 8, "context": CONTEXTS[0]}}


def calculator_view(record: dict[str, Any]) -> Block:
    data = calculator_data()
    form = Widget("calculator.html.j2", {"data": json.dumps(data), "models": data["models"],
                                         "formats": {name: f"{bits:g}" for name, bits in KV_FORMATS.items()},
                                         "default": data["default"], "memory": MEMORY_GIB})
    return Block(widgets=[form])
