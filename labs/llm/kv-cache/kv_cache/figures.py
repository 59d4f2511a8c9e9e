"""Every figure of the KV-cache record that follows from its raw data, and what the raw data must satisfy.

Torch-free: the benchmark fills its record with ``derive`` (labkit.harness.run), the site build checks
the stored figures against it (labkit.figures.check), and the views import the constants below.
The shared timing statistics (min/median/max, speedups) come from labkit.summary.sweep_figures.
"""

from __future__ import annotations

from typing import Any

from labkit.figures import Figures, refuse

from .memory import kv_cache_bytes

MODES = ("full", "cached")  # the benchmark's modes, in its run order: recompute the prefix, or read the cache
BASELINE = "full"
WORKED_EXAMPLE = 128  # positions: the article's worked example of the byte formula
MASK_EXAMPLE = (5, 7)  # (new queries, cached prefix): the chunked-prefill test's chunk, drawn on the page


def causal_visible(query_len: int, offset: int) -> set[tuple[int, int]]:
    """(row, key) pairs a query may see: row i sits at absolute position offset + i and sees keys 0..offset + i.
    The torch-free twin of llm_models.attention.causal_mask (test_attention checks they agree)."""
    if query_len < 1 or offset < 0:
        raise ValueError(f"need query_len >= 1 and offset >= 0, got {query_len} and {offset}")
    return {(row, key) for row in range(query_len) for key in range(offset + row + 1)}


def top_left_visible(query_len: int, keys: int) -> set[tuple[int, int]]:
    """The wrong mask on a rectangular score matrix: a lower triangle anchored at the top-left corner, as
    scaled_dot_product_attention(is_causal=True) builds it (row i sees keys 0..i)."""
    return {(row, key) for row in range(query_len) for key in range(min(row + 1, keys))}


def cache_bytes(model: dict[str, Any], batch: int, length: int) -> int:
    """The byte formula for a record's model config (kv_cache.memory.kv_cache_bytes)."""
    return kv_cache_bytes(batch, model["kv_heads"], length, model["head_dim"], model["bytes_per_element"])


def check_invariants(record: dict[str, Any], source: str) -> None:
    """The raw data must describe this lab's experiment: its two modes, one decode step per position, the
    precision check at the longest length, and cache tensors as large as the formula."""
    bench = record["config"]["benchmark"]
    if bench["modes"] != list(MODES) or bench["baseline"] != BASELINE:
        refuse(source, ("config", "benchmark", "modes"), f"are {bench['modes']} with baseline {bench['baseline']!r}, "
               f"but this lab measures {list(MODES)} with baseline {BASELINE!r}")
    last = record["lengths"][-1]["length"]
    if record["precision"]["length"] != last:
        refuse(source, ("precision", "length"), f"is {record['precision']['length']}, but the precision check "
               f"runs at the longest length, {last}")
    check_trained(record, source)
    model, batch = record["config"]["model"], bench["batch"]
    for index, entry in enumerate(record["lengths"]):
        if entry["steps"] != entry["length"]:
            refuse(source, ("lengths", index, "steps"), f"is {entry['steps']}, but a loop over {entry['length']} "
                   f"positions makes {entry['length']} decode steps")
        formula = cache_bytes(model, batch, entry["length"])
        if entry["cache_bytes"]["measured"] != formula:
            refuse(source, ("lengths", index, "cache_bytes", "measured"), f"is {entry['cache_bytes']['measured']}, "
                   f"but the cache tensors of 2 x B x Hkv x T x D x bytes hold {formula} from the record's config")


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token sequences differ (a shorter one differs where it ends); None if equal."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def check_trained(record: dict[str, Any], source: str) -> None:
    """The trained model's answers are as long as asked (or end at a stop token), and the cached logits equal
    the full recompute's within the stated tolerance at every position."""
    section = record["trained"]
    for dtype in ("float32", "bfloat16"):
        count = len(section[dtype]["ids"])
        if not 1 <= count <= section["new_tokens"]:
            refuse(source, ("trained", dtype, "ids"), f"holds {count} tokens, but the answer was {section['new_tokens']} "
                   f"tokens at most")
    forced = section["teacher_forced"]
    if forced["positions"] != section["prompt_tokens"] + len(section["float32"]["ids"]):
        refuse(source, ("trained", "teacher_forced", "positions"), f"is {forced['positions']}, but the prompt's "
               f"{section['prompt_tokens']} tokens and the float32 answer's {len(section['float32']['ids'])} make "
               f"{section['prompt_tokens'] + len(section['float32']['ids'])}")
    if forced["bfloat16_argmax_agrees"] > forced["positions"]:
        refuse(source, ("trained", "teacher_forced", "bfloat16_argmax_agrees"), f"is {forced['bfloat16_argmax_agrees']}, "
               f"more than the {forced['positions']} positions compared")
    tolerance = section["tolerance"]
    bound = tolerance["atol"] + tolerance["rtol"] * forced["max_abs_reference"]
    if forced["cached_vs_full_max_abs_diff"] > bound:
        refuse(source, ("trained", "teacher_forced", "cached_vs_full_max_abs_diff"), f"is "
               f"{forced['cached_vs_full_max_abs_diff']:g}, beyond atol + rtol x max|reference| = {bound:g}")


def derive(record: dict[str, Any]) -> Figures:
    """Per length, the byte formula's count for the record's config."""
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    figures = Figures()
    for index, entry in enumerate(record["lengths"]):
        figures.add(("lengths", index, "cache_bytes", "formula"), cache_bytes(model, batch, entry["length"]),
                    "2 x B x Hkv x T x D x bytes from the record's config")
    section = record["trained"]
    exact = section["float32"]
    figures.add(("trained", "same_answer_without_cache"), exact["ids"] == exact["full_recompute_ids"],
                "comparing the cached and the full-recompute float32 answers")
    figures.add(("trained", "bfloat16_parts_at"), first_difference(exact["ids"], section["bfloat16"]["ids"]),
                "the first token where the bfloat16 answer differs from the float32 one")
    return figures
