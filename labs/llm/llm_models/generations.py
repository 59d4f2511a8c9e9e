"""Comparing two generations of the same prompt, token by token.

Here, below the labs, because more than one lab compares greedy answers this way: the quantized-cache lab (each
cache format's answer against float32's) and the decode lab (the int8 model's answer against the float32 one's).
Torch-free: a record's token ids are plain lists, compared when the site build derives its figures.
"""

from __future__ import annotations


def first_departure(ids: list[int], reference: list[int]) -> int | None:
    """The first position where two greedy generations choose different tokens; None if they never do."""
    for index, (a, b) in enumerate(zip(ids, reference)):
        if a != b:
            return index
    return None if len(ids) == len(reference) else min(len(ids), len(reference))
