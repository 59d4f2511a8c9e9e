"""Who may see whom, and where a position lives: the rules every cache here applies to its slots' metadata.

Torch-free and written with operators that work on Python ints and on torch tensors alike (``<=``, ``-``,
``%``, ``&``, ``|``), so the caches build their masks with the very functions the page's pictures are drawn
from. A mask is never derived from a tensor's length: each key carries its absolute position and sequence id,
each query its own, and these rules decide from those numbers alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Index = Any  # an int, or an integer torch tensor broadcast against the others


# --8<-- [start:visible]
def visible(query_position: Index, key_position: Index, query_sequence: Index = 0, key_sequence: Index = 0,
            window: int | None = None, sinks: int = 0) -> Any:
    """True where a query may see a key: the key is not in its future and belongs to the same sequence; with a
    ``window``, it is also one of the newest ``window`` positions (the query's own included) or one of the
    first ``sinks`` positions of its sequence, which never leave."""
    seen = (key_position <= query_position) & (key_sequence == query_sequence)
    if window is None:
        return seen
    return seen & ((query_position - key_position < window) | (key_position < sinks))
# --8<-- [end:visible]


def ring_slot(position: Index, window: int) -> Index:
    """The slot of a ring buffer of ``window`` slots that holds ``position``: the newest position overwrites
    the one ``window`` places before it, which has just left the window."""
    return position % window


def sink_slot(position: Index, sinks: int, slots: int) -> Index:
    """The slot of a sinks + window cache of ``slots`` slots that holds ``position``: the first ``sinks``
    positions keep slots 0 .. sinks - 1, the rest share the others as a ring."""
    recent = slots - sinks
    return (position < sinks) * position + (position >= sinks) * (sinks + (position - sinks) % recent)


def most_shifts(sinks: int, slots: int) -> int:
    """How many times a cache that keeps keys rotated and re-rotates them on every shift turns one key before
    it leaves: it enters at the last slot and moves down one slot a step until it would reach the sinks."""
    return slots - sinks - 1


def packed_positions(lengths: Sequence[int]) -> list[int]:
    """Positions of sequences packed into one row: each sequence restarts at 0."""
    return [position for length in lengths for position in range(length)]


def packed_sequences(lengths: Sequence[int]) -> list[int]:
    """The sequence id of every packed position: 0 for the first sequence's tokens, 1 for the next, ..."""
    return [sequence for sequence, length in enumerate(lengths) for _ in range(length)]
