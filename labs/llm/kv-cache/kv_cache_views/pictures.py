"""The page's concept diagrams, drawn from the lab's own rules: the cache growing per step, what each path
computes per step, and the mask for a chunk after a prefix (kv_cache.figures.causal_visible) beside the
wrong top-left one (top_left_visible). site_hooks.diagrams draws them."""

from __future__ import annotations

from typing import Any

from kv_cache.figures import (
    MASK_EXAMPLE,
    cache_bytes,
    causal_visible,
    mask_row,
    projections,
    top_left_visible,
    vector_bytes,
)
from site_hooks.blocks import Block
from site_hooks.diagrams import Canvas, Diagram, cell_grid, legend
from site_hooks.formatting import format_bytes

STEPS = 5  # decode steps the growth picture shows


def cache_growth_view(record: dict[str, Any]) -> Block:
    """Keys and values, [B, H_kv, T, D], after each of the first STEPS steps: one new position per step."""
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    heads, dim = model["kv_heads"], model["head_dim"]
    cell, left, gap = 22, 150, 36
    row_h = heads * cell + 30
    canvas = Canvas(width=left + 2 * STEPS * cell + gap + 110, height=40 + STEPS * row_h + 34,
                    title=f"The cache after each of the first {STEPS} decode steps",
                    description=(f"Keys and values each have shape [B, H_kv, T, D] = [{batch}, {heads}, T, {dim}]. "
                                 f"After step t the position axis T holds t positions: every step appends one "
                                 f"column per head to both tensors and rewrites none."), slug="cache-growth",
                    max_width="34rem")
    keys_x = left
    values_x = left + STEPS * cell + gap
    canvas.text(keys_x + STEPS * cell / 2, 22, "keys", weight="bold")
    canvas.text(values_x + STEPS * cell / 2, 22, "values", weight="bold")
    for step in range(1, STEPS + 1):
        y = 40 + (step - 1) * row_h
        canvas.text(left - 14, y + heads * cell / 2, f"after step {step}", anchor="end")
        canvas.text(left - 14, y + heads * cell / 2 + 16, f"T = {step}", anchor="end", size=12)
        for x in (keys_x, values_x):
            cell_grid(canvas, x, y, heads, STEPS,
                      cell, lambda r, c, s=step: "new" if c == s - 1 else "old" if c < s - 1 else "empty")
        canvas.text(values_x + STEPS * cell + 14, y + heads * cell / 2 + 4,
                    format_bytes(cache_bytes(model, batch, step)), anchor="start", size=12)
    bottom = 40 + STEPS * row_h
    legend(canvas, keys_x - 110, bottom, [("old", "kept from earlier steps")])
    legend(canvas, values_x - 10, bottom, [("new", "appended by this step")])
    caption = (f"One row per key/value head (H_kv = {heads}); one cell per position, holding D = {dim} "
               f"{model['dtype']} values ({vector_bytes(model)} bytes). Every step adds one column to keys and to "
               f"values, {format_bytes(record['cache_formula']['per_position_bytes'])} in all at batch {batch}; the "
               f"figure at the right "
               f"is the whole cache. Shapes from the record's config.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])


def work_view(record: dict[str, Any]) -> Block:
    """Which positions' keys and values each path projects at each step, for the first 8 steps."""
    n = 8
    cell, left = 26, 70
    diagrams = []
    for slug, title, rule, says in (
        ("work-full", "Full prefix: every step projects every position again",
         lambda r, c: "new" if c <= r else "empty", "projects positions 0 to t again at step t"),
        ("work-cached", "Cached: every step projects its new position only",
         lambda r, c: "new" if c == r else "old" if c < r else "empty", "projects position t, reads 0 to t − 1"),
    ):
        canvas = Canvas(width=left + n * cell + 10, height=60 + n * cell + 10, title=title, slug=slug,
                        description=f"Rows are decode steps 0 to {n - 1}, columns positions 0 to {n - 1}; the path {says}.",
                        max_width="20rem")
        canvas.text(left + n * cell / 2, 16, "position →", size=12)
        cell_grid(canvas, left, 50, n, n, cell, rule, row_labels=[f"step {i}" for i in range(n)],
                  col_labels=[str(i) for i in range(n)])
        diagrams.append(Diagram(canvas.svg(), title))
    full, cached = projections(n)
    longest = record["projections"]
    caption = (f"Orange: keys and values projected at that step; blue: read back from the cache. Over {n} steps "
               f"the full path projects {full} positions and the cached path {cached}; over the record's "
               f"longest loop, {record['lengths'][-1]['steps']:,} steps, that is {longest['full']:,} against "
               f"{longest['cached']:,}.")
    return Block(diagrams=diagrams, notes=[caption])


def mask_view(record: dict[str, Any]) -> Block:
    """The bottom-right-aligned mask for a chunk after a prefix, beside the top-left triangle that hides it."""
    queries, offset = MASK_EXAMPLE
    keys = offset + queries
    right, wrong = causal_visible(queries, offset), top_left_visible(queries, keys)
    cell, left = 26, 52
    diagrams = []
    for slug, title, fill in (
        ("mask-right", f"Correct: aligned to the bottom right ({len(right)} visible pairs)",
         lambda r, c: ("old" if c < offset else "new") if (r, c) in right else "empty"),
        ("mask-wrong", f"Wrong: a top-left triangle ({len(wrong)} visible pairs)",
         lambda r, c: ("old" if c < offset else "new") if (r, c) in wrong else "wrong" if (r, c) in right else "empty"),
    ):
        canvas = Canvas(width=left + keys * cell + 10, height=72 + queries * cell + 8, title=title, slug=slug,
                        description=(f"{queries} query rows at absolute positions {offset} to {keys - 1} against "
                                     f"{keys} key columns 0 to {keys - 1}; "
                                     + "; ".join(f"query {row.position} sees "
                                                 f"{len(row.sees if slug == 'mask-right' else row.shown)} keys"
                                                 for row in map(mask_row, range(queries)))),
                        max_width="26rem")
        canvas.text(left + offset * cell / 2, 16, f"cached prefix (keys 0–{offset - 1})", size=12)
        canvas.text(left + offset * cell + queries * cell / 2, 16, "new chunk", size=12)
        canvas.line(left + offset * cell - 1, 22, left + offset * cell - 1, 62 + queries * cell, dash="4 3")
        cell_grid(canvas, left, 50, queries, keys, cell, fill, row_labels=[f"q{offset + r}" for r in range(queries)],
                  col_labels=[str(c) for c in range(keys)])
        diagrams.append(Diagram(canvas.svg(), title))
    hidden = len(right.difference(wrong))
    caption = (f"{queries} new queries after a {offset}-token prefix: {queries} × {keys} scores. Blue: a cached key "
               f"the query sees; orange: a key of the new chunk; purple: a key the top-left triangle hides although "
               f"the query must see it ({hidden} of {len(right)} pairs). Both grids come from kv_cache.figures, "
               f"which test_attention checks against the torch masks.")
    return Block(diagrams=diagrams, notes=[caption])
