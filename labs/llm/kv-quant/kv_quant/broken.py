"""A deliberately wrong KIVI cache, kept so a test can show the whole-group check catches it.

Never use it for anything but demonstrating that the check fails.
"""

from __future__ import annotations

from .cache import KiviCache


class PerTokenFlushKivi(KiviCache):
    """Bug (a KIVI port's): every token beyond the residual window leaves it on its own, so each key
    "group" along tokens is one token long. Its per-channel minimum is the value itself: billed as 2-bit,
    the keys are stored exactly, with a float32 scale and zero beside every element."""

    @property
    def key_group(self) -> int:
        return 1
