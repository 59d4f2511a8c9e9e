"""A deliberately wrong decoder, kept so tests can show the parity checks catch it.

Never use it for anything but demonstrating that the equivalence checks fail.
"""

from __future__ import annotations

from kv_cache.broken import PositionResetBlock

from .model import LlamaDecoder


class RotaryResetDecoder(LlamaDecoder):
    """Bug: every call rotates its tokens from position zero, as if the cached prefix were not there.

    The cached keys were rotated at their true positions, so the new queries meet them at the wrong
    relative distances. With no cache (one full pass) it is exactly right, which is why only a
    cached or chunked check can catch it.
    """

    positions = PositionResetBlock.positions  # the first lab's broken rule, reused
