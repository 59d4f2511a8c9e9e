"""What a page may show about one lab, gathered once per build by orchestrate.py and read by the views.

Kept apart from the orchestration (subprocesses, freshness, measuring) so that a view depends on data only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.manifest import Lab


@dataclass(frozen=True)
class MachineRecord:
    """One machine's record of a lab, the reference or another, checked like the reference."""

    path: str  # relative to the repository root
    record: dict[str, Any]
    reference: bool
    changed: list[str]  # measured sources changed since it was made (empty: current)


@dataclass(frozen=True)
class Evidence:
    """Everything a page may show about one lab, gathered once per build."""

    lab: Lab
    record: dict[str, Any]
    tests: dict[str, Any]  # the report of the test run on this build machine
    measured_now: bool  # the benchmark ran during this build
    build_machine: dict[str, Any]  # the machine building the page, in the terms of machine.py
    record_url: str = ""  # the record's copy in the built site, relative to the page being rendered
    machines: tuple[MachineRecord, ...] = ()  # the reference first, then every other machine's record
