"""The one line under every measurement chart: which record it was drawn from, and on which machine.

Shared charts add it themselves; a lab's own charts (``Chart`` in a ``Block``) get it from render_view,
so a lab view never needs to know its record's path.
"""

from __future__ import annotations

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
