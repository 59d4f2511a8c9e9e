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
    The torch-free twin of kv_cache.attention.causal_mask (test_attention checks they agree)."""
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
    model, batch = record["config"]["model"], bench["batch"]
    for index, entry in enumerate(record["lengths"]):
        if entry["steps"] != entry["length"]:
            refuse(source, ("lengths", index, "steps"), f"is {entry['steps']}, but a loop over {entry['length']} "
                   f"positions makes {entry['length']} decode steps")
        formula = cache_bytes(model, batch, entry["length"])
        if entry["cache_bytes"]["measured"] != formula:
            refuse(source, ("lengths", index, "cache_bytes", "measured"), f"is {entry['cache_bytes']['measured']}, "
                   f"but the cache tensors of 2 x B x Hkv x T x D x bytes hold {formula} from the record's config")


def derive(record: dict[str, Any]) -> Figures:
    """Per length, the byte formula's count for the record's config."""
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    figures = Figures()
    for index, entry in enumerate(record["lengths"]):
        figures.add(("lengths", index, "cache_bytes", "formula"), cache_bytes(model, batch, entry["length"]),
                    "2 x B x Hkv x T x D x bytes from the record's config")
    return figures
