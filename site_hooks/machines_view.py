"""The comparison of machines: every record of a lab side by side, by ratios measured within one run.

Absolute times do not carry across machines; a ratio taken within one run (cached vs full, ours vs
transformers, step vs floor) mostly does, so the lab's ``headline`` ratios are what is compared.
"""

from __future__ import annotations

import shlex
from typing import Any

from .evidence import Evidence, MachineRecord
from .formatting import format_ratio, join
from .labviews import lab_headline
from .templating import render


def is_build_machine(record: dict[str, Any], build: dict[str, Any]) -> bool:
    cpu = record["environment"]["cpu"]
    return (cpu["model"], cpu["logical_cores"]) == (build["cpu"], build["logical_cores"])


def quick_run(record: dict[str, Any]) -> bool:
    """Measured with --quick: the sweep labs say so in their config, every record in its command."""
    if record.get("config", {}).get("benchmark", {}).get("quick") is True:
        return True
    try:
        return "--quick" in shlex.split(record["command"])
    except ValueError:  # unbalanced quotes: not a command line a benchmark wrote
        return False


def row(machine: MachineRecord, evidence: Evidence, ratios: list[tuple[str, float]],
        labels: list[str]) -> dict[str, Any]:
    env = machine.record["environment"]
    return {
        "label": machine.record["machine"], "path": machine.path, "reference": machine.reference,
        "quick": quick_run(machine.record),
        "here": is_build_machine(machine.record, evidence.build_machine),
        "device": env.get("device") or env["cpu"]["model"], "threads": env["torch"]["threads"],
        "torch": env["torch"]["version"], "created": machine.record["created_utc"].replace("T", " ").replace("Z", ""),
        "fresh": "current" if not machine.changed else f"older ({', '.join(machine.changed)} changed)",
        "ratios": [dict(ratios).get(label) for label in labels],  # None: this record did not measure it
    }


def agreement_sentences(labels: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """Per headline ratio: does it fall on the same side of 1 on every machine?"""
    sentences = []
    for index, label in enumerate(labels):
        # A list, not a dict by label: one row must never overwrite another (the build also refuses two
        # records under one label).
        values = [(name_of(r), r["ratios"][index]) for r in rows if r["ratios"][index] is not None]
        above = [name for name, value in values if value > 1]
        numbers = [value for _, value in values]
        span = f"{format_ratio(min(numbers))} to {format_ratio(max(numbers))}"
        if len(values) == 1:
            name, value = values[0]
            sentences.append(f"{label}: {format_ratio(value)}, measured on {name} only.")
        elif len(above) == len(values) or not above:
            side = "above" if above else "at or below"
            sentences.append(f"{label}: {side} 1 on every machine ({span}), so that conclusion holds on all "
                             f"{len(values)} machines.")
        else:
            below = [name for name, value in values if value <= 1]
            sentences.append(f"{label}: the machines differ ({span}): above 1 on {join(above)}, "
                             f"at or below 1 on {join(below)}.")
    if any(r["quick"] for r in rows):
        sentences.append("A quick run (the benchmark's --quick, make bench QUICK=1) measures a few short lengths "
                         "with few repetitions: it shows the benchmark works on that machine, and its ratios are "
                         "rough, not a measurement to set beside the others.")
    return sentences


def name_of(machine_row: dict[str, Any]) -> str:
    return machine_row["label"] + (" (quick run)" if machine_row["quick"] else "")


def machines_view(evidence: Evidence) -> str:
    headline = lab_headline(evidence.lab)
    machines = evidence.machines or (MachineRecord(evidence.lab.record.as_posix(), evidence.record, True, []),)
    per_machine = [headline(m.record) if headline else [] for m in machines]
    # Columns by label, so a record that measured other lengths gets columns of its own, not the reference's.
    labels = list(dict.fromkeys(label for ratios in per_machine for label, _ in ratios))
    rows = [row(machine, evidence, ratios, labels) for machine, ratios in zip(machines, per_machine)]
    if len(rows) == 1:  # nothing to compare yet: the table holds the ratios
        sentences = ["Only the reference record exists so far: make bench on another machine adds that "
                     "machine's record beside it, and these sentences then say which ratios agree."]
    else:
        sentences = agreement_sentences(labels, rows) if labels else []
    return render("machines.html.j2", rows=rows, labels=labels, sentences=sentences)
