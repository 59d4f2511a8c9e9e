"""The settings the record was measured with, in place of the shared config table (which reads a timing
sweep's config)."""

from __future__ import annotations

from typing import Any

from kv_window.figures import WALL_TIME_LIMIT_S
from site_hooks.blocks import Block, Table
from site_hooks.views import setting_text


def config_view(record: dict[str, Any]) -> Block:
    config, model, text = record["config"], record["model"], record["text"]
    rows = [[name.replace("_", " "), setting_text(config[name])] for name in config]
    rows += [["model", f"{model['name']} ({model['weights']}, {model['dtype']}): {model['layers']} layers, "
                       f"{model['heads']} query heads sharing {model['kv_heads']} key/value heads of {model['head_dim']}"],
             ["text", f"{text['name']}: {text['source']}; {text['tokens']:,} tokens, the first {text['used']:,} "
                      f"used; sha256 {text['sha256'][:16]}…"],
             ["policies", setting_text([entry["policy"]["label"] for entry in record["policies"].values()])],
             ["chunks", setting_text({label: entry["chunk"] for label, entry in
                                      {**record["policies"], **record["rules"]}.items()})],
             ["drift", record["drift"]["method"]],
             ["wall time", f"{record['wall_time_s']:.0f} s for the whole run, "
                           f"{'within' if record['wall_time_met'] else 'over'} its {WALL_TIME_LIMIT_S:.0f} s limit"]]
    return Block(tables=[Table(["setting", "value"], rows)])
