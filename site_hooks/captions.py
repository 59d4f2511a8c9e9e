"""The one line under every measurement chart: which record it was drawn from, and on which machine; and the one
line under a lab page's title naming its record, machine and run.

Shared charts add it themselves; a lab's own charts (``Chart`` in a ``Block``) get it from render_view,
so a lab view never needs to know its record's path.
"""

from __future__ import annotations

from labkit.runs import run_id

from .evidence import Evidence
from .formatting import plural


def source_line(evidence: Evidence) -> str:
    """'Record results/x.json, measured on amd-epyc-1t (AMD EPYC 7B13, 1 Torch thread) on 2026-11-30.'"""
    record = evidence.record
    env = record["environment"]
    device = env.get("device") or env["cpu"]["model"]
    day = record["created_utc"].partition("T")[0]
    return (f"Record {evidence.lab.record.as_posix()}, measured on {record['machine']} ({device}, "
            f"{plural(env['torch']['threads'], 'Torch thread')}) on {day}.")


def measured_line(evidence: Evidence) -> str:
    """The one line under a lab page's title naming the record, its machine and the run that made it:
    'Measured on AMD EPYC, 2 logical cores, run 20261206T055326Z-55c840 started 2026-12-06 05:53:26 UTC:
    results/x.json.' A record made before records named their run says 'no run named' (labkit.runs)."""
    record = evidence.record
    cpu = record["environment"]["cpu"]
    cores = cpu.get("logical_cores")
    machine = f"{cpu['model'].strip()}, {plural(cores, 'logical core')}" if cores else cpu["model"].strip()
    run = run_id(record)
    if run is not None:
        started = str(record["run"].get("started_utc") or "").replace("T", " ").replace("Z", " UTC")
        when = f"run {run}" + (f" started {started}" if started else "")
    else:  # made before records named their run
        when = f"no run named, on {record['created_utc'].partition('T')[0]}"
    return f"Measured on {machine}, {when}: {evidence.lab.record.as_posix()}."
