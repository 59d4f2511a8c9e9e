"""Views every lab shares: pure functions from a lab's evidence to an HTML block. A placeholder names one.

The first four fit any record; the rest render a timing sweep (a record with ``lengths``). A lab adds
views of its own in the module its lab.toml names (see labviews.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labkit.manifest import Lab
from labkit.quiet import QUIET_BUSY_CORES, QUIET_STEAL_SHARE
from labkit.summary import STATISTICS, repetitions_frame
from labkit.watch import Load, load_of

from . import prose
from .blocks import Block, render_block
from .captions import measured_line, source_line
from .chart import Series, line_chart
from .errors import SiteBuildError
from .evidence import Evidence
from .formatting import format_seconds, join, plural
from .labviews import lab_views
from .machine import LABELS, recording_machine
from .machines_view import machines_view
from .reproduce import commands_view
from .templating import render

SharedView = Callable[[Evidence], str]
PHASES = {"before": "just before the measurement", "during": "during it", "after": "just after it"}
QUIET_RULE = f"at most {QUIET_BUSY_CORES:g} cores on average, and {QUIET_STEAL_SHARE:.0%} of the CPU time stolen"


def tests_view(evidence: Evidence) -> str:
    report = evidence.tests
    summary = (f"{report['passed']} of {plural(report['ran'], 'lab test')} passed when this site was built, "
               f"on {report['python_implementation']} {report['python']} with PyTorch {report['torch']}"
               f" (run started {report['started_utc'].replace('T', ' ').replace('Z', ' UTC')}).")
    rows = [{**t, "group": t["group"].rpartition(".")[2], "module": t["group"].partition(".")[0]}
            for t in report["tests"]]
    return render("tests.html.j2", summary=summary, command=report["command"], rows=rows)


def huge_pages_text(memory: dict[str, object]) -> str:
    """Whether torch asked for 2 MiB pages, and whether the kernel's transparent huge page mode could grant them."""
    mode = memory["transparent_huge_pages"]
    asked = "asked for by torch's allocator for every allocation of 2 MiB or more" if memory["torch_huge_pages"] \
        else "not asked for by torch's allocator"
    if mode is None:
        return f"{asked}; this kernel reports no transparent huge pages"
    return f"{asked}; the kernel's transparent huge pages: {mode}" + (
        " (so none were granted)" if mode == "never" and memory["torch_huge_pages"] else
        " (granted to every large allocation, asked or not)" if mode == "always" else "")


def environment_view(evidence: Evidence) -> str:
    env = evidence.record["environment"]
    git = env["git"]
    commit = "unknown" if git["commit"] is None else git["commit"][:12] + (
        " (with uncommitted changes)" if git["dirty"] else " (clean tree)")
    rows = [
        ("Python", f"{env['python']['implementation']} {env['python']['version']}"),
        ("PyTorch", env["torch"]["version"]),
        ("Torch threads in force", env["torch"]["threads"]),
        ("Torch inter-op threads", env["torch"]["interop_threads"]),
        ("CPU", env["cpu"]["model"]),
        ("Logical cores", env["cpu"]["logical_cores"] or "unknown"),
        ("Architecture", env["cpu"]["machine"]),
        ("Operating system", f"{env['os']['system']} {env['os']['release']}"),
        ("C library", env["os"].get("libc") or "unknown"),
        ("Huge pages", huge_pages_text(env["memory"])),
        ("Git commit", commit),
        ("Recorded (UTC)", evidence.record["created_utc"]),
        ("Command", evidence.record["command"]),
    ]
    return render("environment.html.j2", rows=rows, parallel_info=env["torch"]["parallel_info"],
                  build_config=env["torch"]["build_config"], record=evidence.lab.record.as_posix(),
                  record_url=evidence.record_url)


def config_view(evidence: Evidence) -> str:
    config = evidence.record["config"]
    bench = dict(config["benchmark"])
    modes, baseline = bench.pop("modes", None), bench.pop("baseline", None)
    bench_rows = [(name.replace("_", " "), setting_text(value))
                  for name, value in bench.items()]  # every setting the record holds, lab-specific ones too
    if modes:
        bench_rows.append(("modes", ", ".join(modes) + (f" (baseline: {baseline})" if baseline else "")))
    if "tolerance" in evidence.record:
        tolerance = evidence.record["tolerance"]
        bench_rows.append(("tolerance", f"atol = {tolerance['atol']:g}, rtol = {tolerance['rtol']:g}"))
    model_rows = [(name, setting_text(value)) for name, value in config["model"].items()]
    return render("config.html.j2", model_rows=model_rows, bench_rows=bench_rows)


