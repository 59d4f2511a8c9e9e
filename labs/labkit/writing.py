"""A benchmark's record, written: its header, what was measured, validated and written atomically, then its summary.

Nothing here touches a measured number (labkit.closure counts this module as the record's side, not as measured
code): the record stores what the benchmark measured and nothing that follows from it; the build derives every
figure when it reads the record. It also stores samples of the machine through the measurement (labkit.watch), and
a reference record (the lab's record that pages quote) from a run under load, or one ``refuse_reference`` refuses,
is not written: the previous one stays, and one line says why.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import bench, runs, watch
from .figures import Derive
from .manifest import Lab
from .records import load_json
from .summary import raw_only, with_figures

# What the machine was doing through the measurement, given whether the run is --quick (tests set what it looks like).
machine_watch: Callable[[bool], watch.Watch] = watch.for_run


class Refused(BaseException):
    """A reference record this run must not replace, and why.

    NOTE: a BaseException, as KeyboardInterrupt is, so that bench.write_record's catch-all for failures lets it
    through to ``run``, which says it in its own words: write_record is measured code (every record's fingerprint
    covers labkit/bench.py), and a change to it would make every record stale."""


def run(lab: Lab, root: Path, args: argparse.Namespace, argv: Sequence[str] | None,
        body: Callable[[], dict[str, Any]], summary: Callable[[dict[str, Any]], list[str]],
        derive: Derive | None = None,
        refuse_reference: Callable[[dict[str, Any]], str | None] | None = None) -> int:
    """Header + the run it belongs to (labkit.runs) + the machine's state + ``body()``'s sections, validated and
    written atomically: what was measured, nothing that follows from it (the build derives every figure when it
    reads the record); then the summary lines, read from the record with its figures derived (summary.with_figures).

    Written to the lab's reference record (not --quick), a run under load (labkit.watch.load_of) is refused, and
    so is one for which ``refuse_reference``, given the record with its figures, returns a reason: status 1, the
    previous record kept. A machine's record (results/machines/) is always written: it says what its machine did."""
    script = root / lab.benchmark[0]  # the launcher a reader runs, as its lab.toml names it
    # NOTE: a --quick record is a smoke test, never the figures of a page, wherever it is written (the test of a new
    # lab writes one to its reference path, on a machine as busy as the suite makes it)
    reference = args.output.resolve() == (root / lab.record).resolve() and not args.quick
    try:  # before body(): a run the record could not name is nothing to measure for
        run_identity = runs.current_run(lab.name, reference)
    except runs.RunError as error:
        kept = " and still holds the previous record" if args.output.exists() else ""
        bench.outcome(f"{error}; nothing was measured, {args.output} was not written{kept}")
        return 1

    def build() -> dict[str, Any]:
        with machine_watch(bool(args.quick)) as watching:
            sections = body()  # first: the header records the environment the measurement left (its torch threads)
        # NOTE: the run joins the header here, not in bench.record_header: bench.py is measured code, and a record
        # stales when it changes
        record = {**bench.record_header(lab, root, str(script), argv, args.output, args.machine),
                  "run": run_identity, "machine_state": watching.state(), **sections}
        figured = with_figures(record, derive)  # a record the derivations cannot read is refused before it is written
        if reference:
            refuse(figured, refuse_reference)
        return raw_only(record, derive)  # what was measured: a figure the code also computed is checked, then left out

    try:
        code = bench.write_record(args.output, build, root / lab.schema)
    except Refused as refused:
        # NOTE: the words bench.write_record uses for a record it did not write
        kept = " and still holds the previous record" if args.output.exists() else ""
        bench.outcome(f"{args.output} was not written{kept}: {refused}")
        return 1
    if code == 0:
        for line in summary(with_figures(load_json(args.output, "measurement record"), derive)):
            bench.outcome(line)
    return code


def refuse(record: dict[str, Any], refuse_reference: Callable[[dict[str, Any]], str | None] | None) -> None:
    """Raise Refused if ``record`` (with its figures) must not become the reference: measured under load, or a
    reason of the lab's own."""
    load = watch.load_of(record.get("machine_state"))
    if load is not None and load.refusal is not None:
        raise Refused(f"this run was measured under load: {load.refusal}")
    reason = refuse_reference(record) if refuse_reference is not None else None
    if reason:
        raise Refused(reason)
