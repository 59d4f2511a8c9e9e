"""Whole builds: the real site in strict mode, and throwaway sites that must fail cleanly."""

from __future__ import annotations

import dataclasses
import html as html_lib
import json
import re
from pathlib import Path

from labkit.testing import committed_record
from site_hooks.formatting import format_ms
from site_hooks.orchestrate import longest_first

from conftest import LAB, ROOT, ToySite


def article(built_site: tuple[Path, str]) -> str:
    return (built_site[0] / "llm" / "kv-cache" / "index.html").read_text(encoding="utf-8")


def test_real_site_builds_strictly_without_warnings(built_site: tuple[Path, str]) -> None:
    _, log = built_site
    assert "WARNING" not in log and "ERROR" not in log, log
    assert "MkDocs 2.0" not in log


def test_article_shows_environment_raw_repetitions_medians_and_chart_from_the_record(
    built_site: tuple[Path, str],
) -> None:
    html = article(built_site)
    record = committed_record(ROOT / LAB.folder / "lab.toml")  # its figures derived, as the build read it
    for css in ("lab-environment", "lab-raw", "lab-medians", "lab-chart", "lab-tests", "lab-provenance",
                "lab-findings", "lab-equivalence", "lab-cache-bytes", "lab-config"):
        assert f'class="lab-view {css}' in html, css
    assert record["environment"]["cpu"]["model"] in html
    assert f"PyTorch {record['environment']['torch']['version']}" in html
    last = record["lengths"][-1]
    assert format_ms(last["modes"]["cached"]["median_ns"]) in html
    assert format_ms(last["modes"]["full"]["durations_ns"][-1]) in html
    assert "<svg" in html and "{{ lab:" not in html


def test_the_404_page_links_relative_to_the_site_so_it_works_opened_from_disk(built_site: tuple[Path, str]) -> None:
    """MkDocs gives an error page root-absolute links ('/assets/...'); the hook makes them relative, and each one
    reaches a file of the built site."""
    site = built_site[0]
    page = (site / "404.html").read_text(encoding="utf-8")
    links = re.findall(r'(?:href|src)="([^"]*)"', page)
    assert links, "404.html links nothing: not the theme's page"
    absolute = [link for link in links if link.startswith("/")]
    assert absolute == [], absolute
    local = [link.split("#")[0].split("?")[0] for link in links if not re.match(r"[a-z][a-z0-9+.-]*:|#", link)]
    assert any(link.endswith(".css") for link in local) and any(link.endswith(".js") for link in local), local
    for link in filter(None, local):
        target = (site / link).resolve()
        assert (target / "index.html" if target.is_dir() else target).is_file(), link


def test_article_includes_the_real_forward_source(built_site: tuple[Path, str]) -> None:
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", article(built_site)))
    source = (Path(__file__).parents[1] / "labs/llm/llm_models/toy/model.py").read_text()
    start = source.index("    def forward")
    body = source[start:source.index("# --8<-- [end:forward]")]
    for line in body.splitlines():
        assert line.strip() in text, f"line of forward() missing from the page: {line!r}"
    assert "--8<--" not in text


def test_failing_lab_test_fails_the_build_naming_the_test(toy_site: ToySite) -> None:
    toy_site.write_fresh_record()
    toy_site.set_tests(
        "import unittest\nclass T(unittest.TestCase):\n"
        "    def test_cached_logits_match(self):\n        self.assertEqual(1, 2)\n"
    )
    finished = toy_site.build()
    assert finished.returncode != 0
    assert "lab toy: 1 failing of 1 tests: test_toy.T.test_cached_logits_match (failed: AssertionError: 1 != 2)" in finished.stderr
    assert "Traceback" not in finished.stderr


def test_unknown_placeholder_fails_the_build_naming_page_and_line(toy_site: ToySite) -> None:
    toy_site.write_fresh_record()
    toy_site.set_page("# Toy\n\n{{ lab:toy:medains }}\n")
    finished = toy_site.build()
    assert finished.returncode != 0
    assert "docs/index.md:3: placeholder '{{ lab:toy:medains }}' names unknown view 'medains'" in finished.stderr
    assert "Traceback" not in finished.stderr


def test_schema_invalid_record_fails_the_build_naming_file_and_field(toy_site: ToySite) -> None:
    record = toy_site.write_fresh_record()
    record["lengths"][0]["order"] = "alternating"
    toy_site.record_path.write_text(json.dumps(record))
    finished = toy_site.build(LAB_BENCH="never")
    assert finished.returncode != 0
    assert re.search(r"results/toy\.json: field \$\.lengths\[0\]\.order is invalid", finished.stderr)
    assert "Traceback" not in finished.stderr


