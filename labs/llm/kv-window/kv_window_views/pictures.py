"""Three pictures drawn from the rules the caches run (kv_window.rules): a ring buffer's slots over time
(ring_slot), the sinks + window mask and the packed block-diagonal mask (visible), with the positions a packed
row restarts at (packed_positions, packed_sequences)."""

from __future__ import annotations

from typing import Any

from kv_window.rules import packed_positions, packed_sequences, ring_slot, visible
from site_hooks.blocks import Block
from site_hooks.diagrams import Canvas, Diagram, cell_grid, legend

RING = {"window": 6, "moments": (6, 9, 14)}  # a ring of 6 slots after 6, 9 and 14 tokens
SINKS = {"sinks": 2, "window": 4, "positions": 12}  # 2 sinks and the 4 newest positions, 12 queries
PACKED = (3, 5, 4)  # three prompts packed into one row of 12 positions


def ring_view(record: dict[str, Any]) -> Block:
    window, cell = RING["window"], 46
    canvas = Canvas(width=720, height=300, slug="ring-slots", title="A ring buffer's slots",
                    description=f"A ring of {window} slots after {', '.join(map(str, RING['moments']))} tokens: "
                                f"position p sits in slot p mod {window}; the newest token overwrites the one "
                                f"{window} places before it.")
    x, y = 190, 50
    for col in range(window):
        canvas.text(x + col * cell + cell / 2, y - 12, f"slot {col}", size=12)
    for row, tokens in enumerate(RING["moments"]):
        held = {ring_slot(p, window): p for p in range(tokens)}  # later positions overwrite earlier ones

        def fill(_: int, col: int, held: dict[int, int] = held, tokens: int = tokens) -> str:
            return "new" if held[col] == tokens - 1 else "old"

        top = y + row * (cell + 18)
        cell_grid(canvas, x, top, 1, window, cell, fill, row_labels=[f"after {tokens} tokens"], label_size=12)
        for col in range(window):
            canvas.text(x + col * cell + cell / 2 - 1, top + cell / 2 + 5, str(held[col]), size=14, weight="bold")
    legend(canvas, x, y + len(RING["moments"]) * (cell + 18) + 6, [
        ("new", "the newest position, just written"),
        ("old", "a position still inside the window; every slot states which one it holds"),
    ])
    caption = (f"The ring never moves memory: position p goes to slot p mod {window}. Slot order is not position "
               "order, so the band mask is built from the positions each slot states, never from its index.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])


def mask_canvas(slug: str, title: str, description: str, count: int, fill, row_labels: list[str],
                col_labels: list[str], entries: list[tuple[str, str]]) -> Canvas:
    cell = 24
    canvas = Canvas(width=720, height=150 + count * cell, slug=slug, title=title, description=description)
    x, y = 130, 56
    canvas.text(x, 24, "keys →", anchor="start", size=12)
    cell_grid(canvas, x, y, count, count, cell, fill, row_labels=row_labels, col_labels=col_labels, label_size=11)
    legend(canvas, x + count * cell + 24, y, entries)
    return canvas


def sinks_view(record: dict[str, Any]) -> Block:
    sinks, window, count = SINKS["sinks"], SINKS["window"], SINKS["positions"]

    def fill(query: int, key: int) -> str:
        if not visible(query, key, window=window, sinks=sinks):
            return "empty"
        if key == query:
            return "new"
        return "shared" if key < sinks else "old"

    canvas = mask_canvas("sinks-mask", "The sinks + window mask",
                         f"{count} queries over {count} keys: each sees the first {sinks} positions and its "
                         f"{window} newest, itself included.", count, fill,
                         [f"query {q}" for q in range(count)], [str(k) for k in range(count)],
                         [("shared", f"a sink: one of the first {sinks}"), ("old", "inside the window"),
                          ("new", "the query's own key"), ("empty", "evicted: hidden")])
    caption = (f"Sinks + window with {sinks} sinks and a window of {window}: the first {sinks} columns stay "
               "visible to every query, the band follows the diagonal. Window-only is the same band without "
               "the sink columns.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])


def packed_view(record: dict[str, Any]) -> Block:
    positions, sequences = packed_positions(PACKED), packed_sequences(PACKED)
    count = len(positions)

    def fill(query: int, key: int) -> str:
        if visible(positions[query], positions[key], sequences[query], sequences[key]):
            return "new" if key == query else "old"
        return "wrong" if key < query else "empty"

    names = "abcdefgh"
    canvas = mask_canvas("packed-mask", "A packed row's block-diagonal mask",
                         f"Prompts of {', '.join(map(str, PACKED))} tokens in one row of {count}: each token sees "
                         f"its own prompt's earlier tokens only; positions restart at 0 for each prompt.", count,
                         fill, [f"{names[s]}, pos {p}" for s, p in zip(sequences, positions)],
                         [str(p) for p in positions],
                         [("old", "visible: same prompt, not later"), ("new", "the token's own key"),
                          ("wrong", "what a plain causal mask would also show"), ("empty", "hidden")])
    caption = ("The column labels are the positions each token is rotated at: they restart with every prompt. "
               "A causal mask without sequence ids lets each prompt read every prompt packed before it.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])
