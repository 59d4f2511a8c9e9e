"""One invocation of the benchmark runner, one run: the identity every record it writes carries as ``run``.

    {"id": "20260103T201500Z-3fa9c1", "started_utc": "2026-01-03T20:15:00Z",
     "labs": ["kv-cache", "kv-storage"], "reference": true}

``make bench`` (labkit.run_benchmarks) makes the run once, before its first benchmark, and hands it to every
benchmark it starts in the environment variable LABKIT_RUN, as JSON; the record's writer (labkit.writing) reads it
back and stores it. A benchmark started directly, outside the runner, is a run of its own holding its lab alone.
A machine label or a CPU model says what kind of machine a record came from, not that two records were measured
together: two runs on one model may be days and a reboot apart. So two records' absolute times are set side by side
only when both carry the same run id (``same_run``).

Standard library only: labkit.launch checks the variable before a benchmark imports anything heavy, and the site
build reads ``same_run`` without torch.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

ENV = "LABKIT_RUN"
FIELDS = ("id", "started_utc", "labs", "reference")
# The patterns of results/record-common.schema.json's $defs/run; (?![\s\S]) is the true end of the text ('$' also
# matches before a final newline).
ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}(?![\s\S])")
STARTED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z(?![\s\S])")


class RunError(ValueError):
    """A LABKIT_RUN that names no run this module made: one line, naming the variable and what is wrong."""


def new_run(labs: Sequence[str], reference: bool, now: datetime | None = None) -> dict[str, Any]:
    """A run starting now: its id is the UTC start, compact, and six random hex digits, so two runs started in the
    same second (two checkouts, two terminals) still differ."""
    started = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    return {"id": f"{started:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}", "started_utc": f"{started:%Y-%m-%dT%H:%M:%SZ}",
            "labs": list(labs), "reference": reference}


def to_env(run: Mapping[str, Any]) -> str:
    """The run as the value of LABKIT_RUN."""
    return json.dumps(dict(run), separators=(",", ":"))


def parse_run(text: str) -> dict[str, Any]:
    """The run LABKIT_RUN holds; RunError says, in one line, what is wrong with it."""
    try:
        run = json.loads(text)
    except ValueError as error:
        raise RunError(f"{ENV} is not JSON ({error}); make bench sets it, or unset it to run one benchmark "
                       f"alone") from None
    if not isinstance(run, dict) or sorted(run) != sorted(FIELDS):
        keys = sorted(run) if isinstance(run, dict) else type(run).__name__
        raise RunError(f"{ENV} must be a JSON object of exactly {', '.join(FIELDS)}, got {keys}")
    if not isinstance(run["id"], str) or not ID.match(run["id"]):
        raise RunError(f"{ENV}: id {run['id']!r} is not a UTC start and six hex digits, e.g. 20260103T201500Z-3fa9c1")
    if not isinstance(run["started_utc"], str) or not STARTED.match(run["started_utc"]):
        raise RunError(f"{ENV}: started_utc {run['started_utc']!r} is not a UTC time such as 2026-01-03T20:15:00Z")
    labs = run["labs"]
    if not isinstance(labs, list) or not labs or not all(isinstance(lab, str) and 0 < len(lab) <= 64 for lab in labs):
        raise RunError(f"{ENV}: labs {labs!r} is not a non-empty list of lab names")
    if not isinstance(run["reference"], bool):
        raise RunError(f"{ENV}: reference {run['reference']!r} is not true or false")
    return run


def from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The run the runner handed this process, or None when it was started alone."""
    text = (os.environ if environ is None else environ).get(ENV)
    return None if text is None else parse_run(text)


def current_run(lab: str, reference: bool, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The run a record of ``lab`` belongs to: the runner's, which must name the lab, or a run of its own."""
    run = from_env(environ)
    if run is None:
        return new_run([lab], reference)
    if lab not in run["labs"]:
        raise RunError(f"{ENV}: run {run['id']} measures {', '.join(run['labs'])}, not this benchmark's lab {lab}")
    return run


def run_id(record: Mapping[str, Any]) -> str | None:
    """The id of the run ``record`` was measured in; None for a record made before records named their run."""
    run = record.get("run")
    return run.get("id") if isinstance(run, dict) and isinstance(run.get("id"), str) else None


def same_run(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two records were measured in one run (a record without a run was measured in none)."""
    first = run_id(a)
    return first is not None and first == run_id(b)


def minutes(seconds: float) -> str:
    """A run's or a benchmark's wall time as a reader reads it: '1 min 30 s', '45 s' (make bench's lines and the
    landing page's table say it alike)."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"