def test_missing_record_is_measured_in_auto_mode_and_the_page_renders(toy_site: ToySite) -> None:
    finished = toy_site.build()
    assert finished.returncode == 0, finished.stderr
    assert "lab toy: benchmark: measuring the toy lab" in finished.stderr
    assert toy_site.record_path.exists()
    assert "lab-medians" in (toy_site.root / "site" / "index.html").read_text()
    assert not list((toy_site.root / "docs").rglob("*.json")), "the build wrote into docs/"


def test_second_build_reuses_the_test_report_when_nothing_changed(toy_site: ToySite) -> None:
    toy_site.write_fresh_record()
    assert toy_site.build().returncode == 0
    again = toy_site.build()
    assert "sources unchanged since the tests passed" in again.stderr
    toy_site.set_tests("import unittest\nclass T(unittest.TestCase):\n    def test_new(self):\n        pass\n")
    assert "running its tests" in toy_site.build().stderr


def test_a_report_is_not_cached_when_the_labs_files_change_while_its_tests_run(toy_site: ToySite) -> None:
    toy_site.write_fresh_record()
    toy_site.set_tests("import pathlib, unittest\nclass T(unittest.TestCase):\n    def test_edits(self):\n"
                       "        pathlib.Path('labs/demo/toy/notes.txt').write_text(str(__import__('time').time()))\n")
    first = toy_site.build()
    assert first.returncode == 0, first.stderr[-2000:]
    assert "changed while its tests ran; their report is used once, not cached" in first.stderr
    assert not list((toy_site.root / ".cache" / "site_hooks").glob("tests-toy-*.json"))


def test_a_report_is_keyed_on_the_environment_variables_tests_read(toy_site: ToySite) -> None:
    toy_site.write_fresh_record()
    assert toy_site.build().returncode == 0
    assert "sources unchanged since the tests passed" in toy_site.build().stderr
    assert "running its tests" in toy_site.build(LAB_WEIGHTS_CACHE=str(toy_site.root / "elsewhere")).stderr
    # LAB_BENCH steers the build's benchmarks, not the tests: make site sets it, make test then reuses the report;
    # torch's inductor sets TORCHINDUCTOR_CACHE_DIR in a process that imports it (pytest's), which changes nothing
    assert "sources unchanged since the tests passed" in toy_site.build(
        LAB_WEIGHTS_CACHE=str(toy_site.root / "elsewhere"), LAB_BENCH="never",
        TORCHINDUCTOR_CACHE_DIR=str(toy_site.root / "inductor")).stderr


def test_record_text_reaches_the_page_as_inert_escaped_text(toy_site: ToySite) -> None:
    """Markdown never sees a view's HTML: a fence, an attribute list or an include stay literal text."""
    hostile = "```python\nimport os\n``` {: #evil data-x=1 } --8<-- \"/etc/passwd\" *em*"
    record = toy_site.write_fresh_record()
    record["environment"]["cpu"]["model"] = hostile
    toy_site.record_path.write_text(json.dumps(record))
    toy_site.set_page("# Toy\n\n{{ lab:toy:environment }}\n")
    finished = toy_site.build(LAB_BENCH="never")
    assert finished.returncode == 0, finished.stderr
    html = (toy_site.root / "site" / "index.html").read_text()
    cell = re.search(r"<td>CPU</td><td>(.*?)</td>", html, re.S)
    assert cell is not None and html_lib.unescape(cell.group(1)) == hostile
    assert 'id="evil"' not in html and "data-x" not in html.replace("data-x=1", "") and "<em>em</em>" not in html


def test_a_placeholder_inside_a_collapsed_appendix_is_rendered_there(toy_site: ToySite) -> None:
    toy_site.write_fresh_record()
    toy_site.set_page('# Toy\n\n??? note "Reproduce: settings"\n    Before.\n\n    {{ lab:toy:config }}\n\n'
                      '    {{ lab:toy:commands }}\n\nAfter.\n')
    (toy_site.root / "mkdocs.yml").write_text((toy_site.root / "mkdocs.yml").read_text()
                                               + "markdown_extensions:\n  - admonition\n  - pymdownx.details\n")
    finished = toy_site.build()
    assert finished.returncode == 0, finished.stderr[-2000:]
    html = (toy_site.root / "site" / "index.html").read_text(encoding="utf-8")
    details = html[html.index("<details"):html.index("</details>")]
    assert 'class="lab-view lab-config' in details and 'class="lab-view lab-commands' in details
    assert "LABVIEW" not in html and "<p><div" not in html


def test_lab_suites_start_longest_first_so_the_longest_never_runs_on_alone_at_the_end(tmp_path: Path) -> None:
    labs = []
    for name, size in (("short", 10), ("long", 1000), ("middle", 100)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "test_x.py").write_text("#" * size)
        labs.append(dataclasses.replace(LAB, name=name, tests=(name, "test_*.py")))
    assert [lab.name for lab in longest_first(labs, tmp_path)] == ["long", "middle", "short"]
