"""Views of the whole site, for a page that is no lab's (the landing page): ``{{ site:<view> }}`` alone on its line.

A site view is a function of every lab's evidence, in the order the labs were discovered, returning a block;
like a lab's view it reads records and test reports and words them, and computes no figure: durations come
from the records that store them (``wall_time_s``) and from each test report's ``seconds``; which records were
measured together, from the run each names (labkit.runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from labkit.runs import minutes, run_id

from .blocks import Block, Table, render_block
from .evidence import Evidence
from .formatting import join, plural

SiteView = Callable[[Mapping[str, Evidence]], Block]


def cpu_of(record: dict[str, Any]) -> tuple[str, int | None]:
    """(CPU model, logical cores) as the record's environment states them: the machine, not its settings."""
    cpu = record["environment"]["cpu"]
    return cpu["model"], cpu["logical_cores"]


def machine_words(cpus: list[tuple[str, int | None]], threads: list[int]) -> str:
    """'AMD EPYC with 2 logical cores, PyTorch at 1 and 2 threads': the machine of some records, and the thread
    counts they ran at (a setting of each benchmark, not another machine)."""
    described = [f"{cpu} with {plural(cores, 'logical core') if cores else 'an unknown number of logical cores'}"
                 for cpu, cores in cpus]
    counts = join([f"{count:,}" for count in threads]) + (" thread" if threads == [1] else " threads")
    return f"{join(described)}, PyTorch at {counts}"


def by_run(evidence: Mapping[str, Evidence]) -> dict[tuple[str, ...], list[Evidence]]:
    """The records grouped by the run they were measured in (labkit.runs), in the labs' order. Records that name
    no run (made before records stored theirs) cannot be told apart by run: they are listed by CPU model, never
    counted as one run."""
    groups: dict[tuple[str, ...], list[Evidence]] = {}
    for e in evidence.values():
        run = run_id(e.record)
        cpu, cores = cpu_of(e.record)
        groups.setdefault(("run", run) if run else ("none", cpu, str(cores)), []).append(e)
    return groups


def group_machine(records: list[Evidence]) -> str:
    """The machine of records measured together, with the thread counts they ran at."""
    return machine_words(list(dict.fromkeys(cpu_of(e.record) for e in records)),
                         sorted({e.record["environment"]["torch"]["threads"] for e in records}))


def started(records: list[Evidence]) -> str:
    """The day a run started, as its first record states it (every record of a run states the same run)."""
    return records[0].record["run"]["started_utc"].partition("T")[0]


def group_words(key: tuple[str, ...], records: list[Evidence]) -> str:
    """'Run 20260103T201500Z-3fa9c1, started 2026-01-03, on AMD EPYC with 2 logical cores, PyTorch at 1 thread:
    kv-cache and kv-storage.' (lab names: a title's own commas and colons would blur the list)"""
    labs = join([e.lab.name for e in records])
    if key[0] == "run":
        return f"Run {key[1]}, started {started(records)}, on {group_machine(records)}: {labs}."
    return f"No run named (made before records stored their run), on {group_machine(records)}: {labs}."


def machines_view(evidence: Mapping[str, Evidence]) -> Block:
    """Where every lab's reference record was measured, and how long its benchmark ran where the record says.

    One machine is named once only when one run (labkit.runs) made every record; otherwise the records are listed
    by run. NOTE: machines are never counted by anything but runs and CPU models: a thread count is a setting of a
    benchmark, and records of one CPU model from two runs are two runs, not two machines, nor one."""
    groups = by_run(evidence)
    models = list(dict.fromkeys(cpu_of(e.record)[0] for e in evidence.values()))
    items: list[str] = []
    (first, records), *others = groups.items()
    if not others and first[0] == "run":
        lead = (f"Every reference record on this site was measured in one run, {first[1]}, started {started(records)}, "
                f"on one machine: {group_machine(records)}.")
    else:
        runs = [key for key in groups if key[0] == "run"]
        unnamed = [e for key, records in groups.items() if key[0] == "none" for e in records]
        also = f" and {plural(len(unnamed), 'record that names', 'records that name')} no run" if unnamed else ""
        lead = (f"The reference records were not measured in one run: they come from {plural(len(runs), 'run')}"
                f"{also}, on {plural(len(models), 'CPU model')}." if runs else
                f"The reference records name no run (they were made before records stored theirs), so none counts "
                f"as measured in one run with another; they ran on {plural(len(models), 'CPU model')}.")
        items = [group_words(key, records) for key, records in groups.items()]
    rows = []
    for name, e in evidence.items():
        cpu, cores = cpu_of(e.record)
        stored = e.record.get("wall_time_s")
        rows.append((e.lab.title, e.lab.record.as_posix(), run_id(e.record) or "none stored", cpu, cores or "unknown",
                     e.record["environment"]["torch"]["threads"], e.record["created_utc"].partition("T")[0],
                     minutes(stored) if stored is not None else f"not stored; time make bench LAB={name}"))
    table = Table(headings=["Lab", "Record", "Run", "CPU", "Logical cores", "PyTorch threads", "Measured",
                            "Benchmark took"], rows=rows)
    return Block(paragraphs=[lead], items=items, tables=[table])


def tests_view(evidence: Mapping[str, Evidence]) -> Block:
    """How long each lab's tests took in the run this build used, where the report says."""
    timed = {name: e.tests["seconds"] for name, e in evidence.items() if "seconds" in e.tests}
    untimed = [name for name in evidence if name not in timed]
    parts = [f"{name} {minutes(seconds)}" for name, seconds in timed.items()]
    sentence = ("The test runs this build used took " + join(parts) + " on the machine that ran them"
                if parts else "The test runs this build used do not say how long they took")
    if untimed and parts:
        sentence += f" ({join(untimed)}: a report made before test runs were timed)"
    return Block(paragraphs=[sentence + "."])


SITE_VIEWS: dict[str, SiteView] = {"machines": machines_view, "tests": tests_view}


def render_site_view(name: str, evidence: Mapping[str, Evidence]) -> str:
    return render_block(SITE_VIEWS[name](evidence))
