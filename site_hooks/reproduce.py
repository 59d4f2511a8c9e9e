"""The commands that reproduce a lab, from its lab.toml: the one place a page's appendix takes them from.

Placed inside a page's collapsed "Reproduce" appendix (see README, "Placeholders"), beside the shared
``config``, ``environment``, ``provenance``, ``machines``, ``tests``, ``equivalence``, ``medians`` and ``raw``.
"""

from __future__ import annotations

import shlex

from .evidence import Evidence
from .templating import render

PYTHON = "labs/.venv/bin/python"


def commands_view(evidence: Evidence) -> str:
    lab = evidence.lab
    start, pattern = lab.tests
    rows = [
        ("Run the lab's tests", f"{PYTHON} -m unittest discover -s {shlex.quote(start)} -p {shlex.quote(pattern)} -v"),
        ("Measure this machine (writes results/machines/" + lab.name + "/<label>.json)", f"make bench LAB={lab.name}"),
        ("A quick smoke run of the benchmark", f"make bench LAB={lab.name} QUICK=1"),
        ("Replace the reference record this page is built from",
         " ".join([PYTHON, *map(shlex.quote, lab.benchmark_arguments())])),
        ("Every option of the benchmark", f"{PYTHON} {shlex.quote(lab.benchmark[0])} --help"),
    ]
    return render("commands.html.j2", rows=rows, record=lab.record.as_posix(), command=evidence.record["command"])
