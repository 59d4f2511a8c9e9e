"""Helpers for labs' tests of their own benchmarks."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable


def run_quietly(main: Callable[..., int], argv: list[str], **kwargs: object) -> tuple[int, str]:
    """Call a benchmark's main(argv), capturing its progress lines: (exit code, stderr text)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = main(argv, **kwargs)
    return code, stderr.getvalue()
