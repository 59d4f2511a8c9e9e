"""The page's concept diagrams of paged storage, drawn from kv_storage.figures.TableModel (the block pool's
bookkeeping without tensors, which test_storage_pictures.py replays on a real BlockPool): the block table
from logical to physical blocks, and a fork before and after copy-on-write of its partly filled last block."""

from __future__ import annotations

from typing import Any

from kv_storage.figures import FORK_EXAMPLE, TABLE_EXAMPLE, TableModel, blocks, forked, interleaved, locate
from site_hooks.blocks import Block
from site_hooks.diagrams import Canvas, Diagram, cell_grid, legend
from site_hooks.formatting import plural

CELL = 22  # one slot
ROW = 30  # one block's row


def owners(model: TableModel) -> dict[int, list[tuple[str, int]]]:
    """Pool block -> every (request, logical block) whose table points at it."""
    held: dict[int, list[tuple[str, int]]] = {}
    for name, table in model.tables.items():
        for logical, block in enumerate(table):
            held.setdefault(block, []).append((name, logical))
    return held


def block_table_view(record: dict[str, Any]) -> Block:
    """Two requests decoded in alternation from one pool: each logical block, its table entry, its pool block."""
    model = interleaved(TABLE_EXAMPLE)
    size, pool = model.block_size, len(model.refcount)
    fills = dict(zip(model.tables, ("new", "old")))
    left, table_x, pool_x, top = 92, 190, 430, 56
    canvas = Canvas(width=pool_x + size * CELL + 120, height=top + pool * ROW + 70, slug="block-table",
                    title="A block table maps each request's logical blocks to blocks anywhere in the pool",
                    description="; ".join(f"request {name}: {model.lengths[name]} positions, logical blocks "
                                          f"{', '.join(f'{i} → pool block {b}' for i, b in enumerate(table))}"
                                          for name, table in model.tables.items())
                                + f"; {len(model.free)} of {pool} pool blocks free.")
    canvas.text(left + size * CELL / 2, 20, "logical blocks", weight="bold")
    canvas.text(table_x + 18, 20, "table", weight="bold")
    canvas.text(pool_x + size * CELL / 2, 20, f"pool: {pool} blocks × {size} slots", weight="bold")
    y = top
    for name, table in model.tables.items():
        for logical, (block, filled) in enumerate(zip(table, model.filled(name))):
            cell_grid(canvas, left, y, 1, size, CELL, lambda r, c, f=filled, n=name: fills[n] if c < f else "empty")
            canvas.text(left - 8, y + 15, f"{name} · {logical}", anchor="end", size=12)
            canvas.text(table_x, y + 15, f"{logical} → {block}", anchor="start", size=12)
            canvas.line(table_x + 44, y + 10, pool_x - 6, top + block * ROW + 10, width=1)
            y += ROW
        y += 14
    held = owners(model)
    for block in range(pool):
        by = top + block * ROW
        holder = held.get(block)
        filled = model.filled(holder[0][0])[holder[0][1]] if holder else 0
        name = holder[0][0] if holder else ""
        cell_grid(canvas, pool_x, by, 1, size, CELL, lambda r, c, f=filled, n=name: fills[n] if c < f else "empty")
        canvas.text(pool_x + size * CELL + 8, by + 15, f"block {block}" + ("" if holder else " (free)"),
                    anchor="start", size=12)
    legend(canvas, left - 70, top + pool * ROW + 14,
           [(fills[name], f"a position of request {name}") for name in model.tables], gap=22)
    legend(canvas, pool_x, top + pool * ROW + 14, [("empty", "an empty slot")])
    name = next(iter(model.tables))
    last = model.lengths[name] - 1
    logical, slot = locate(last, size)
    wasted = model.empty_slots()
    caption = (f"Position p lives in slot p mod {size} of pool block table[p ÷ {size}]: request {name}'s position "
               f"{last} is slot {slot} of its logical block {logical}, pool block {model.tables[name][logical]}. "
               f"Decoded in alternation, the two requests take interleaved blocks; {plural(wasted, 'slot')} of their "
               f"last blocks are reserved but empty. The record's pool uses blocks of "
               f"{record['config']['benchmark']['block_size']} positions.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])


def fork_panel(model: TableModel, prompt: int, slug: str, title: str) -> Diagram:
    """Both requests' tables as cells naming their pool block, then the pool's used blocks slot by slot."""
    size = model.block_size
    held = owners(model)
    used = sorted(held)
    left, top = 64, 44
    pool_top = top + 2 * ROW + 40
    canvas = Canvas(width=left + size * CELL + 150, height=pool_top + len(used) * ROW + 8, slug=slug, title=title,
                    description="; ".join(f"{name} table {model.tables[name]}" for name in model.tables) + "; "
                    + "; ".join(f"pool block {b}: {len(held[b])} reference(s)" for b in used), max_width="24rem")
    canvas.text(left + 1.5 * ROW, 16, "block table", size=12, weight="bold")
    for row, (name, table) in enumerate(model.tables.items()):
        y = top + row * ROW
        canvas.text(left - 8, y + 15, name, anchor="end", size=12)
        for logical, block in enumerate(table):
            canvas.rect(left + logical * ROW, y, ROW - 4, CELL, "shared" if model.refcount[block] > 1 else "old", rx=3)
            canvas.text(left + logical * ROW + (ROW - 4) / 2, y + 15, str(block), size=12)
    canvas.text(left + size * CELL / 2, pool_top - 12, "pool blocks", size=12, weight="bold")
    for index, block in enumerate(used):
        name, logical = held[block][0]
        filled = model.filled(name)[logical]

        def fill(r: int, c: int, b: int = block, lg: int = logical, f: int = filled) -> str:
            if c >= f:
                return "empty"
            return "new" if lg * size + c >= prompt else "shared" if model.refcount[b] > 1 else "old"

        y = pool_top + index * ROW
        cell_grid(canvas, left, y, 1, size, CELL, fill)
        canvas.text(left - 8, y + 15, str(block), anchor="end", size=12)
        whose = "both" if len(held[block]) > 1 else held[block][0][0]
        canvas.text(left + size * CELL + 8, y + 15, f"refs {model.refcount[block]} ({whose})", anchor="start", size=12)
    return Diagram(canvas.svg(), title)


def fork_view(record: dict[str, Any]) -> Block:
    """A fork shares every block of the prompt; the first write into the shared partial block copies it."""
    prompt, size = FORK_EXAMPLE["prompt"], FORK_EXAMPLE["block_size"]
    before, after = forked(FORK_EXAMPLE), forked(FORK_EXAMPLE, child_tokens=1, parent_tokens=1)
    partial = before.filled("parent")[-1]  # positions of the prompt in its last, partly filled block
    (who, shared, copy), = after.copies
    diagrams = [fork_panel(before, prompt, "fork-before", f"After fork(): one {prompt}-token prompt, two tables"),
                fork_panel(after, prompt, "fork-after", "After one more token each: copy-on-write")]
    sharing = record["sharing"]
    colours = ("Green: a block both tables hold; blue: a prompt position in a block one request holds alone; "
               "orange: a token written after the fork; grey: an empty slot.")
    note = (f"fork() copies the table and adds a reference to each of the prompt's {plural(blocks(prompt, size), 'block')}; "
            f"no key or value moves. The {who}'s first write lands in block {shared}, shared and holding "
            f"{partial} of {size} positions, so the pool copies that one block to block {copy} and the {who}'s "
            f"table moves to the copy; the other request, now its sole holder, writes in place. Full blocks are "
            f"never written again and stay shared.")
    measured = (f"In the record's run, {sharing['requests']} requests forked from "
            f"a {sharing['prompt']}-token prompt in blocks of {sharing['block_size']}: "
            f"{plural(sharing['with']['shared_blocks'], 'block')} stayed shared and "
            f"{plural(sharing['with']['copied_blocks'], 'request')} copied the partial one.")
    return Block(diagrams=diagrams, notes=[colours, note, measured])

