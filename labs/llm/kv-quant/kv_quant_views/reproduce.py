"""The settings the record was measured with, in place of the shared config table (which reads a timing
sweep's config): the run's options, the layer shape, the toy block, the trained-model evaluation."""

from __future__ import annotations

from typing import Any

from kv_quant.figures import WALL_TIME_LIMIT_S
from site_hooks.blocks import Block, Table
from site_hooks.views import setting_text


def config_view(record: dict[str, Any]) -> Block:
    config, trained = record["config"], record["trained"]
    rows = [[name.replace("_", " "), setting_text(config[name])]
            for name in ("seed", "threads", "repeats", "quick", "lengths", "layer", "toy", "budget_bytes", "serving")]
    rows += [["toy model", setting_text(config["toy_model"])],
             ["formats", setting_text(config["formats"])],
             ["trained formats", setting_text(config["trained_formats"])],
             ["trained model", f"{trained['model']} ({trained['weights']}, {trained['dtype']})"],
             ["contexts", setting_text(trained["contexts"])],
             ["chunk", f"{trained['chunk']} tokens per prefill call"],
             ["corpus", "; ".join(f"{f['file']}: {f['tokens']} tokens, sha256 {f['sha256'][:16]}…"
                                  for f in trained["corpus"]["files"])],
             ["greedy", f"{trained['new_tokens']} tokens after a {trained['prompt_tokens']}-token chat prompt"],
             ["evaluation", trained["method"]],
             ["timing", trained["timing"]["method"]],
             ["attention memory", record["attention_memory"]["method"]],
             ["wall time", f"{record['wall_time_s']:.0f} s for the whole run, "
                           f"{'within' if record['wall_time_met'] else 'over'} its {WALL_TIME_LIMIT_S:.0f} s limit"]]
    return Block(tables=[Table(["setting", "value"], rows)])
