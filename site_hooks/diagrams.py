"""Concept diagrams drawn by code at build time: inline SVG readable in light and dark, sized to the column.

A diagram is not a measurement: it pictures a mechanism (a cache growing, a mask, a block table), drawn
from the same functions the lab's code and tests use, so the picture cannot drift from the code. Text
and strokes use ``currentColor`` (the page's foreground colour in either scheme); fills come from the
chart palette (site_hooks.chart.COLOURS) or from ``currentColor`` at low opacity. Every SVG has
``width="100%"``, a viewBox and a ``<title>``/``<desc>`` pair with ids unique on the page; every string
is escaped. A lab view returns ``Block(diagrams=[Diagram(canvas.svg(), caption)])``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from .chart import COLOURS

# Named fills every diagram shares, so a page's pictures agree on what a colour means.
FILLS = {
    "empty": ("currentColor", 0.07),  # a slot that holds nothing / a hidden key
    "old": (COLOURS[1], 0.55),  # state that already existed: cached keys and values, a visible old key
    "new": (COLOURS[0], 0.9),  # what this step adds or computes
    "wrong": (COLOURS[3], 0.75),  # what a bug shows (or hides) that the correct version does not
    "shared": (COLOURS[2], 0.6),  # state shared between owners
}


def attribute(name: str, value: object) -> str:
    return f'{name.replace("_", "-")}="{escape(str(value), quote=True)}"'


@dataclass
class Canvas:
    """An SVG under construction: shapes in viewBox units, rendered at the column's width."""

    width: int
    height: int
    title: str
    description: str
    slug: str  # unique on the page: the ids of <title> and <desc> derive from it
    max_width: str = "46rem"  # how wide it may grow on a wide screen
    parts: list[str] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, fill: str = "empty", **extra: object) -> None:
        colour, opacity = FILLS[fill]
        attrs = " ".join(attribute(k, v) for k, v in extra.items())
        self.parts.append(f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" fill="{colour}" '
                          f'fill-opacity="{opacity}" stroke="currentColor" stroke-opacity="0.35" {attrs}/>')

    def text(self, x: float, y: float, text: str, size: int = 13, anchor: str = "middle",
             weight: str = "normal") -> None:
        self.parts.append(f'<text x="{x:g}" y="{y:g}" font-size="{size}" text-anchor="{anchor}" '
                          f'font-weight="{weight}" fill="currentColor">{escape(text)}</text>')

    def line(self, x1: float, y1: float, x2: float, y2: float, dash: str = "", width: float = 1.5) -> None:
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="currentColor" '
                          f'stroke-width="{width:g}"{dashed}/>')

    def svg(self) -> str:
        ids = f"lab-diagram-{escape(self.slug, quote=True)}"
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" width="100%" '
                f'style="max-width: {escape(self.max_width, quote=True)}" role="img" class="lab-diagram-svg" '
                f'aria-labelledby="{ids}-title {ids}-desc" font-family="inherit">'
                f'<title id="{ids}-title">{escape(self.title)}</title><desc id="{ids}-desc">{escape(self.description)}</desc>'
                + "".join(self.parts) + "</svg>")


def cell_grid(canvas: Canvas, x: float, y: float, rows: int, cols: int, cell: float,
              fill: Callable[[int, int], str], row_labels: Sequence[str] = (), col_labels: Sequence[str] = (),
              label_size: int = 12) -> None:
    """A rows x cols grid of square cells at (x, y); ``fill(row, col)`` names each cell's fill (FILLS).
    Row labels sit left of the grid, column labels above it."""
    for row in range(rows):
        for col in range(cols):
            canvas.rect(x + col * cell, y + row * cell, cell - 2, cell - 2, fill(row, col), rx=3)
    for row, label in enumerate(row_labels):
        canvas.text(x - 8, y + row * cell + cell / 2 + 4, label, size=label_size, anchor="end")
    for col, label in enumerate(col_labels):
        canvas.text(x + col * cell + cell / 2 - 1, y - 8, label, size=label_size)


def legend(canvas: Canvas, x: float, y: float, entries: Sequence[tuple[str, str]], gap: float = 24) -> None:
    """Swatches with their meaning, one per line from (x, y): ``entries`` are (fill, text)."""
    for index, (fill, text) in enumerate(entries):
        canvas.rect(x, y + index * gap, 14, 14, fill, rx=2)
        canvas.text(x + 22, y + index * gap + 12, text, anchor="start")


@dataclass(frozen=True)
class Diagram:
    svg: str  # from Canvas.svg(), which escaped every string it drew
    caption: str
