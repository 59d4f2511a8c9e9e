"""The page's opening: the model this record measured, from its configuration."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block


def model_view(record: dict[str, Any]) -> Block:
    model = record["config"]["model"]
    weights = record["kv_crossover"]["weight_bytes"]
    heads = f"{model['heads']} heads" + ("" if model["kv_heads"] == model["heads"]
                                         else f" sharing {model['kv_heads']} key/value heads")
    return Block(paragraphs=[
        f"This record's model is the {model['preset']} preset: {model['layers']} layers, width {model['width']}, "
        f"{heads} of {model['head_dim']}, a feed-forward width of {model['ffn_width']:,}, a "
        f"vocabulary of {model['vocab_size']:,} tokens and {model['max_positions']:,} learned positions. A decode "
        f"step multiplies by {weights:,} bytes of weights in {record['config']['benchmark']['dtype']}.",
        f"Weights are drawn from seed {model['seed']} with standard deviation {model['init_std']:g}, the two residual "
        f"projections of every layer scaled down by 1 / sqrt(2 × {model['layers']}); layer norms use "
        f"eps = {model['layer_norm_eps']:g}.",
    ])
