"""What a lab's view returns: a block of paragraphs, tables, charts and notes, rendered by one shared template.

A view is ``record -> Block``: it reads the record's stored, already-checked figures and words them; it
knows nothing of subprocesses, freshness or MkDocs, and writes no HTML. Every string in a block is escaped
when rendered; a chart's SVG comes from site_hooks.chart, which escapes what it draws from the record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .diagrams import Diagram
from .templating import render


@dataclass(frozen=True)
class Strong:
    """A table cell shown in bold: the one of its row that the table's note singles out."""
    strong: str


@dataclass(frozen=True)
class Table:
    headings: Sequence[str]
    rows: Sequence[Sequence[Any]]  # one cell per heading; numbers are shown as given (format them first)
    caption: str = ""
    lead: str = ""  # a sentence introducing the table, printed above it
    header_rows: Sequence[Sequence[tuple[str, int]]] = ()  # grouped headings above ``headings``: (text, span)


@dataclass(frozen=True)
class Chart:
    svg: str  # SVG markup drawn by site_hooks.chart, whose templates escaped every text taken from a record
    caption: str


@dataclass(frozen=True)
class Widget:
    """An interactive part of a block, in a shared template of site_hooks/templates/ (autoescaped)."""

    template: str
    context: Mapping[str, Any]


@dataclass(frozen=True)
class Block:
    css: str = ""  # a class of its own, only where the stylesheet styles it or a test must find it
    paragraphs: Sequence[str] = ()
    tables: Sequence[Table] = ()
    charts: Sequence[Chart] = ()
    notes: Sequence[str] = ()  # after the tables: caveats, what a reader should not conclude
    items: Sequence[str] = field(default=())  # a bullet list after the paragraphs (key results)
    widgets: Sequence[Widget] = ()  # interactive parts (a form and its script's data), after the tables
    diagrams: Sequence[Diagram] = ()  # concept pictures (site_hooks.diagrams), side by side where they fit
    sources: Sequence[tuple[str, str]] = ()  # (text, https URL) of published figures the block quotes, linked last

    def __post_init__(self) -> None:
        for text, url in self.sources:
            if not url.startswith("https://"):
                raise ValueError(f"a block's source {text!r} must link to an https:// page, got {url!r}")


View = Callable[[dict[str, Any]], Block]


def answer(*paragraphs: str) -> Block:
    """The block of a check-yourself answer: the paragraphs that quote the page's numbers."""
    return Block(paragraphs=paragraphs)


def takeaway(sentence: str) -> Block:
    """A section's closing takeaway whose wording depends on the record, shown in bold as the typed ones are."""
    return Block(css="lab-takeaway", paragraphs=[f"Takeaway: {sentence}"])


def render_block(block: Block, source: str = "") -> str:
    """``source``: the line naming the record and machine, put under each of the block's charts."""
    widgets = [render(widget.template, **widget.context) for widget in block.widgets]
    return render("block.html.j2", block=block, source=source, widgets=widgets)
