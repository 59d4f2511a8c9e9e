"""The cache on a trained model: the same answer with and without it, and what bfloat16 changes."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_sci, plural


def trained_view(record: dict[str, Any]) -> Block:
    t = record["trained"]
    exact, halved, forced = t["float32"], t["bfloat16"], t["teacher_forced"]
    same = t["same_answer_without_cache"]
    lead = (f"Asked “{t['prompt']}” ({plural(t['prompt_tokens'], 'prompt token')} through its chat template), "
            f"{t['model']} on this lab's decoder answered greedily in {plural(len(exact['ids']), 'token')} with the "
            f"cache; recomputing the whole sequence for every new token gave "
            + ("the same tokens." if same else "different tokens."))
    tolerance = t["tolerance"]
    check = (f"Fed that answer back, the cached logits stayed within {format_sci(forced['cached_vs_full_max_abs_diff'])} "
             f"of the full recompute's at all {forced['positions']} positions (largest logit "
             f"{forced['max_abs_reference']:.1f}; atol {tolerance['atol']:g}, rtol {tolerance['rtol']:g}).")
    parts = t["bfloat16_parts_at"]
    dtype = (f"In bfloat16 the logits moved by up to {forced['bfloat16_vs_float32_max_abs_diff']:.2f} and the most "
             f"likely token agreed at {forced['bfloat16_argmax_agrees']} of {forced['positions']} positions; "
             + ("the greedy answer was the same throughout." if parts is None else
                f"the greedy answer parted from float32's at new token {parts + 1} and went its own way from there."))
    table = Table(headings=["Path", "Greedy answer"],
                  rows=[("float32, with the cache", exact["text"]),
                        ("float32, full recompute", "the same tokens" if same else "different tokens (see the record)"),
                        ("bfloat16, with the cache", halved["text"])])
    return Block(paragraphs=[lead, check, dtype], tables=[table],
                 notes=["The weights are real; the knowledge of a 135-million-parameter model is modest, and the "
                        "answer shows it. What matters here is that its logits are real, and the cache leaves them "
                        "as they were."])


def trained_answer_view(record: dict[str, Any]) -> Block:
    """The question and the float32 greedy answer alone: what the serving page's example request streams."""
    t = record["trained"]
    answer = t["float32"]
    lead = (f"{t['model']}'s greedy answer in float32 with the cache, {plural(len(answer['ids']), 'token')}, as "
            f"the KV-cache lab's record holds it:")
    return Block(paragraphs=[lead],
                 tables=[Table(headings=["Question", "Answer"], rows=[(t["prompt"], answer["text"])])])
