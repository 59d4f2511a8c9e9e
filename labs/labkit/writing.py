"""A benchmark's record, written: its header, what was measured, validated and written atomically, then its summary.

Nothing here touches a measured number (labkit.closure counts this module as the record's side, not as measured
code): the record stores what the benchmark measured and nothing that follows from it; the build derives every
figure when it reads the record.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import bench
from .figures import Derive
from .manifest import Lab
from .records import load_json
from .summary import raw_only, with_figures


def run(lab: Lab, root: Path, args: argparse.Namespace, argv: Sequence[str] | None,
        body: Callable[[], dict[str, Any]], summary: Callable[[dict[str, Any]], list[str]],
        derive: Derive | None = None) -> int:
    """Header + ``body()``'s sections, validated and written atomically: what was measured, nothing that follows
    from it (the build derives every figure when it reads the record); then the summary lines, read from the
    record with its figures derived (summary.with_figures)."""
    script = root / lab.benchmark[0]  # the launcher a reader runs, as its lab.toml names it

    def build() -> dict[str, Any]:
        sections = body()  # first: the header records the environment the measurement left (its torch threads)
        record = {**bench.record_header(lab, root, str(script), argv, args.output, args.machine), **sections}
        with_figures(record, derive)  # a record the derivations cannot read is refused before it is written
        return raw_only(record, derive)  # what was measured: a figure the code also computed is checked, then left out

    code = bench.write_record(args.output, build, root / lab.schema)
    if code == 0:
        for line in summary(with_figures(load_json(args.output, "measurement record"), derive)):
            bench.progress(line)
    return code