def setting_text(value: object) -> str:
    """A config value as text: lists joined, nested tables as key = value pairs, flags as yes or no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "none"
    if isinstance(value, list):
        return ", ".join(map(setting_text, value))
    if isinstance(value, dict):
        return "; ".join(f"{key} = {setting_text(item)}" for key, item in value.items())
    return str(value)


def provenance_view(evidence: Evidence) -> str:
    here, there = evidence.build_machine, recording_machine(evidence.record)
    rows = [(label, there[key], here[key], there[key] == here[key]) for key, label in LABELS.items()]
    differs = [label for label, _, _, same in rows if not same]
    fingerprint = evidence.record["fingerprint"]
    freshness = (
        "The benchmark ran during this build, so the timings come from the machine that built this page."
        if evidence.measured_now else
        f"The timings were not measured during this build: they come from the committed record, made on "
        f"{evidence.record['created_utc'].replace('T', ' at ').replace('Z', ' UTC')}."
    )
    verdict = (
        f"The build machine matches the recording machine in {join(list(LABELS.values()))}."
        if not differs else
        f"The tests on this page ran on the build machine; the timings were taken on the recording machine. "
        f"They differ in: {join(differs)}."
    )
    load = load_of(evidence.record.get("machine_state"))
    return render(
        "provenance.html.j2", kind="warning" if differs or (load and load.refusal) else "info", freshness=freshness,
        verdict=verdict, machine_state=machine_state_sentence(evidence.record, load), rows=rows,
        digest=fingerprint["digest"][:16], files=sorted(fingerprint["files"]),
    )


def load_words(load: Load) -> str:
    """The load over a run, in words: the mean, the busiest sample, the hypervisor's share."""
    return (f"other work kept {load.busy_cores:.2f} of the machine's {plural(load.cores, 'core')} busy on average "
            f"over {format_seconds(load.seconds)} (at most {load.peak_busy_cores:.2f} in one sample, "
            f"{format_seconds(load.peak_seconds)} {PHASES[load.peak_phase]}) and the hypervisor took "
            f"{load.steal_share:.1%} of the CPU time")


def machine_state_sentence(record: dict[str, Any], load: Load | None) -> str:
    """What the record's samples say about other work on the machine while it was measured."""
    if load is None:
        why = (record.get("machine_state") or {}).get("unavailable")
        return ("This record holds no samples of the machine's state, so whether other work shared the machine is "
                "unknown." + (f" The benchmark could not take them: {why}." if why else ""))
    if load.refusal is None:
        return f"While it ran, {load_words(load)}: a quiet machine by this site's rule ({QUIET_RULE})."
    return (f"This record was measured under load: {load_words(load)}, beyond this site's rule for a quiet machine "
            f"({QUIET_RULE}). Its timings may be slower and noisier than the machine gives a benchmark alone.")


def measured_note(evidence: Evidence) -> str:
    """The line under a lab page's title naming where its numbers come from: record, machine and run (captions.py)."""
    return render_block(Block(css="lab-measured-on", paragraphs=[measured_line(evidence)]))


def load_warning(evidence: Evidence) -> str | None:
    """A warning for the top of a page whose record was measured under load; None for a quiet one, or one without
    samples (its provenance says so)."""
    load = load_of(evidence.record.get("machine_state"))
    if load is None or load.refusal is None:
        return None
    return render("load-warning.html.j2", record=evidence.lab.record.as_posix(), load=load_words(load),
                  rule=QUIET_RULE)


def findings_view(evidence: Evidence) -> str:
    sentences = [prose.environment_sentence(evidence.record), prose.protocol_sentence(evidence.record),
                 *prose.faster_sentences(evidence.record)]
    return render("paragraphs.html.j2", css="lab-findings", paragraphs=sentences)


def medians_view(evidence: Evidence) -> str:
    record = evidence.record
    bench = record["config"]["benchmark"]
    modes, baseline = bench["modes"], bench["baseline"]
    flags = prose.noise_flags(record)
    rows = []
    for entry in record["lengths"]:
        length = entry["length"]
        rows.append({"length": length, "modes": [
            {**{name: entry["modes"][mode][name] for name in STATISTICS}, "mode": mode,
             "repeats": len(entry["modes"][mode]["durations_ns"]),
             "per_step": entry["modes"][mode]["per_step"]["median_ns"],
             "speedup": None if mode == baseline else entry["speedup"][mode], "flags": flags[length].get(mode)}
            for mode in modes
        ]})
    return render("medians.html.j2", baseline=baseline, rows=rows, noise=prose.noise_sentence(record))


