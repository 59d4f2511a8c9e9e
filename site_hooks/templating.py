"""One Jinja2 environment for every view: HTML autoescaping on, undefined names are errors."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATES = Path(__file__).with_name("templates")


@cache  # deliberate: one environment per process, templates compiled once
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters.update(ms=format_ms, number=format_number, ratio=format_ratio, sci=format_sci)
    return env


def render(template: str, **context: Any) -> str:
    """Render and drop blank lines, so the HTML stays one raw block for Markdown."""
    html = environment().get_template(template).render(**context)
    return "\n".join(line for line in html.splitlines() if line.strip())


def format_ms(nanoseconds: float) -> str:
    milliseconds = nanoseconds / 1e6
    return f"{milliseconds:.3f}" if milliseconds < 10 else f"{milliseconds:.2f}" if milliseconds < 100 else f"{milliseconds:.1f}"


def format_number(value: int | float) -> str:
    return f"{value:,}"


def format_ratio(value: float) -> str:
    return f"{value:.2f}×"


def format_sci(value: float) -> str:
    return "0" if value == 0 else f"{value:.2e}"
