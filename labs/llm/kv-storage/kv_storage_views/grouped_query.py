"""The page's "Grouped-query attention: fewer heads to store": bytes and agreement per key/value head count."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_number, format_sci, plural


def gqa_view(record: dict[str, Any]) -> Block:
    rows = record["gqa"]
    modes = list(rows[0]["layouts"])
    baseline, tolerance = record["config"]["benchmark"]["baseline"], record["tolerance"]
    table = Table(
        header_rows=[[("Key/value heads", 1), ("Query heads", 1), ("Formula bytes", 1), ("Of multi-head", 1),
                      ("Bytes held after the loop", len(modes)),
                      (f"Max |diff| from {baseline} recompute, over every position", len(modes))]],
        headings=["", "", "", "", *modes, *modes],
        rows=[(row["kv_heads"], row["heads"], format_number(row["formula_bytes"]),
               f"{row['share_of_multi_head']:.0%}",
               *(format_number(row["layouts"][mode]["bytes"]) for mode in modes),
               *(format_sci(row["layouts"][mode]["max_abs_diff"]) for mode in modes)) for row in rows],
    )
    lengths = " or ".join(map(str, sorted({row["length"] for row in rows})))
    method = (f"One model per key/value head count; each layout decoded {lengths} tokens one at a time and was "
              f"compared with {baseline} recompute at every position, within atol = {tolerance['atol']}, "
              f"rtol = {tolerance['rtol']}. Bytes are what each layout holds at the end.")
    return Block(tables=[table], notes=[method, gqa_sentences(rows)[-1]])


def gqa_sentences(rows: list[dict[str, Any]]) -> list[str]:
    """Per grouped-query variant, its cache against full multi-head attention's; then the equivalence."""
    full = next((r for r in rows if r["kv_heads"] == r["heads"]), rows[0])
    sentences = []
    for row in (r for r in rows if r is not full):
        held = {mode: values["bytes"] for mode, values in row["layouts"].items()}
        concat = held.pop("concat")
        if set(held.values()) == {concat}:
            others = f"{' and '.join(held)} storage hold exactly the same"
        elif len(set(held.values())) == 1:
            others = f"{' and '.join(held)} storage hold {format_number(next(iter(held.values())))} bytes each"
        else:
            others = "; ".join(f"{mode} storage holds {format_number(value)} bytes" for mode, value in held.items())
        sentences.append(
            f"With {plural(row['kv_heads'], 'key/value head')} for {row['heads']} query heads, the concatenated "
            f"cache of {row['length']} positions takes {format_number(concat)} bytes, "
            f"{row['share_of_multi_head']:.0%} of the {full['kv_heads']}-head model's; {others}."
        )
    row, mode = max(((r, mode) for r in rows for mode in r["layouts"]),
                    key=lambda pair: pair[0]["layouts"][pair[1]]["max_abs_diff"])
    agree = all(v["argmax_agrees_every_step"] for r in rows for v in r["layouts"].values())
    sentences.append(
        f"Every layout of every variant matched full recompute at each of its {positions(rows)} positions; "
        f"the largest absolute difference was {format_sci(row['layouts'][mode]['max_abs_diff'])} "
        f"({mode}, {plural(row['kv_heads'], 'key/value head')}). "
        + ("The greedy (argmax) token was the same at every position." if agree else
           "The greedy (argmax) token differed somewhere: a near-tie that rounding tipped, within tolerance.")
    )
    return sentences


def positions(rows: list[dict[str, Any]]) -> str:
    return " or ".join(map(str, sorted({r["positions_compared"] for r in rows})))
