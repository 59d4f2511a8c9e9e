"""Two pictures drawn from the serving engine's own prefix indexes (llm_models.serving.prefix.hashing and .indexes, both
torch-free): the hash chain over three prompts' blocks, and the radix tree the same prompts build.

The prompts are vLLM's design-document example, a word per token and four per block, so a reader can follow which
block of which prompt matches: B shares A's first two blocks; C's last two blocks hold A's words, after another
first block."""

from __future__ import annotations

from typing import Any

from llm_models.serving.prefix.hashing import block_hashes
from llm_models.serving.prefix.indexes import HashIndex, Node, RadixIndex
from site_hooks.blocks import Block
from site_hooks.diagrams import Canvas, Diagram, legend

BLOCK = 4  # words per block in the pictures (the engine's blocks hold 16 tokens)
PROMPTS = {
    "A": "A gentle breeze stirred the leaves as children laughed in the distance",
    "B": "A gentle breeze stirred the leaves as children played in the park",
    "C": "A cold wind stirred the leaves as children laughed in the distance",
}
WORDS = sorted({word for text in PROMPTS.values() for word in text.split()})


def ids(text: str) -> list[int]:
    return [WORDS.index(word) for word in text.split()]


def tables(index: HashIndex | RadixIndex) -> dict[str, tuple[list[int], int]]:
    """Each prompt in turn as the engine admits it: its table (the cached blocks it finds, then new block ids) and
    how many blocks it found; each prompt's blocks are offered to ``index`` before the next prompt looks."""
    result, fresh = {}, 0
    for name, text in PROMPTS.items():
        tokens = ids(text)
        found = index.match(tokens, (len(tokens) - 1) // BLOCK)  # the engine's limit: the last token is computed
        new = list(range(fresh, fresh + len(tokens) // BLOCK - len(found)))
        fresh += len(new)
        result[name] = ([*found, *new], len(found))
        index.insert(tokens, result[name][0])
    return result


def blocks_of(text: str) -> list[str]:
    words = text.split()
    return [" ".join(words[i:i + BLOCK]) for i in range(0, len(words), BLOCK)]


def hash_chain_view(record: dict[str, Any]) -> Block:
    """Each prompt's blocks with the first hex digits of their chained hashes, looked up in order in a hash index
    (A first, then B, then C), coloured by what the lookup found."""
    admitted = tables(HashIndex(BLOCK))
    cell, left, top, gap = 190, 70, 40, 74
    canvas = Canvas(width=left + 3 * cell + 20, height=top + 3 * gap + 80, slug="hash-chain",
                    title="Three prompts' blocks and their chained hashes",
                    description="Prompt A's three blocks are computed and cached. B finds A's first two blocks by "
                                "their hashes and computes its third. C's first block differs, so every later hash "
                                "differs too: its last two blocks are computed again though their words equal A's.")
    for row, (name, text) in enumerate(PROMPTS.items()):
        table, found = admitted[name]
        digests = block_hashes(ids(text), BLOCK)
        y = top + row * gap
        canvas.text(left - 14, y + 34, name, size=15, anchor="end", weight="bold")
        for col, (words, digest) in enumerate(zip(blocks_of(text), digests)):
            fill = "shared" if col < found else ("old" if row == 0 else "new")
            canvas.rect(left + col * cell, y, cell - 8, gap - 14, fill, rx=4)
            canvas.text(left + col * cell + (cell - 8) / 2, y + 24, words, size=12)
            canvas.text(left + col * cell + (cell - 8) / 2, y + 46, f"block {table[col]} · hash {digest.hex()[:6]}",
                        size=12)
    legend(canvas, left, top + 3 * gap + 8, [
        ("old", "computed by the first prompt, then cached"),
        ("shared", "found by its hash: not computed again"),
        ("new", "not found (another hash): computed"),
    ], gap=22)
    return Block(diagrams=[Diagram(canvas.svg(), "Each block's hash folds in its parent's, so it names the whole prefix "
                                                 "that ends with it. Hashes from llm_models.serving.prefix.hashing, lookups "
                                                 "by its HashIndex.")])


def tree_view(record: dict[str, Any]) -> Block:
    """The radix tree the same prompts build (llm_models.serving.prefix.indexes.RadixIndex), one page per edge."""
    tree = RadixIndex(BLOCK)
    tables(tree)
    width, height, cell_w, cell_h, left, top, row_gap = 720, 250, 200, 46, 60, 30, 60
    canvas = Canvas(width=width, height=height, slug="radix-tree", title="The radix tree of the same three prompts",
                    description="From the root, A and B share a path of two pages and part at the third; C starts "
                                "its own path at its first page, so its equal later pages hang on another branch.")
    canvas.rect(10, top + row_gap + 8, 36, 30, "empty", rx=15)
    canvas.text(28, top + row_gap + 28, "root", size=11)
    rows = [0]  # the next free row, shared by the walk below

    def draw(node: Node, depth: int, parent: tuple[float, float]) -> None:
        for child in node.children.values():
            y = top + rows[0] * row_gap
            x = left + depth * (cell_w + 30)
            canvas.line(parent[0], parent[1], x, y + cell_h / 2)
            canvas.rect(x, y, cell_w, cell_h, "old", rx=4)
            canvas.text(x + cell_w / 2, y + 20, " ".join(WORDS[t] for t in child.page), size=12)
            canvas.text(x + cell_w / 2, y + 37, f"block {child.block}", size=11)
            draw(child, depth + 1, (x + cell_w, y + cell_h / 2))
            if not child.children:
                rows[0] += 1

    draw(tree.root, 0, (46, top + row_gap + 23))
    return Block(diagrams=[Diagram(canvas.svg(), "Built by llm_models.serving.prefix.indexes.RadixIndex from the prompts "
                                                 "above, admitted as the engine admits them: a lookup walks from the "
                                                 "root page by page; B found A's first two pages and added one node.")])
