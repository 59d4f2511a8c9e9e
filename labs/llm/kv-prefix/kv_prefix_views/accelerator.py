"""The accelerator arithmetic: what one hit on a long system prompt saves on a published model and an H100."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block


def accelerator_view(record: dict[str, Any]) -> Block:
    a = record["accelerator"]
    return Block(paragraphs=[
        f"Arithmetic, not a measurement. {a['model']} ({a['layers']} layers, {a['kv_heads']} key/value heads of "
        f"{a['head_dim']}, {a['element_bytes']} bytes an element) stores 2 × {a['layers']} × {a['kv_heads']} × "
        f"{a['head_dim']} × {a['element_bytes']} = {a['kv_bytes_per_position']:,} bytes of keys and values per "
        f"position, so a {a['system_tokens']:,}-token system prompt holds {a['kv_bytes'] / 1e6:,.0f} MB of cache. "
        f"Prefilling it takes about 2 × {a['parameters'] / 1e9:.2f} billion parameters × {a['system_tokens']:,} "
        f"tokens = {a['prefill_flops']:.2e} floating-point operations before attention: "
        f"{a['prefill_s_at_peak'] * 1e3:.0f} ms of the {a['device']}'s dense 16-bit peak, paid by every request that "
        f"carries the prompt unless it is cached. A hit trades that work for keeping the blocks, stored once however "
        f"many requests share them."],
        sources=[(f"{a['device']} datasheet", a["device_url"]), (f"{a['model']} configuration", a["config_url"])])
