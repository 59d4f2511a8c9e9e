"""Another lab's reference record, with its figures, for a page that sets its own numbers beside that lab's (the
serving page's served step beside the decode lab's fastest). Read once per build; the other record is checked
for freshness with its own lab, so a page reading it never shows a stale number."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from labkit.manifest import discover_labs
from labkit.records import RecordError, load_record
from labkit.summary import with_figures

from .errors import SiteBuildError
from .labviews import lab_module

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def reference_record(name: str, root: Path = ROOT) -> dict[str, Any]:
    """Lab ``name``'s reference record with its derived figures (a deliberate cache: one read per build); a
    missing lab or an unreadable record stops the build, naming it."""
    labs = {lab.name: lab for lab in discover_labs(root)}
    if name not in labs:
        raise SiteBuildError(f"a page reads lab {name!r}'s record, but no such lab is registered: {sorted(labs)}")
    lab = labs[name]
    figures = lab_module(lab, lab.figures)
    try:
        return with_figures(load_record(root / lab.record, root / lab.schema), getattr(figures, "derive", None))
    except RecordError as error:
        raise SiteBuildError(f"a page reads {lab.record}: {error}") from None
