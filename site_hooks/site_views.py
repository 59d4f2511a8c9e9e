"""Views of the whole site, for a page that is no lab's (the landing page): ``{{ site:<view> }}`` alone on its line.

A site view is a function of every lab's evidence, in the order the labs were discovered, returning a block;
like a lab's view it reads records and test reports and words them, and computes no figure: durations come
from the records that store them (``wall_time_s``) and from each test report's ``seconds``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .blocks import Block, Table, render_block
from .evidence import Evidence
from .formatting import join, plural

SiteView = Callable[[Mapping[str, Evidence]], Block]


def cpu_of(record: dict[str, Any]) -> tuple[str, int | None, int]:
    """(CPU model, logical cores, PyTorch threads) as the record's environment states them."""
    env = record["environment"]
    return env["cpu"]["model"], env["cpu"]["logical_cores"], env["torch"]["threads"]


def machine_words(machine: tuple[str, int | None, int]) -> str:
    """'AMD EPYC with 2 logical cores, PyTorch at 1 thread'."""
    cpu, cores, threads = machine
    return (f"{cpu} with {plural(cores, 'logical core') if cores else 'an unknown number of logical cores'}, "
            f"PyTorch at {plural(threads, 'thread')}")


def minutes(seconds: float) -> str:
    """'1 min 30 s', '45 s'."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def machines_view(evidence: Mapping[str, Evidence]) -> Block:
    """Where every lab's reference record was measured, and how long its benchmark ran where the record says."""
    machines = {name: cpu_of(e.record) for name, e in evidence.items()}
    distinct = list(dict.fromkeys(machines.values()))
    lead = (f"Every reference record on this site was measured on one machine: {machine_words(distinct[0])}."
            if len(distinct) == 1 else
            f"The reference records come from {plural(len(distinct), 'machine')}: "
            + join([machine_words(m) for m in distinct]) + ".")
    rows = []
    for name, e in evidence.items():
        cpu, cores, threads = machines[name]
        stored = e.record.get("wall_time_s")
        rows.append((e.lab.title, e.lab.record.as_posix(), cpu, cores or "unknown", threads,
                     e.record["created_utc"].partition("T")[0],
                     minutes(stored) if stored is not None else f"not stored; time make bench LAB={name}"))
    table = Table(headings=["Lab", "Record", "CPU", "Logical cores", "PyTorch threads", "Measured", "Benchmark took"],
                  rows=rows)
    return Block(paragraphs=[lead], tables=[table])


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
