"""Facts about the machine running the build, comparable with a record's environment block."""

from __future__ import annotations

import os
import platform
from typing import Any

from labkit.environment import cpu_model

LABELS = {"python": "Python", "torch": "PyTorch", "cpu": "CPU", "logical_cores": "logical CPUs", "os": "OS"}


def build_machine(test_report: dict[str, Any]) -> dict[str, Any]:
    """This machine, with Python and PyTorch as seen by the lab's own test run."""
    return {
        "python": test_report["python"],
        "torch": test_report["torch"] or "not installed",
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "os": f"{platform.system()} {platform.release()}",
    }


def recording_machine(record: dict[str, Any]) -> dict[str, Any]:
    """The same facts, read from a record."""
    env = record["environment"]
    return {
        "python": env["python"]["version"],
        "torch": env["torch"]["version"],
        "cpu": env["cpu"]["model"],
        "logical_cores": env["cpu"]["logical_cores"],
        "os": f"{env['os']['system']} {env['os']['release']}",
    }
