"""Adding a lab touches only its own folder, its record's schema, its page and the nav: CONTRIBUTING.md's
"Add a lab" steps, done here for a throwaway lab whose record is not a timing sweep."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from labkit.waiting import run

from conftest import ROOT, build_env
from test_layout import duplicated_names, loose_modules

LAB_TOML = '''name = "toy-lab"
title = "A throwaway lab"
record = "results/toy-results.json"
schema = "results/toy-results.schema.json"
tests = { start = "labs/demo/toy-lab", pattern = "test_*.py" }
benchmark = ["labs/demo/toy-lab/benchmark.py", "--output", "{record}"]
figures = "toy.figures"
views = "toy_views"
'''
PACKAGE = '''"""The toy lab: its package is torch-free at import, as every lab's is."""
'''
ANSWER = '''def answer(seed: int) -> int:
    return 40 + seed
'''
FIGURES = '''"""The toy record's derived figure and invariant (torch-free: the site build imports this module)."""
from labkit.figures import Figures, refuse


def check_invariants(record, source):
    if record["answer"] != 42:
        refuse(source, ("answer",), f"is {record['answer']}, not 42")


def derive(record):
    figures = Figures()
    figures.add(("answer_squared",), record["answer"] ** 2, "the square of $.answer")
    return figures
'''
BENCHMARK_MODULE = '''"""Measures nothing but the answer."""
from labkit import harness
from labkit.manifest import lab_for

from .answer import answer
from .figures import derive

LAB, ROOT = lab_for(__file__)


def main(argv=None) -> int:
    args = harness.parse(harness.parser(__doc__), argv, {"repeats": 1}, {})
    return harness.run(LAB, ROOT, args, argv, lambda: {"answer": answer(args.seed + 2)},
                       lambda record: [f"the answer is {record['answer']}, squared {record['answer_squared']}"],
                       derive)
'''
LAUNCHER = '''import sys

from labkit.launch import launch

sys.exit(launch("toy.benchmark"))
'''
TEST = '''import unittest

from toy.answer import answer


class Answer(unittest.TestCase):
    def test_the_answer_follows_from_the_seed(self) -> None:
        self.assertEqual(answer(2), 42)
'''
VIEWS = '''from site_hooks.blocks import Block
from toy.figures import derive  # noqa: F401  (a views module may import its lab's figures module)


def answer_view(record):
    return Block(css="toy-answer", paragraphs=[f"The answer is {record['answer']}, squared {record['answer_squared']}."])


