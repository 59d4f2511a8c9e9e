"""Jinja2 environments for the views: HTML autoescaping on, undefined names are errors.

The shared views render from site_hooks/templates/; a lab's own views render through
``lab_renderer(__file__)``, which searches the templates/ folder beside the lab's module first.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from .formatting import format_bytes, format_ms, format_number, format_ratio, format_sci

TEMPLATES = Path(__file__).with_name("templates")


@cache  # deliberate: one environment per template folder and process, templates compiled once
def environment(folder: Path | None = None) -> Environment:
    env = Environment(
        loader=FileSystemLoader([folder, TEMPLATES] if folder else [TEMPLATES]),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters.update(ms=format_ms, number=format_number, ratio=format_ratio, sci=format_sci, bytes=format_bytes)
    return env


def render(template: str, folder: Path | None = None, **context: Any) -> str:
    """Render and drop blank lines, so the HTML stays one compact block."""
    html = environment(folder).get_template(template).render(**context)
    return "\n".join(line for line in html.splitlines() if line.strip())


def lab_renderer(module_file: str) -> Callable[..., str]:
    """``render(template, **context)`` for a lab's views module: its own templates/ first, then the shared."""
    folder = Path(module_file).resolve().with_name("templates")

    def render_lab(template: str, **context: Any) -> str:
        return render(template, folder, **context)

    return render_lab
