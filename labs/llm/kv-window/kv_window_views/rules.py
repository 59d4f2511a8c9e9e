"""The sinks cache's two position rules: re-rotation drift on random keys and on the model's own, and what
each rule and dtype does to the trained model's predictions against the float32 read rule."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_sci

from .common import label, level_verdict, nats, ranged

VARIANTS = {"float32": "float32", "bfloat16-storage": "bfloat16 keys, float32 turns",
            "bfloat16": "bfloat16 keys and turns"}
RULES = {"read": "rotate at read", "rerotate": "keep rotated, re-rotate on shift"}


def drift_view(record: dict[str, Any]) -> Block:
    drift = record["drift"]
    tables = []
    for probe, lead in (("random", "Random keys, {keys} of {head_dim} features, RoPE base {theta:g}"),
                        ("trained", "{keys} keys the model cached, {head_dim} features, its RoPE base")):
        entry = drift[probe]
        rows = [[VARIANTS[name]] + [format_sci(value) for value in values] for name, values in entry["errors"].items()]
        headings = ["stored as"] + [f"{count:,} shift{'s' if count > 1 else ''}" +
                                    (" (this cache's most)" if count == drift["most_shifts"] else "")
                                    for count in entry["shifts"]]
        tables.append(Table(headings, rows, lead=lead.format(**entry) + ": relative error after each count of "
                                                                       "re-rotations by one position."))
    return Block(tables=tables, notes=[f"Error: {drift['method']}."])


def rule_verdict(against: dict[str, Any], found: dict[str, Any]) -> str:
    """'indistinguishable from the reference' only where the interval resolves the page's yardstick; a level
    interval wider than that, 'too coarse: 3.1× the band'."""
    if against["verdict"] == "level" and not found["resolves"]:
        return "too coarse" + (f": {found['width_over_band']:.1f}× the band" if found["width_over_band"] is not None
                               else " to tell")
    return f"{level_verdict(against, found)} the reference"


def rules_view(record: dict[str, Any]) -> Block:
    rows = []
    read = label(record, "sinks")
    for run_label, summary in record["rules_summary"].items():
        entry = record["policies"][run_label] if run_label == read else record["rules"][run_label]
        rule, dtype = entry["policy"]["rule"], entry["policy"]["dtype"]
        against = summary.get("against_read")
        rows.append([RULES[rule], dtype, ranged(summary["after_eviction"]["perplexity"]),
                     ranged(summary["after_eviction"]["kl"], 3),
                     nats(against["nll_difference"]) if against else "the reference",
                     rule_verdict(against, summary["read_resolution"]) if against else "—",
                     format_sci(summary["largest_nll_gap"]) if against else "—"])
    config = record["config"]
    return Block(tables=[Table(
        ["rule", "dtype", "perplexity", "KL from full", "NLL against float32 read", "verdict", "largest NLL gap"], rows,
        lead=f"Sinks + window ({config['sinks']} sinks, {config['slots']} slots) over positions "
             f"{config['slots']:,}–{config['rule_positions'] - 1:,}; the model computes in float32, the cache stores "
             f"and rotates its keys in the dtype shown.")])