VIEWS = {"answer": answer_view}
'''
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "toy-results.schema.json",
    "type": "object", "allOf": [{"$ref": "record-common.schema.json#/$defs/header"}],
    "required": ["answer"],  # answer_squared is derived when the record is read: optional, checked where stored
    "properties": {"answer": {"type": "integer"}, "answer_squared": {"type": "integer"}},
}
PAGE = "# Toy\n\n{{ lab:toy-lab:answer }}\n\n{{ lab:toy-lab:environment }}\n\n{{ lab:toy-lab:provenance }}\n"


THROWAWAY = ("labs/demo/toy-lab", "results/toy-results.json", "results/toy-results.schema.json", "docs/toy.md")


def add_lab(root: Path) -> None:
    """Steps 1-5 of CONTRIBUTING.md's "Add a lab"."""
    lab = root / "labs" / "demo" / "toy-lab"
    (lab / "toy").mkdir(parents=True)
    files = {
        lab / "lab.toml": LAB_TOML, lab / "toy" / "__init__.py": PACKAGE, lab / "toy" / "answer.py": ANSWER,
        lab / "toy" / "figures.py": FIGURES, lab / "toy" / "benchmark.py": BENCHMARK_MODULE,
        lab / "benchmark.py": LAUNCHER, lab / "test_toy_answer.py": TEST, lab / "toy_views.py": VIEWS,
        root / "results" / "toy-results.schema.json": json.dumps(SCHEMA),
        root / "docs" / "toy.md": PAGE,
    }
    for path, text in files.items():
        path.write_text(text)


def site_with_new_lab(root: Path) -> None:
    """A site of its own (its mkdocs.yml uses this repository's hook), with the throwaway lab added."""
    (root / "results").mkdir()
    shutil.copy(ROOT / "results" / "record-common.schema.json", root / "results")
    (root / "docs").mkdir()
    (root / "mkdocs.yml").write_text(
        f"site_name: toy\ntheme:\n  name: material\n  font: false\nnav:\n  - Toy: toy.md\n"
        f"hooks:\n  - {ROOT / 'site_hooks' / 'hooks.py'}\n")
    add_lab(root)


def measure(root: Path) -> subprocess.CompletedProcess[str]:
    """The throwaway lab's benchmark, writing its reference record, as the build would. --quick: a reference record
    from a run under load is refused (labkit.writing), a smoke test's never, and these tests pass on a machine as
    busy as the suite makes it."""
    return run([sys.executable, "labs/demo/toy-lab/benchmark.py", "--output", "results/toy-results.json", "--quick"],
               "the throwaway lab's benchmark", cwd=root, env=build_env(), capture_output=True, text=True)


def test_a_lab_that_is_not_a_timing_sweep_builds_with_its_own_view_and_nothing_else_edited(tmp_path: Path) -> None:
    site_with_new_lab(tmp_path)
    measured = measure(tmp_path)
    assert measured.returncode == 0 and "benchmark: the answer is 42, squared 1764" in measured.stderr, measured.stderr
    finished = run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", "site"],
                   "the build with the throwaway lab", cwd=tmp_path, env=build_env(LAB_BENCH="never"),
                   capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "lab toy-lab: 1 of 1 tests passed" in finished.stderr
    record = json.loads((tmp_path / "results" / "toy-results.json").read_text())
    assert record["lab"] == "toy-lab" and record["command"] == "python labs/demo/toy-lab/benchmark.py --output results/toy-results.json --quick"
    html = (tmp_path / "site" / "toy" / "index.html").read_text()
    assert '<div class="lab-view toy-answer">\n<p class="lab-generated">The answer is 42, squared 1764.</p>\n</div>' in html
    assert "lab-environment" in html and "lab-provenance" in html
    assert (tmp_path / "site" / "results" / "toy-results.json").read_text() == json.dumps(record, indent=2) + "\n"
    # Nothing of the throwaway lab reached the repository (labs/demo/ itself may hold a real lab).
    assert not [path for path in THROWAWAY if (ROOT / path).exists()]
    assert duplicated_names(tmp_path) == [] and loose_modules(tmp_path) == []  # the repository's layout rules hold
    # The record stores what was measured; its figure is derived when read, and one written into it by hand is
    # checked by the build against the same derivation.
    assert "answer_squared" not in record
    edited = tmp_path / "results" / "toy-results.json"
    edited.write_text(json.dumps(record | {"answer_squared": 1765}, indent=2))
    refused = run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", "site"],
                  "the build to refuse the edited figure", cwd=tmp_path, env=build_env(LAB_BENCH="never"),
                  capture_output=True, text=True)
    assert refused.returncode != 0
    assert ("results/toy-results.json: field $.answer_squared is 1765, but the square of $.answer gives 1764"
            in refused.stderr), refused.stderr[-2000:]


def test_a_failing_view_is_one_line_and_its_traceback_shows_with_verbose(tmp_path: Path) -> None:
    site_with_new_lab(tmp_path)
    views = tmp_path / "labs" / "demo" / "toy-lab" / "toy_views.py"
    views.write_text(views.read_text().replace("record['answer']}", "record['no-such-field']}"))
    assert measure(tmp_path).returncode == 0  # the build reuses it (it would measure a missing one, without --quick)

    def build(*flags: str) -> subprocess.CompletedProcess[str]:
        return run([sys.executable, "-m", "mkdocs", "build", "--strict", *flags, "--site-dir", "site"],
                   "the build with the failing view", cwd=tmp_path, env=build_env(), capture_output=True, text=True)

    quiet = build()
    assert quiet.returncode != 0
    assert "docs/toy.md: cannot render from the record: KeyError: 'no-such-field'" in quiet.stderr
    assert "Traceback" not in quiet.stderr
    verbose = build("-v")
    assert "Traceback" in verbose.stderr and "toy_views.py" in verbose.stderr
