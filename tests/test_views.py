"""Renderers on fixture records: what they show comes from the record, escaped, with honest sentences."""

from __future__ import annotations

import dataclasses
import html
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import kv_cache.figures as kv_cache_figures
from labkit.figures import fill
from labkit.summary import float64_shrink, statistics_frame, sweep_figures
from site_hooks import prose
from site_hooks.errors import SiteBuildError
from site_hooks.evidence import Evidence
from site_hooks.formatting import format_ms, plural
from site_hooks.views import measured_note, render_view, views_for

from conftest import LAB, STORAGE_LAB

HOSTILE = '<script>alert("x")</script> & --8<-- "/etc/passwd"'


def set_medians(record: dict[str, Any], medians: dict[int, tuple[int, int]]) -> None:
    """Make every repetition equal, so each (full, cached) median is exactly what is given; then derive the
    statistics and the lab's figures again, as the site build does when it reads the record."""
    for entry in record["lengths"]:
        for mode, value in zip(("full", "cached"), medians[entry["length"]]):
            entry["modes"][mode].update(durations_ns=[value] * len(entry["order"]))
    fill(record, sweep_figures(record))
    fill(record, kv_cache_figures.derive(record))


CASES = [(lab.name, view) for lab in (LAB, STORAGE_LAB) for view in sorted(views_for(lab))]


@pytest.mark.parametrize(("lab", "view"), CASES)
def test_every_view_escapes_html_taken_from_the_record(
    lab: str, view: str, evidence: Evidence, storage_evidence: Evidence
) -> None:
    evidence = storage_evidence if lab == "kv-storage" else evidence
    record = evidence.record
    record["environment"]["cpu"]["model"] = HOSTILE
    record["environment"]["torch"]["version"] = HOSTILE
    record["environment"]["python"]["version"] = HOSTILE
    record["command"] = HOSTILE
    record["created_utc"] = HOSTILE
    record["config"]["model"]["dtype"] = HOSTILE
    record["environment"]["torch"]["parallel_info"] = HOSTILE
    evidence.tests["tests"][0]["name"] = HOSTILE
    evidence.tests["torch"] = HOSTILE
    record["machine_state"] = {"cores": 2, "every_s": 10.0, "samples": [], "unavailable": HOSTILE}
    html = render_view(view, evidence)
    assert "<script>" not in html
    assert "--8<--" not in html  # the snippets extension must never see an include line from data
    escaped = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; --8&lt;--"
    if view in {"environment", "findings", "tests", "provenance", "cache-bytes"}:
        assert escaped in html


def test_medians_table_shows_each_median_and_range_from_the_raw_repetitions(evidence: Evidence) -> None:
    html = render_view("medians", evidence)
    stats = statistics_frame(evidence.record["lengths"])
    for (_length, mode), row in stats.iterrows():
        median, low, high = (format_ms(row[name]) for name in ("median_ns", "min_ns", "max_ns"))
        assert f"<td>{mode}</td><td>{median} <small>({low}–{high})</small></td>" in html
    assert html.count("<tr>") - 2 == 2 * len(evidence.record["lengths"])  # two header rows + a row per length and mode


def test_raw_view_lists_every_repetition_in_run_order(evidence: Evidence) -> None:
    html = render_view("raw", evidence)
    entry = evidence.record["lengths"][0]
    rows = re.findall(r"<tr>(?:<td rowspan=\"\d+\">\d+</td>)?<td>(\d+)</td><td>(\w+)</td>"
                      r"<td>([^<]+) <small>\((\d)\)</small></td><td>([^<]+) <small>\((\d)\)</small></td></tr>", html)
    assert len(rows) == sum(len(e["order"]) for e in evidence.record["lengths"])
    for (repetition, first, full, full_slot, cached, cached_slot), order in zip(rows, entry["order"]):
        number = int(repetition) - 1
        assert first == order[0]
        assert (int(full_slot), int(cached_slot)) == (order.index("full") + 1, order.index("cached") + 1)
        assert full.strip() == format_ms(entry["modes"]["full"]["durations_ns"][number])
        assert cached.strip() == format_ms(entry["modes"]["cached"]["durations_ns"][number])


def test_chart_is_an_svg_with_labelled_axes_and_one_line_per_mode(evidence: Evidence) -> None:
    html = render_view("chart", evidence)
    assert html.count("<svg") == 1 and html.count("<polyline") == 2
    assert "Prefix length (tokens, log scale)" in html
    assert "Median ms per measured run (log scale)" in html
    for length in evidence.record["config"]["benchmark"]["lengths"]:
        assert f">{length}</text>" in html


