"""Views: pure functions from a lab's evidence to an HTML block. A placeholder names one view."""

from __future__ import annotations

from collections.abc import Callable
from labkit.summary import repetitions_frame, speedup_frame, statistics_frame

from . import memory_views, prose
from .consistency import cache_bytes
from .chart import Series, line_chart
from .machine import build_machine, recording_machine
from .orchestrate import Evidence
from .templating import render

View = Callable[[Evidence], str]


def tests_view(evidence: Evidence) -> str:
    report = evidence.tests
    summary = (f"{report['passed']} of {prose.plural(report['ran'], 'lab test')} passed when this site was built, "
               f"on {report['python_implementation']} {report['python']} with PyTorch {report['torch']}"
               f" (run started {report['started_utc'].replace('T', ' ').replace('Z', ' UTC')}).")
    rows = [{**t, "group": t["group"].rpartition(".")[2], "module": t["group"].partition(".")[0]}
            for t in report["tests"]]
    return render("tests.html.j2", summary=summary, command=report["command"], rows=rows)


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
        ("Git commit", commit),
        ("Recorded (UTC)", evidence.record["created_utc"]),
        ("Command", evidence.record["command"]),
    ]
    return render("environment.html.j2", rows=rows, parallel_info=env["torch"]["parallel_info"],
                  build_config=env["torch"]["build_config"], record=evidence.lab.record.as_posix())


def config_view(evidence: Evidence) -> str:
    config = evidence.record["config"]
    tolerance = evidence.record["tolerance"]
    bench = dict(config["benchmark"])
    modes, baseline = bench.pop("modes"), bench.pop("baseline")
    bench_rows = [(name.replace("_", " "), ", ".join(map(str, value)) if isinstance(value, list) else value)
                  for name, value in bench.items()]  # every setting the record holds, lab-specific ones too
    bench_rows += [("modes", f"{', '.join(modes)} (baseline: {baseline})"),
                   ("tolerance", f"atol = {tolerance['atol']:g}, rtol = {tolerance['rtol']:g}")]
    return render("config.html.j2", model_rows=list(config["model"].items()), bench_rows=bench_rows)


def provenance_view(evidence: Evidence) -> str:
    here, there = build_machine(evidence.tests), recording_machine(evidence.record)
    labels = {"python": "Python", "torch": "PyTorch", "cpu": "CPU", "logical_cores": "Logical cores", "os": "OS"}
    rows = [(labels[key], there[key], here[key], there[key] == here[key]) for key in labels]
    differs = [label for label, _, _, same in rows if not same]
    fingerprint = evidence.record["fingerprint"]
    freshness = (
        "The benchmark ran during this build, so the timings come from the machine that built this page."
        if evidence.measured_now else
        f"The timings were not measured during this build: they come from the committed record, made on "
        f"{evidence.record['created_utc'].replace('T', ' at ').replace('Z', ' UTC')}."
    )
    verdict = (
        "The build machine matches the recording machine in Python, PyTorch, CPU, core count and OS."
        if not differs else
        f"The tests on this page ran on the build machine; the timings were taken on the recording machine. "
        f"They differ in: {prose.join(differs)}."
    )
    return render(
        "provenance.html.j2", kind="info" if not differs else "warning", freshness=freshness, verdict=verdict,
        rows=rows, digest=fingerprint["digest"][:16], files=fingerprint["files"],
    )


def findings_view(evidence: Evidence) -> str:
    sentences = [prose.environment_sentence(evidence.record), *prose.faster_sentences(evidence.record)]
    return render("paragraphs.html.j2", css="lab-findings", paragraphs=sentences)


def medians_view(evidence: Evidence) -> str:
    record = evidence.record
    bench = record["config"]["benchmark"]
    modes, baseline = bench["modes"], bench["baseline"]
    stats = statistics_frame(record["lengths"])
    speedups = speedup_frame(record["lengths"], baseline)
    flags = prose.noise_flags(record)
    rows = []
    for entry in record["lengths"]:
        length = entry["length"]
        rows.append({"length": length, "modes": [
            dict(stats.loc[(length, mode)], mode=mode, per_step=stats.loc[(length, mode), "median_ns"] / entry["steps"],
                 speedup=None if mode == baseline else dict(speedups.loc[(length, mode)]),
                 flags=flags[length].get(mode))
            for mode in modes
        ]})
    return render("medians.html.j2", baseline=baseline, rows=rows, noise=prose.noise_sentence(record))


