"""The record's settings, for the Reproduce appendix."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table

from .common import NAMES, one_time


def config_view(record: dict[str, Any]) -> Block:
    config, model = record["config"], record["model"]
    rows = [("model", f"{model['name']}, {model['dtype']}, {model['layers']} layers, {model['kv_heads']} key/value "
                      f"heads of {model['head_dim']}"),
            ("block size", f"{config['block_size']} positions"), ("max_tokens", str(config["max_tokens"])),
            ("torch threads", str(config["threads"])), ("sessions start", f"{one_time(config['gap_s'])} apart"),
            ("text", f"{record['text']['name']}, sha256 {record['text']['sha256'][:16]}…")]
    rows += [(f"{NAMES[name]}: prompt ids sha256", f"{workload['digest'][:16]}…")
             for name, workload in record["workloads"].items()]
    return Block(tables=[Table(["setting", "value"], rows)])