def raw_view(evidence: Evidence) -> str:
    record = evidence.record
    modes = record["config"]["benchmark"]["modes"]
    groups = []
    frame = repetitions_frame(record["lengths"])  # one row per timed run
    for length, by_length in frame.groupby("length", sort=True):
        rows = []
        for repetition, run in by_length.groupby("repetition", sort=True):
            run = run.sort_values("slot")  # the order the runs actually happened in
            cells = {mode: (duration, slot + 1) for mode, duration, slot in zip(run["mode"], run["duration_ns"], run["slot"])}
            rows.append({"repetition": int(repetition) + 1, "order": list(run["mode"]),
                         "cells": [cells[mode] for mode in modes]})
        groups.append({"length": int(length), "rows": rows})
    return render("raw.html.j2", modes=modes, groups=groups, record=evidence.lab.record.as_posix(),
                  runs=len(frame), record_url=evidence.record_url)


def timing_chart(evidence: Evidence, per_step: bool) -> str:
    """Median (whiskers: min to max) against prefix length, one line per mode."""
    record = evidence.record
    bench = record["config"]["benchmark"]
    entries = record["lengths"]
    unit = "µs per decode step" if per_step else "ms per measured run"

    def stored(mode: str, name: str) -> list[float]:
        """The statistic derived from the record, per step in µs or per run in ms."""
        return [e["modes"][mode]["per_step"][name] / 1e3 if per_step else e["modes"][mode][name] / 1e6
                for e in entries]

    series = [Series(label=mode, x=[e["length"] for e in entries], y=stored(mode, "median_ns"),
                     low=stored(mode, "min_ns"), high=stored(mode, "max_ns"))
              for mode in bench["modes"]]
    description = "; ".join(
        f"{s.label}: " + ", ".join(f"{int(x)} tokens {y:.3g}" for x, y in zip(s.x, s.y)) for s in series)
    svg = line_chart(series, title=f"Median {unit} against prefix length, {', '.join(bench['modes'])}",
                     x_label="Prefix length (tokens, log scale)", y_label=f"Median {unit} (log scale)",
                     description=description)
    repeats = {len(entry["order"]) for entry in record["lengths"]}
    caption = (f"Median of {join(sorted(map(str, repeats)))} repetitions per point"
               + (", divided by its decode steps" if per_step else "") + "; whiskers min to max.")
    return render("chart.html.j2", svg=svg, caption=caption, source=source_line(evidence))


def chart_view(evidence: Evidence) -> str:
    return timing_chart(evidence, per_step=False)


def step_chart_view(evidence: Evidence) -> str:
    return timing_chart(evidence, per_step=True)


def equivalence_view(evidence: Evidence) -> str:
    record = evidence.record
    bench = record["config"]["benchmark"]
    compared = [m for m in bench["modes"] if m != bench["baseline"]]
    return render("equivalence.html.j2", sentences=prose.equivalence_sentences(record), compared=compared,
                  baseline=bench["baseline"], rows=record["lengths"], tolerance=record["tolerance"],
                  batch=bench["batch"])


VIEWS: dict[str, SharedView] = {
    "tests": tests_view,
    "environment": environment_view,
    "config": config_view,
    "provenance": provenance_view,
    "findings": findings_view,
    "medians": medians_view,
    "raw": raw_view,
    "chart": chart_view,
    "step-chart": step_chart_view,
    "equivalence": equivalence_view,
    "machines": machines_view,
    "commands": commands_view,
}
ANY_RECORD = {"tests", "environment", "config", "provenance", "machines", "commands"}  # the others render a timing sweep


def views_for(lab: Lab) -> set[str]:
    """The views a page may name for this lab: the shared ones and the lab's own."""
    return set(VIEWS) | set(lab_views(lab))


def render_view(name: str, evidence: Evidence) -> str:
    """A lab's own view (which may override a shared one) reads the record alone; a shared view the evidence."""
    own = lab_views(evidence.lab)
    if name in own:
        return render_block(own[name](evidence.record), source=source_line(evidence))
    if name not in ANY_RECORD and "lengths" not in evidence.record:
        raise SiteBuildError(f"{evidence.lab.record}: view {name!r} renders a timing sweep, and this record "
                             f"has none (no field 'lengths')")
    return VIEWS[name](evidence)