def raw_view(evidence: Evidence) -> str:
    record = evidence.record
    modes = record["config"]["benchmark"]["modes"]
    groups = []
    for length, by_length in repetitions_frame(record["lengths"]).groupby("length", sort=True):
        rows = []
        for repetition, run in by_length.groupby("repetition", sort=True):
            run = run.sort_values("slot")  # the order the runs actually happened in
            cells = {mode: (duration, slot + 1) for mode, duration, slot in zip(run["mode"], run["duration_ns"], run["slot"])}
            rows.append({"repetition": int(repetition) + 1, "order": list(run["mode"]),
                         "cells": [cells[mode] for mode in modes]})
        groups.append({"length": int(length), "rows": rows})
    return render("raw.html.j2", modes=modes, groups=groups, record=evidence.lab.record.as_posix())


def timing_chart(evidence: Evidence, per_step: bool) -> str:
    """Median (whiskers: min to max) against prefix length, one line per mode."""
    record = evidence.record
    bench = record["config"]["benchmark"]
    steps = {entry["length"]: entry["steps"] for entry in record["lengths"]}
    stats = statistics_frame(record["lengths"])
    scale = {n: (1e3 * steps[n] if per_step else 1e6) for n in steps}  # ns -> µs per step, or ms
    unit = "µs per decode step" if per_step else "ms per measured run"
    series = [
        Series(label=mode, x=list(steps),
               y=[stats.loc[(n, mode), "median_ns"] / scale[n] for n in steps],
               low=[stats.loc[(n, mode), "min_ns"] / scale[n] for n in steps],
               high=[stats.loc[(n, mode), "max_ns"] / scale[n] for n in steps])
        for mode in bench["modes"]
    ]
    description = "; ".join(
        f"{s.label}: " + ", ".join(f"{int(x)} tokens {y:.3g}" for x, y in zip(s.x, s.y)) for s in series)
    svg = line_chart(series, title=f"Median {unit} against prefix length, {', '.join(bench['modes'])}",
                     x_label="Prefix length (tokens, log scale)", y_label=f"Median {unit} (log scale)",
                     description=description)
    repeats = {len(entry["order"]) for entry in record["lengths"]}
    caption = (f"Each point is the median of {prose.join(sorted(map(str, repeats)))} repetitions of: "
               f"{bench['workload']}" + (" (divided by its steps)" if per_step else "") +
               f". Whiskers span min to max. Drawn at build time from {evidence.lab.record.as_posix()}.")
    return render("chart.html.j2", svg=svg, caption=caption)


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


def cache_bytes_view(evidence: Evidence) -> str:
    """Bytes per position from the config; rows already checked against it by consistency.py."""
    record = evidence.record
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    per_position = cache_bytes(model, batch, model["kv_heads"], length=1)
    rows = [{"length": e["length"], **e["cache_bytes"]} for e in record["lengths"]]
    last = rows[-1]
    sentence = (
        f"With batch {batch}, {model['kv_heads']} key/value heads of width {model['head_dim']} and "
        f"{model['dtype']} ({model['bytes_per_element']} bytes per element), every retained position adds "
        f"2 × {batch} × {model['kv_heads']} × {model['head_dim']} × {model['bytes_per_element']} = "
        f"{per_position:,} bytes to this one-layer cache; at {last['length']} positions the key and value "
        f"tensors hold {last['formula']:,} bytes. The benchmark counted the bytes of the real cache tensors "
        f"at every length, and they equal the formula."
    )
    return render("cache_bytes.html.j2", sentence=sentence, rows=rows, per_position=per_position)


VIEWS: dict[str, View] = {
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
    "cache-bytes": cache_bytes_view,
    "memory": memory_views.memory_view,
    "gqa": memory_views.gqa_view,
    "paging": memory_views.paging_view,
    "sharing": memory_views.sharing_view,
}


def render_view(name: str, evidence: Evidence) -> str:
    return VIEWS[name](evidence)

