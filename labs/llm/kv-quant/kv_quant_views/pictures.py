"""Two layouts drawn from the lab's own functions: KIVI's keys per channel with its residual window
(llm_models.cache_formats.kivi_split), and one llama.cpp q4_0 block (32 four-bit codes beside one fp16 scale,
kv_quant.figures.bits_per_element)."""

from __future__ import annotations

from typing import Any

from kv_quant.figures import bits_per_element
from llm_models.cache_formats import GGML_BLOCK, GGML_SCALE_BYTES, CacheFormat, kivi_residual_range, kivi_split
from site_hooks.blocks import Block
from site_hooks.diagrams import Canvas, Diagram, cell_grid, legend

# A small KIVI, drawn to scale: groups of 4 tokens, a residual of 6, 8 channels, 17 tokens so far.
PICTURE = CacheFormat("kivi", bits=2, group_size=4, residual=6)
TOKENS, CHANNELS = 17, 8


def kivi_view(record: dict[str, Any]) -> Block:
    fmt = PICTURE
    quantized, residual = kivi_split(fmt, TOKENS)
    cell = 22
    canvas = Canvas(width=720, height=360, slug="kivi-layout", title="KIVI's key layout",
                    description=f"{TOKENS} tokens of keys across {CHANNELS} channels: the oldest {quantized} in "
                                f"groups of {fmt.group_size} tokens, one scale and zero per channel per group; the "
                                f"newest {residual} kept exact.")
    x, y = 90, 60

    def fill(row: int, col: int) -> str:
        if col >= quantized:
            return "new"
        return "old" if (col // fmt.group_size) % 2 == 0 else "shared"

    cell_grid(canvas, x, y, CHANNELS, TOKENS, cell, fill, row_labels=[f"ch {c}" for c in range(CHANNELS)],
              col_labels=[str(t) if t % fmt.group_size == 0 else "" for t in range(TOKENS)], label_size=11)
    for group in range(quantized // fmt.group_size):
        left = x + group * fmt.group_size * cell
        canvas.line(left, y + CHANNELS * cell + 8, left + fmt.group_size * cell - 4, y + CHANNELS * cell + 8)
        canvas.text(left + fmt.group_size * cell / 2, y + CHANNELS * cell + 24, f"group {group + 1}", size=11)
    canvas.text(x + quantized * cell + residual * cell / 2, y + CHANNELS * cell + 24,
                f"residual: {residual} exact", size=11)
    canvas.text(x, 30, "tokens →", anchor="start", size=12)
    legend(canvas, x, y + CHANNELS * cell + 44, [
        ("old", f"{fmt.bits}-bit codes: along each channel, a group's {fmt.group_size} tokens share one scale and one zero"),
        ("shared", "the same, in the next group (shaded apart to show where groups meet)"),
        ("new", f"full precision until {kivi_residual_range(fmt)[1] + 1} tokens wait, then the oldest "
                f"{fmt.group_size} leave together"),
    ])
    caption = ("Keys are quantized per channel along tokens, so an outlier channel gets its own range. "
               f"Tokens leave the exact residual only as a whole group: after {TOKENS} appends with groups of {fmt.group_size} and a residual of {fmt.residual}, {quantized} are quantized and {residual} stay exact. "
               "Values (not drawn) are grouped per token instead.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])


def q4_block_view(record: dict[str, Any]) -> Block:
    fmt = CacheFormat("q4_0")
    block_bytes = GGML_SCALE_BYTES + GGML_BLOCK // 2
    bits = bits_per_element(fmt, GGML_BLOCK)
    canvas = Canvas(width=720, height=200, slug="q4-block", title="One q4_0 block",
                    description=f"{GGML_BLOCK} values stored as {GGML_BLOCK} four-bit codes in {GGML_BLOCK // 2} "
                                f"bytes, after one {GGML_SCALE_BYTES}-byte fp16 scale: {block_bytes} bytes, "
                                f"{bits:g} bits per value.")
    cell, x, y = 17, 110, 50
    canvas.rect(x - 2 * cell - 6, y, 2 * cell, cell - 2, "new", rx=3)
    canvas.text(x - cell - 6, y - 8, "scale d", size=11)
    cell_grid(canvas, x, y, 1, GGML_BLOCK, cell, lambda r, c: "old" if c < GGML_BLOCK // 2 else "shared",
              col_labels=[str(c) if c in (0, 15, 16, 31) else "" for c in range(GGML_BLOCK)], label_size=11)
    canvas.text(x + GGML_BLOCK * cell / 4, y + cell + 20, "values 0–15: low nibbles", size=11)
    canvas.text(x + 3 * GGML_BLOCK * cell / 4, y + cell + 20, "values 16–31: high nibbles", size=11)
    legend(canvas, x - 2 * cell - 6, y + cell + 44, [
        ("new", f"fp16 scale: {GGML_SCALE_BYTES} bytes, {GGML_SCALE_BYTES * 8 / GGML_BLOCK:g} extra bits per value"),
        ("old", f"4-bit codes, value = (code − 8) × d; {GGML_BLOCK // 2} bytes hold all {GGML_BLOCK}"),
    ])
    caption = (f"A q4_0 block is {block_bytes} bytes for {GGML_BLOCK} values: {bits:g} bits each, not 4. The scale "
               f"is the block's largest-magnitude value over −8, so that value is stored exactly.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])