def test_findings_say_cached_was_faster_everywhere_only_when_it_was(evidence: Evidence) -> None:
    lengths = [e["length"] for e in evidence.record["lengths"]]
    set_medians(evidence.record, {n: (1000 * n, 500 * n // 2 + 1) for n in lengths})
    assert "The cached path had the lower median time at every measured prefix length" in render_view("findings", evidence)
    slow_at_first = {n: (1000 * n, 2000 * n if n == lengths[0] else 10 * n) for n in lengths}
    set_medians(evidence.record, slow_at_first)
    text = render_view("findings", evidence)
    assert "at every measured prefix length" not in text
    assert f"the full path at {lengths[0]} tokens" in text


def test_findings_say_whether_the_gap_grew_at_every_step(evidence: Evidence) -> None:
    lengths = [e["length"] for e in evidence.record["lengths"]]
    set_medians(evidence.record, {n: (n * n, n) for n in lengths})  # ratio = n, strictly growing
    assert "grew at every length of the sweep" in render_view("findings", evidence)
    dip = {n: (n * n, n * (4 if n == lengths[2] else 1)) for n in lengths}  # ratio dips at the third length
    set_medians(evidence.record, dip)
    text = render_view("findings", evidence)
    assert "rose overall but not at every length" in text
    assert f"{lengths[1]} and {lengths[2]}" in text


def test_noisy_rows_are_flagged_with_the_stated_threshold(evidence: Evidence) -> None:
    set_medians(evidence.record, {e["length"]: (1000, 500) for e in evidence.record["lengths"]})  # no noise
    entry = evidence.record["lengths"][0]
    durations = entry["modes"]["cached"]["durations_ns"]
    durations[0] = int(max(durations) * 3)
    fill(evidence.record, sweep_figures(evidence.record))
    html = render_view("medians", evidence)
    assert re.search(r"<td>cached</td>.*<td>spread \d+%</td></tr>", html)
    assert f"1 of {2 * len(evidence.record['lengths'])} measurements flagged as noisy" in html
    assert f"above {prose.NOISY_SPREAD:.0%} of the median" in html
    assert f"cached at {entry['length']} tokens" in html


def test_too_few_repetitions_flag_every_row(evidence: Evidence) -> None:
    for entry in evidence.record["lengths"]:
        entry["order"] = entry["order"][:3]
        for values in entry["modes"].values():
            values["durations_ns"] = values["durations_ns"][:3]
    html = render_view("medians", evidence)
    assert html.count("only 3 repetitions") == 2 * len(evidence.record["lengths"])


def precision(single: float, double: float) -> dict[str, Any]:
    """A precision check at 8 tokens with its float64_shrink derived as the benchmark stores it."""
    check = {"length": 8, "float32": {"max_abs_diff": single}, "float64": {"max_abs_diff": double}}
    return check | {"float64_shrink": float64_shrink(check)}


def test_precision_sentence_when_float32_already_agreed_exactly() -> None:
    assert "agreed exactly in float32" in prose.precision_sentence(precision(0.0, 1e-16))


def test_precision_sentence_calls_it_rounding_only_when_float64_shrinks_the_error() -> None:
    shrinking = precision(6e-7, 1.2e-15)
    assert "as rounding error does" in prose.precision_sentence(shrinking)
    assert "5 × 10⁸ times smaller" in prose.precision_sentence(shrinking)
    assert "float64 removed it entirely" in prose.precision_sentence(precision(6e-7, 0.0))
    assert "points at a difference in the computation" in prose.precision_sentence(precision(6e-7, 5e-7))


@pytest.mark.parametrize(
    ("changes", "differs"),
    [
        ({}, None),
        ({"cpu": "Some Other CPU"}, "CPU"),
        ({"torch": "9.9.9", "cpu": "Some Other CPU"}, "PyTorch and CPU"),
        ({"python": "3.99.0", "torch": "9.9.9", "cpu": "Some Other CPU", "logical_cores": 1024, "os": "Plan 9 4"},
         "Python, PyTorch, CPU, logical CPUs and OS"),
    ],
)
def test_provenance_names_what_differs_between_recording_and_build_machines(
    evidence: Evidence, changes: dict[str, Any], differs: str | None
) -> None:
    """Both machines are made up here: the verdict must not depend on the host running the test."""
    build = evidence.build_machine | changes
    html = render_view("provenance", dataclasses.replace(evidence, build_machine=build))
    if differs is None:
        assert "matches the recording machine in Python, PyTorch, CPU, logical CPUs and OS" in html
        assert "admonition info" in html
    else:
        assert f"They differ in: {differs}." in html
        assert "admonition warning" in html


def test_tests_view_counts_and_lists_each_test(evidence: Evidence) -> None:
    html = render_view("tests", evidence)
    assert "2 of 2 lab tests passed when this site was built, on CPython 3.11.7 with PyTorch 2.13.0+cpu" in html
    assert "<code>test_one</code>" in html and "<code>test_two</code>" in html


def test_cache_bytes_come_from_the_config(evidence: Evidence) -> None:
    html = render_view("cache-bytes", evidence)
    assert "2 × 1 × 4 × 8 × 4 = 256 bytes" in html
    assert "<td>128</td><td>32,768</td><td>32,768</td>" in html


def test_a_sweep_view_on_a_record_without_a_sweep_names_the_record(evidence: Evidence) -> None:
    del evidence.record["lengths"]
    with pytest.raises(SiteBuildError, match=r"results/cache-results\.json: view 'medians' renders a timing sweep"):
        render_view("medians", evidence)


def test_the_measurement_section_states_warmup_and_repetitions_from_the_record(evidence: Evidence) -> None:
    bench = evidence.record["config"]["benchmark"]
    text = render_view("findings", evidence)
    assert f"first ran {plural(bench['warmup'], 'untimed warm-up run')}, then {bench['repeats']} timed" in text


def test_cache_bytes_sentence_states_the_worked_example_of_128_positions(evidence: Evidence) -> None:
    html = render_view("cache-bytes", evidence)
    assert "At 128 positions, the worked example, that is 32,768 bytes" in html


def test_raw_data_is_collapsed_with_its_run_count_and_links_the_record(evidence: Evidence) -> None:
    html = render_view("raw", evidence)
    runs = sum(len(e["order"]) * len(e["modes"]) for e in evidence.record["lengths"])
    assert f"<summary>Every timed run: {runs:,} runs" in html
    assert '<a href="../../results/cache-results.json" download>' in html


def test_memory_view_reports_peak_and_retained_bytes_of_every_layout(storage_evidence: Evidence) -> None:
    html = render_view("memory", storage_evidence)
    for mode, values in storage_evidence.record["memory"]["variants"].items():
        assert f"<td>{mode}</td><td>{values['retained_bytes']:,}</td><td>{values['peak_bytes']:,}</td>" in html
    assert html.count("<rect") >= 2 * len(storage_evidence.record["memory"]["variants"])


def test_memory_sentence_compares_concatenation_and_preallocation_by_the_numbers(storage_evidence: Evidence) -> None:
    variants = storage_evidence.record["memory"]["variants"]
    variants["concat"]["peak_bytes"] = variants["prealloc"]["peak_bytes"] - 1
    assert "Concatenation&#39;s peak was not higher than preallocation" in render_view("memory", storage_evidence)
    variants["concat"]["peak_bytes"] = variants["prealloc"]["peak_bytes"] * 2
    assert "Concatenation&#39;s peak was higher than preallocation" in render_view("memory", storage_evidence)


def test_step_chart_divides_each_duration_by_its_steps(storage_evidence: Evidence) -> None:
    html = render_view("step-chart", storage_evidence)
    assert html.count("<polyline") == 4 and "Median µs per decode step (log scale)" in html
    entry = storage_evidence.record["lengths"][0]
    per_step = entry["modes"]["paged"]["median_ns"] / entry["steps"] / 1e3
    assert f"{entry['length']} tokens {per_step:.3g}" in html  # the accessible description lists the points


def test_findings_rank_the_cached_layouts_at_both_ends(storage_evidence: Evidence) -> None:
    text = render_view("findings", storage_evidence)
    lengths = storage_evidence.record["config"]["benchmark"]["lengths"]
    assert f"at {lengths[0]} tokens;" in text and "Ordered by median time, fastest first" in text


def test_tests_view_shows_class_and_module_once(evidence: Evidence) -> None:
    html = render_view("tests", evidence)
    assert "<td>test_a.A</td>" in html


def test_measured_now_changes_the_provenance_sentence(evidence: Evidence) -> None:
    now = dataclasses.replace(evidence, measured_now=True)
    assert "The benchmark ran during this build" in render_view("provenance", now)
    assert "come from the committed record" in render_view("provenance", evidence)


def machine_state(before: float, *during: float, after: float = 0.0, steal: float = 0.0) -> dict[str, Any]:
    """A record's machine_state on 2 cores: other work's cores in a 2 s sample before, 10 s samples during and a 2 s
    sample after the measurement."""
    samples, start = [], 0.0
    for phase, seconds, busy in [("before", 2.0, before), *(("during", 10.0, b) for b in during), ("after", 2.0, after)]:
        samples.append({"phase": phase, "start_s": start, "seconds": seconds, "other_busy_cores": busy,
                        "steal_share": steal, "load_average": 0.3})
        start += seconds
    return {"cores": 2, "every_s": 10.0, "samples": samples}


QUIET_STATE = machine_state(0.01, 0.02, 0.10)  # 0.05 cores on average over 24 s, 0.10 at most
LOADED_STATE = machine_state(0.0, 1.5, 1.3, after=0.2)  # 1.18 on average


def provenance_text(evidence: Evidence, state: dict[str, Any] | None) -> str:
    if state is None:
        evidence.record.pop("machine_state", None)
    else:
        evidence.record["machine_state"] = state
    return html.unescape(render_view("provenance", evidence))


def test_provenance_states_other_work_on_a_quiet_machine_by_its_mean_and_busiest_sample(evidence: Evidence) -> None:
    text = provenance_text(evidence, QUIET_STATE)
    assert ("While it ran, other work kept 0.05 of the machine's 2 cores busy on average over 24 s (at most 0.10 in "
            "one sample, 10 s during it) and the hypervisor took 0.0% of the CPU time: a quiet machine by this "
            "site's rule (at most 0.25 cores on average, and 5% of the CPU time stolen).") in text
    assert "admonition info" in text


def test_provenance_says_a_record_was_measured_under_load_with_its_figures(evidence: Evidence) -> None:
    text = provenance_text(evidence, LOADED_STATE)
    assert ("This record was measured under load: other work kept 1.18 of the machine's 2 cores busy on average "
            "over 24 s (at most 1.50 in one sample, 10 s during it) and the hypervisor took 0.0% of the CPU time, "
            "beyond this site's rule for a quiet machine") in text
    assert "admonition warning" in text
    stolen = provenance_text(evidence, machine_state(0.0, 0.0, steal=0.08))
    assert "the hypervisor took 8.0% of the CPU time, beyond this site's rule" in stolen


def test_provenance_of_a_record_without_samples_says_the_machines_state_is_unknown(evidence: Evidence) -> None:
    unknown = "This record holds no samples of the machine's state, so whether other work shared the machine is unknown."
    assert unknown in provenance_text(evidence, None)
    no_proc = provenance_text(evidence, {"cores": 2, "every_s": 10.0, "samples": [], "unavailable": "no /proc here"})
    assert f"{unknown} The benchmark could not take them: no /proc here." in no_proc


@pytest.mark.parametrize(("state", "warned"), [(LOADED_STATE, True), (QUIET_STATE, False), (None, False)])
def test_a_page_says_under_its_title_that_its_record_was_measured_under_load_and_only_then(
        evidence: Evidence, monkeypatch: pytest.MonkeyPatch, state: dict[str, Any] | None, warned: bool) -> None:
    import markdown

    from site_hooks import hooks

    if state is not None:
        evidence.record["machine_state"] = state
    monkeypatch.setattr(hooks, "_evidence", {"kv-cache": evidence})
    page = SimpleNamespace(file=SimpleNamespace(src_uri="llm/kv-cache.md"), url="llm/kv-cache/")
    source = "# The KV cache\n\nWhat this page shows.\n\n{{ lab:kv-cache:config }}\n"
    converted = markdown.markdown(hooks.on_page_markdown(source, page, None, None))  # type: ignore[arg-type]
    text = html.unescape(hooks.on_page_content(converted, page, None, None))  # type: ignore[arg-type]
    if not warned:
        assert "Measured under load" not in text and "lab-config" in text
        return
    title, measured, warning, intro = (text.index(part) for part in (
        "<h1>The KV cache</h1>", "Measured on ", "Measured under load",
        "What this page shows."))
    assert title < measured < warning < intro
    assert ("The timings on this page, from <code>results/cache-results.json</code>, were measured while other work "
            "kept 1.18 of the machine's 2 cores busy on average over 24 s") in text


def page_text(evidences: dict[str, Evidence], monkeypatch: pytest.MonkeyPatch, source: str) -> str:
    """A page's Markdown through the hook and Markdown, as its reader gets the text."""
    import markdown

    from site_hooks import hooks

    monkeypatch.setattr(hooks, "_evidence", evidences)
    page = SimpleNamespace(file=SimpleNamespace(src_uri="llm/kv-cache.md"), url="llm/kv-cache/")
    converted = markdown.markdown(hooks.on_page_markdown(source, page, None, None))  # type: ignore[arg-type]
    return html.unescape(hooks.on_page_content(converted, page, None, None))  # type: ignore[arg-type]


def test_a_lab_page_names_its_machine_and_run_once_under_its_title(
        evidence: Evidence, storage_evidence: Evidence, monkeypatch: pytest.MonkeyPatch) -> None:
    evidence.record["environment"]["cpu"].update(model="AMD EPYC", logical_cores=2)
    evidence.record["run"] = {"id": "20261206T055326Z-55c840", "started_utc": "2026-12-06T05:53:26Z",
                              "labs": ["kv-cache", "kv-storage"], "reference": True}
    storage_evidence.record["environment"]["cpu"].update(model="Another CPU", logical_cores=8)
    source = "# The KV cache\n\nWhat this page shows.\n\n{{ lab:kv-cache:config }}\n\n{{ lab:kv-storage:config }}\n"
    text = page_text({"kv-cache": evidence, "kv-storage": storage_evidence}, monkeypatch, source)
    line = ("Measured on AMD EPYC, 2 logical cores, run 20261206T055326Z-55c840 started 2026-12-06 05:53:26 UTC: "
            "results/cache-results.json.")
    assert text.count(line) == 1 and text.count("Measured on ") == 1  # the page's own lab, the first it names
    assert text.index("<h1>The KV cache</h1>") < text.index(line) < text.index("What this page shows.")
    assert "Another CPU" not in text
    del evidence.record["run"]  # a record made before records named their run
    evidence.record["environment"]["cpu"].update(model=HOSTILE, logical_cores=None)
    text = page_text({"kv-cache": evidence, "kv-storage": storage_evidence}, monkeypatch, source)
    day = evidence.record["created_utc"].partition("T")[0]
    assert f"Measured on {HOSTILE}, no run named, on {day}: results/cache-results.json." in text  # unescaped here
    assert "<script>" not in measured_note(evidence)  # escaped as every block is
    assert "Measured on" not in page_text({"kv-cache": evidence}, monkeypatch, "# Labs\n\nNo lab named here.\n")


def test_line_chart_draws_any_number_of_series_with_a_wrapped_legend() -> None:
    from site_hooks.chart import Series, line_chart

    series = [Series(label=f"mode-{i}", x=[1, 2, 4], y=[i + 1, i + 2, i + 3], low=[i + 1, i + 1, i + 2],
                     high=[i + 2, i + 3, i + 4]) for i in range(9)]
    svg = line_chart(series, title="t", x_label="x", y_label="y", description="d")
    assert svg.count("<polyline") == 9 and all(f">mode-{i}</text>" in svg for i in range(9))
    legends = re.findall(r'<g transform="translate\(([\d.]+) ([\d.-]+)\)">', svg)
    assert len(set(legends)) == 9  # no two legend entries drawn on top of each other


def test_an_edited_views_package_is_reloaded_and_an_unchanged_one_is_not(tmp_path: Path) -> None:
    """`mkdocs serve` rebuilds in one process: an edit to any file of a lab's views package must show."""
    from labkit.manifest import load_lab
    from site_hooks import labviews

    folder = tmp_path / "labs" / "demo" / "reload-lab"
    package = folder / "reload_probe_views"
    package.mkdir(parents=True)
    (folder / "lab.toml").write_text(
        'name = "reload-lab"\ntitle = "t"\nrecord = "r.json"\nschema = "s.json"\n'
        'tests = { start = "x", pattern = "test_*.py" }\nbenchmark = ["b.py"]\n'
        'views = "reload_probe_views"\n')
    (package / "__init__.py").write_text("from .parts import VIEWS\n")
    parts = package / "parts.py"
    parts.write_text('VIEWS = {"probe": lambda record: "first"}\n')
    lab = load_lab(folder / "lab.toml", tmp_path)
    try:
        first = labviews.lab_module(lab, lab.views)
        assert labviews.lab_views(lab)["probe"](None) == "first"
        assert labviews.lab_module(lab, lab.views) is first  # nothing changed: the loaded module is reused
        parts.write_text('VIEWS = {"probe": lambda record: "second edition"}\n')  # a submodule, not __init__
        stamp = parts.stat().st_mtime_ns + 5_000_000_000  # a later mtime, however coarse the file system's clock
        os.utime(parts, ns=(stamp, stamp))
        assert labviews.lab_views(lab)["probe"](None) == "second edition"
        assert labviews.lab_module(lab, lab.views) is not first
    finally:
        labviews.forget("reload_probe_views")
        labviews._stamps.pop("reload_probe_views", None)


def test_chart_captions_name_the_record_and_the_machine(evidence: Evidence) -> None:
    record = evidence.record
    for view in ("chart", "step-chart"):
        html = render_view(view, evidence)
        assert f"Record results/cache-results.json, measured on {record['machine']}" in html
        assert record["created_utc"].partition("T")[0] in html


LENGTHS = (16, 32, 64, 128, 256, 512)


def full_steps(n: int) -> int:
    return n * 400_000 * n // 16  # a full loop whose step grows with the prefix


def test_the_regime_verdict_is_computed_from_the_per_step_medians(evidence: Evidence) -> None:
    record = evidence.record
    set_medians(record, {n: (full_steps(n), n * 165_000) for n in LENGTHS})
    text = render_view("regime", evidence)
    assert "From 16 to 512 tokens a cached step stayed within 10% of 165 µs" in text and "overhead-bound" in text
    assert "Flat: a cached step took 165 µs at 16 tokens, 165 µs at 512 (+0%)" in render_view("key-results", evidence)
    set_medians(record, {n: (full_steps(n), n * 1_000 * n) for n in LENGTHS})
    assert "no overhead-bound span" in render_view("regime", evidence)
    assert "Growing with the prefix: a cached step took 16 µs at 16 tokens, 512 µs at 512 (+3100%)" in render_view(
        "key-results", evidence)


def test_a_cached_step_that_grows_a_little_is_mostly_a_cost_per_call(evidence: Evidence) -> None:
    steps = dict(zip(LENGTHS, (167, 166, 168, 170, 194, 192)))  # the shape of the reference record, in µs
    set_medians(evidence.record, {n: (full_steps(n), n * steps[n] * 1_000) for n in LENGTHS})
    text = render_view("key-results", evidence)
    assert ("Mostly a cost per call: a cached step took 167 µs at 16 tokens, 192 µs at 512 (+15%) while the prefix it "
            "reads grew 32-fold, flat within 10% up to 128 tokens.") in text


def test_the_growing_read_is_claimed_only_where_the_longest_step_is_the_slowest(evidence: Evidence) -> None:
    record = evidence.record
    levelled = dict(zip(LENGTHS, (167, 166, 168, 170, 194, 192)))
    set_medians(record, {n: (full_steps(n), n * levelled[n] * 1_000) for n in LENGTHS})
    text = render_view("read", evidence)
    assert "The step left its band at 256 tokens (194 µs) but was no slower at 512 (192 µs)" in text
    assert "lift" not in text
    rising = dict(zip(LENGTHS, (167, 166, 168, 170, 194, 230)))
    set_medians(record, {n: (full_steps(n), n * rising[n] * 1_000) for n in LENGTHS})
    text = render_view("read", evidence)
    assert "194 µs at 256 tokens and 230 µs at 512, the slowest of the sweep" in text and "lift" in text
    set_medians(record, {n: (full_steps(n), n * 165_000) for n in LENGTHS})
    assert "never left its flat band" in render_view("read", evidence)
    assert "never left its flat band" in render_view("answer-step", evidence)


def test_key_results_say_slower_where_the_cached_loop_was_slower(evidence: Evidence) -> None:
    slow = {n: (n * 100_000, n * 200_000) for n in LENGTHS}
    set_medians(evidence.record, slow)
    for entry in evidence.record["lengths"]:
        entry["speedup"]["cached"]["ratio_of_medians"] = 0.5
    assert "ran slower (0.50×) at 16 tokens" in render_view("key-results", evidence)
    assert "lead does not grow with the prefix" in render_view("takeaway-result", evidence)


def test_the_result_takeaway_says_the_lead_grows_only_where_it_did(evidence: Evidence) -> None:
    set_medians(evidence.record, {n: (full_steps(n), n * 165_000) for n in LENGTHS})
    text = render_view("takeaway-result", evidence)
    assert "Takeaway: proven equal first, the cached loop wins by more as the prefix grows" in text
    assert "its single step costs what a call costs" in text
    assert "at toy size the cached step is overhead-bound (flat to 512 tokens)" in render_view("takeaway-limits", evidence)
    set_medians(evidence.record, {n: (full_steps(n), n * 1_000 * n) for n in LENGTHS})
    assert "its single step grows with the prefix it reads" in render_view("takeaway-result", evidence)
    assert "grows with its prefix here" in render_view("takeaway-limits", evidence)
    for entry in evidence.record["lengths"]:
        entry["equivalence"]["cached"]["within_tolerance"] = False
    assert "not equal at every step" in render_view("takeaway-result", evidence)
    assert "did not always match" in render_view("key-results", evidence)


def test_grouped_query_attention_is_credited_only_with_what_it_saves(evidence: Evidence) -> None:
    text = render_view("grouping", evidence)
    assert ("keeps Llama-3-8B at 128 KiB per token in float16: 8 key/value heads serve its 32 query heads, so the "
            "cache is 1/4 of the 512 KiB one key/value head per query head would keep") in text
    assert "It is still 3.56× more than GPT-2 small (36 KiB)" in text
    evidence.record["capacity"]["example"]["over_small_model"] = 0.5
    assert "It is still 2.00× less than GPT-2 small" in render_view("grouping", evidence)


def test_the_bytes_takeaway_sets_the_cache_against_the_weights_by_the_numbers(evidence: Evidence) -> None:
    assert "take 16.0 GiB, 107% of its 15.0 GiB of weights" not in render_view("takeaway-bytes", evidence)
    assert "take 16.0 GiB, 1.07× its 15.0 GiB of weights" in render_view("takeaway-bytes", evidence)
    evidence.record["capacity"]["example"]["cache_over_weights"] = 0.25
    assert "take 16.0 GiB, 25% of its 15.0 GiB of weights" in render_view("takeaway-bytes", evidence)


def test_the_trained_takeaway_follows_the_answers(evidence: Evidence) -> None:
    trained = evidence.record["trained"]
    trained.update(same_answer_without_cache=True, bfloat16_parts_at=None)
    assert "not what; bfloat16 gave the same answer too" in render_view("takeaway-trained", evidence)
    trained.update(same_answer_without_cache=False, bfloat16_parts_at=4)
    text = render_view("takeaway-trained", evidence)
    assert "the cache changed the greedy answer" in text and "parted from float32 at new token 5" in text


def test_diagrams_are_accessible_column_sized_svgs_with_unique_ids(evidence: Evidence) -> None:
    html = "".join(render_view(view, evidence) for view in ("cache-growth", "work", "mask"))
    svgs = re.findall(r"<svg[^>]*>", html)
    assert len(svgs) == 5 and all('width="100%"' in s and "viewBox" in s and 'role="img"' in s for s in svgs)
    ids = re.findall(r'<title id="([^"]+)"', html)
    assert len(ids) == len(set(ids)) == 5 and html.count("<desc id=") == 5
    assert "currentColor" in html and "#" not in re.sub(r'fill="#[0-9a-f]{6}"', "", "".join(re.findall(r'fill="[^"]*"', html)))


def test_the_mask_picture_is_drawn_from_the_offset_rule(evidence: Evidence) -> None:
    html = render_view("mask", evidence)
    assert "Correct: aligned to the bottom right (50 visible pairs)" in html
    assert "Wrong: a top-left triangle (15 visible pairs)" in html
    assert "query 7 sees 8 keys" in html and "query 11 sees 12 keys" in html


def test_models_table_prices_real_models_with_the_labs_function(evidence: Evidence) -> None:
    html = render_view("models", evidence)
    assert "<td>Llama-3-8B</td><td>float16</td><td>131,072 (128 KiB)</td><td>1.0</td><td>16.0</td>" in html
    assert "none (weights 131 GiB)" in html  # Llama-3-70B's fp16 weights alone exceed 80 GiB
    assert "meta-llama/Meta-Llama-3-70B" in render_view("model-configs", evidence)  # the collapsed configurations


def test_calculator_ships_its_models_as_json_that_cannot_close_the_script(evidence: Evidence) -> None:
    html = render_view("calculator", evidence)
    data = re.search(r'<script type="application/json" class="lab-calculator-data">(.*?)</script>', html, re.S)
    assert data is not None and "<" not in data.group(1)
    assert '"Llama-3-70B"' in data.group(1) and '"q4_0": 4.5' in data.group(1) and '"q8_0": 8.5' in data.group(1)
    assert '"int4-g32": 6.0' in data.group(1) and "q8_0 (8.5 bits)" in html


def test_commands_view_gives_the_labs_own_commands(evidence: Evidence) -> None:
    html = render_view("commands", evidence)
    assert "make bench LAB=kv-cache" in html
    assert "labs/.venv/bin/python -m unittest discover -s labs/llm/kv-cache -p &#39;test_*.py&#39; -v" in html


def test_a_bar_chart_legend_of_more_than_one_line_sits_above_the_plot_not_off_the_top() -> None:
    import re

    from site_hooks.chart import BarGroup, bar_chart

    svg = bar_chart([BarGroup("a", [1.0, 2.0, 3.0, 4.0])], ["one", "two", "three", "four"], "t", "x", "d")
    legend_ys = [float(y) for y in re.findall(r'<g transform="translate\([\d.]+ ([\d.]+)\)">', svg)]
    bars_top = min(float(y) for y in re.findall(r'<rect x="[\d.]+" y="([\d.]+)"', svg) if float(y) >= 0)
    assert len(legend_ys) == 4
    assert min(legend_ys) >= 12, legend_ys  # the first line's text fits inside the image
    assert sorted(set(legend_ys)) == [20.0, 38.0]  # three entries per line, then a second line below
    assert max(legend_ys) < bars_top - 12, (legend_ys, bars_top)


def test_the_landing_pages_machines_say_one_machine_only_when_one_run_made_every_record(
        evidence: Evidence, storage_evidence: Evidence) -> None:
    from site_hooks.site_views import SITE_VIEWS, render_site_view

    evidences = {"kv-cache": evidence, "kv-storage": storage_evidence}
    run = {"id": "20260103T201500Z-3fa9c1", "started_utc": "2026-01-03T20:15:00Z", "labs": ["kv-cache", "kv-storage"],
           "reference": True}
    for e in evidences.values():
        e.record["environment"]["cpu"].update(model="AMD EPYC", logical_cores=2)
        e.record["environment"]["torch"]["threads"] = 1
        e.record["run"] = dict(run)
    evidence.record["wall_time_s"] = 95.4
    storage_evidence.record.pop("wall_time_s", None)
    block = SITE_VIEWS["machines"](evidences)
    assert block.paragraphs[0] == ("Every reference record on this site was measured in one run, "
                                   "20260103T201500Z-3fa9c1, started 2026-01-03, on one machine: AMD EPYC with "
                                   "2 logical cores, PyTorch at 1 thread.")
    assert block.items == []
    rows = {row[0]: row for row in block.tables[0].rows}
    assert rows[evidence.lab.title][-1] == "1 min 35 s" and rows[evidence.lab.title][2] == run["id"]
    assert rows[storage_evidence.lab.title][-1] == "not stored; time make bench LAB=kv-storage"
    storage_evidence.record["environment"]["torch"]["threads"] = 2  # a setting of the run, not another machine
    assert SITE_VIEWS["machines"](evidences).paragraphs[0].endswith("AMD EPYC with 2 logical cores, PyTorch at 1 and "
                                                                    "2 threads.")
    storage_evidence.record["run"].update(id="20260105T090000Z-0b1c2d", started_utc="2026-01-05T09:00:00Z")
    block = SITE_VIEWS["machines"](evidences)  # one CPU model, two runs: never "2 machines", never "one machine"
    assert block.paragraphs[0] == "The reference records were not measured in one run: they come from 2 runs, on 1 CPU model."
    assert block.items == [
        "Run 20260103T201500Z-3fa9c1, started 2026-01-03, on AMD EPYC with 2 logical cores, PyTorch at 1 thread: "
        "kv-cache.",
        "Run 20260105T090000Z-0b1c2d, started 2026-01-05, on AMD EPYC with 2 logical cores, PyTorch at 2 threads: "
        "kv-storage."]
    del storage_evidence.record["run"]  # a record made before records stored their run
    assert SITE_VIEWS["machines"](evidences).paragraphs[0] == (
        "The reference records were not measured in one run: they come from 1 run and 1 record that names no run, "
        "on 1 CPU model.")
    del evidence.record["run"]
    assert SITE_VIEWS["machines"](evidences).paragraphs[0].startswith("The reference records name no run")
    storage_evidence.record["environment"]["cpu"]["model"] = HOSTILE
    html = render_site_view("machines", evidences)
    assert "<script>" not in html and "on 2 CPU models" in html


def test_the_landing_pages_test_durations_come_from_the_reports(evidence: Evidence, storage_evidence: Evidence) -> None:
    from site_hooks.site_views import SITE_VIEWS

    storage_evidence = dataclasses.replace(storage_evidence, tests=dict(evidence.tests))  # a report of its own
    evidences = {"kv-cache": evidence, "kv-storage": storage_evidence}
    evidence.tests["seconds"] = 61.0
    assert SITE_VIEWS["tests"](evidences).paragraphs[0] == (
        "The test runs this build used took kv-cache 1 min 1 s on the machine that ran them (kv-storage: a report "
        "made before test runs were timed).")
    evidence.tests.pop("seconds")
    assert SITE_VIEWS["tests"](evidences).paragraphs[0] == "The test runs this build used do not say how long they took."


def test_a_blocks_sources_are_https_links_with_escaped_text() -> None:
    from site_hooks.blocks import Block, render_block

    html = render_block(Block(sources=[("<b>datasheet</b>", "https://example.com/a?b=1&c=2")]))
    assert '<a href="https://example.com/a?b=1&amp;c=2">&lt;b&gt;datasheet&lt;/b&gt;</a>' in html
    for url in ("javascript:alert(1)", "http://example.com", ""):
        with pytest.raises(ValueError, match="must link to an https:// page"):
            Block(sources=[("x", url)])


def test_the_environment_says_whether_huge_pages_were_asked_for_and_could_be_granted() -> None:
    from site_hooks.views import huge_pages_text

    asked = huge_pages_text({"torch_huge_pages": True, "transparent_huge_pages": "madvise"})
    assert asked == ("asked for by torch's allocator for every allocation of 2 MiB or more; the kernel's transparent "
                     "huge pages: madvise")
    assert huge_pages_text({"torch_huge_pages": True, "transparent_huge_pages": "never"}).endswith("(so none were granted)")
    assert huge_pages_text({"torch_huge_pages": False, "transparent_huge_pages": None}) == (
        "not asked for by torch's allocator; this kernel reports no transparent huge pages")
