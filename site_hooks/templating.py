"""Jinja2 environments for the views: HTML autoescaping on, undefined names are errors.

Every view renders from site_hooks/templates/: the shared views with templates of their own, a lab's
views through the one block template (site_hooks/blocks.py).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from .formatting import format_bytes, format_ms, format_number, format_ratio, format_sci

TEMPLATES = Path(__file__).with_name("templates")


@cache  # deliberate: one environment per process, templates compiled once
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader([TEMPLATES]),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters.update(ms=format_ms, number=format_number, ratio=format_ratio, sci=format_sci, bytes=format_bytes)
    return env


def render(template: str, **context: Any) -> str:
    """Render and drop blank lines, so the HTML stays one compact block."""
    html = environment().get_template(template).render(**context)
    return "\n".join(line for line in html.splitlines() if line.strip())
