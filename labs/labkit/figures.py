"""Figures that follow from a record's raw data: derived each time the record is read, never written into it.

A lab's torch-free figures module turns a record's raw data (durations, counts, its config) into
``Figures``: JSON path -> value, with the words saying what the value follows from. A record keeps only what
was measured (labkit.writing), so the site build derives every figure when it reads the record and ``fill``s
the copy the views read (``check_record``; labkit.summary.with_figures does the same for summaries and tests).
``check`` compares any figure that is held (one a benchmark's code computed itself, one an old record or a hand
edit put in a record) with its derivation and refuses the first that differs, naming its JSON path and both
values. The lab's real invariants (a peak within its pool, equivalence within tolerance, ...) are refused through
``refuse``, in the same path notation: ``$.lengths[3].modes.cached.median_ns``.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

from .records import JsonPath, RecordError, path_text

REL_TOL = 1e-9  # a held figure and its derivation: the same arithmetic on the same data, only float rounding differs
ABS_TOL = 1e-12


@dataclass(frozen=True)
class Figure:
    path: JsonPath
    value: Any
    how: str  # what the value follows from, as the refusal says it: "its raw durations"


class Figures:
    """The derivable figures of one record, in the order they are checked."""

    def __init__(self) -> None:
        self._items: list[Figure] = []

    def add(self, path: JsonPath, value: Any, how: str) -> None:
        self._items.append(Figure(tuple(path), value, how))

    def add_each(self, path: JsonPath, value: Any, how: str) -> None:
        """An object as one figure per leaf (a list or an empty object is a leaf), so that a refusal names the
        field that differs rather than the whole object."""
        if isinstance(value, dict) and value:
            for key, item in value.items():
                self.add_each((*path, key), item, how)
        else:
            self.add(path, value, how)

    def __iter__(self) -> Iterator[Figure]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def tolerance_bound(atol: float, rtol: float, reference: float) -> float:
    """The largest difference allowed from a reference of magnitude ``reference``: atol + rtol x |reference|,
    as torch.allclose and numpy.isclose bound it. Every equivalence check of every lab uses this one."""
    return atol + rtol * abs(reference)


def refuse(source: str, path: JsonPath, message: str) -> NoReturn:
    """The one refusal of a record: its file, the field's JSON path, what is wrong with it."""
    raise RecordError(f"{source}: field {path_text(path)} {message}")


def fill(record: dict[str, Any], figures: Figures) -> None:
    """Put every derived figure into ``record`` (in memory: the copy the views read, never a file), creating the
    objects on its path as needed."""
    for figure in figures:
        parent: Any = record
        for key, following in zip(figure.path, figure.path[1:]):
            if isinstance(parent, dict) and key not in parent:
                parent[key] = [] if isinstance(following, int) else {}
            parent = parent[key]
        parent[figure.path[-1]] = figure.value


def same(stored: Any, derived: Any) -> bool:
    """Equal, with float rounding allowed between numbers; a flag is never a number."""
    if isinstance(stored, bool) or isinstance(derived, bool):
        return type(stored) is type(derived) and stored == derived
    if isinstance(stored, int | float) and isinstance(derived, int | float):
        return math.isclose(stored, derived, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(stored, list) and isinstance(derived, list | tuple):
        return len(stored) == len(derived) and all(same(a, b) for a, b in zip(stored, derived))
    if isinstance(stored, dict) and isinstance(derived, dict):
        return stored.keys() == derived.keys() and all(same(stored[k], derived[k]) for k in stored)
    return bool(stored == derived)


def shown(value: Any) -> str:
    """A value as a refusal quotes it: floats to 12 digits, long structures cut short."""
    if isinstance(value, float):
        return f"{value:.12g}"
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text if len(text) <= 120 else text[:117] + "..."


def stored_value(record: Any, path: JsonPath) -> tuple[bool, Any]:
    """(True, the value) where the record stores ``path``, else (False, None): a figure derived when read."""
    value = record
    for key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, value


def check(record: dict[str, Any], figures: Figures, source: str) -> None:
    """Refuse the first figure the record holds that differs from its derivation, naming its path and both values.
    A figure the record does not hold is no refusal: it is derived when the record is read (check_record fills
    it), which is every figure of a record as labkit.writing writes it; so a figure added to a figures module needs
    no benchmark run."""
    for figure in figures:
        stored, value = stored_value(record, figure.path)
        if stored and not same(value, figure.value):
            refuse(source, figure.path, f"is {shown(value)}, but {figure.how} gives {shown(figure.value)}")


Derive = Callable[[dict[str, Any]], Figures]
Invariants = Callable[[dict[str, Any], str], None]


def check_record(record: dict[str, Any], source: str, invariants: Invariants | None, derive: Derive | None) -> None:
    """A lab's record check: its invariants first, on the record as the views will read it (every figure derived
    from its raw data: an invariant may relate a figure to the data), then any figure the record itself holds (an
    old record, a hand edit) against its derivation; then ``record``, in memory, holds every figure its figures
    module derives today (fill), for the views."""
    try:
        figures = derive(record) if derive is not None else Figures()
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
        if invariants is not None:  # raw data no figure can follow from: the invariants say what is wrong with it
            invariants(record, source)
        raise
    if invariants is not None:
        view = copy.deepcopy(record)
        fill(view, figures)
        invariants(view, source)
    check(record, figures, source)
    fill(record, figures)
