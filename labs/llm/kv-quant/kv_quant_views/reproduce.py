"""The settings the record was measured with, in place of the shared config table (which reads a timing
sweep's config): the run's options, the layer shape, the toy block, the trained-model evaluation."""

from __future__ import annotations

from typing import Any

from kv_quant.figures import WALL_TIME_LIMIT_S
from site_hooks.blocks import Block, Table
from site_hooks.views import setting_text


def config_view(record: dict[str, Any]) -> Block:
    config, trained = record["config"], record["trained"]
    text, boot = trained["text"], trained["bootstrap"]
    rows = [[name.replace("_", " "), setting_text(config[name])]
            for name in ("seed", "threads", "quality_threads", "repeats", "quick", "lengths", "layer", "toy",
                         "budget_bytes", "serving")]
    rows += [["toy model", setting_text(config["toy_model"])],
             ["formats", setting_text(config["formats"])],
             ["trained formats", setting_text(config["trained_formats"])],
             ["trained model", f"{trained['model']} ({trained['weights']}, {trained['dtype']})"],
             ["contexts", setting_text(trained["contexts"])],
             ["chunk", f"{trained['chunk']} tokens per prefill call ({trained['kivi_chunk']} for KIVI)"],
             ["text", f"{text['name']}: {text['source']} ({text['url']}); {text['tokens']:,} SmolLM2 tokens, the "
                      f"first {text['evaluated']:,} positions evaluated; sha256 {text['sha256']}"],
             ["bootstrap", f"{boot['resamples']:,} seeded resamples (seed {boot['seed']}) of runs of {boot['block']} "
                           f"consecutive positions, {boot['level']:.0%} percentile intervals (labkit.bootstrap); a "
                           f"difference between two formats resamples the same positions for both"],
             ["greedy", f"{trained['new_tokens']} tokens after a {trained['prompt_tokens']}-token chat prompt"],
             ["evaluation", trained["method"]],
             ["timing", trained["timing"]["method"]],
             ["attention memory", record["attention_memory"]["method"]],
             ["wall time", f"{record['wall_time_s']:.0f} s for the whole run, "
                           f"{'within' if record['wall_time_met'] else 'over'} its {WALL_TIME_LIMIT_S:.0f} s limit"]]
    return Block(tables=[Table(["setting", "value"], rows)])
