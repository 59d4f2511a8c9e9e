"""A record's fingerprint is computed from what its benchmark imports, on the code's syntax: a comment, a docstring,
a derivation, a view or a test never stales a record, and a changed constant or line stales exactly the records
whose benchmark imports it (labkit.closure, labkit.fingerprint)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labkit.closure import normalized_source
from labkit.fingerprint import lab_fingerprint, measured_files
from labkit.manifest import Lab, discover_labs

from conftest import ROOT

LAUNCHER = 'import sys\n\nfrom labkit.launch import launch\n\nsys.exit(launch("{package}.benchmark"))\n'
FILES = {
    # the repository's shared package, installed as the real one is (pyproject.toml's package-dir)
    "pyproject.toml": '[tool.setuptools]\npackages = ["shared"]\npackage-dir = { shared = "labs/shared" }\n',
    "labs/shared/__init__.py": "",
    "labs/shared/kernel.py": '"""A kernel both labs could use."""\n\nWIDTH = 4  # the width\n\n\ndef run(x):\n'
                             '    """Multiply."""\n    return x * WIDTH\n',
    # lab a: its mechanism uses the shared kernel; its entry derives figures and writes the record
    "labs/demo/a/lab.toml": 'name = "a"\ntitle = "a"\nrecord = "a.json"\nschema = "s.json"\n'
                            'tests = { start = "labs/demo/a", pattern = "test_*.py" }\n'
                            'benchmark = ["labs/demo/a/benchmark.py"]\nviews = "a_views"\n',
    "labs/demo/a/benchmark.py": LAUNCHER.format(package="alab"),
    "labs/demo/a/alab/__init__.py": "",
    "labs/demo/a/alab/benchmark.py": "from . import mechanism\nfrom .figures import derive\n\n\ndef main(argv=None):\n"
                                     "    return derive(mechanism.measure())\n",
    "labs/demo/a/alab/mechanism.py": "from shared import kernel\n\n\ndef measure():\n    return kernel.run(2)\n",
    "labs/demo/a/alab/figures.py": "def derive(raw):\n    return raw * 2\n",
    "labs/demo/a/alab/testing.py": "SEED = 1\n",
    "labs/demo/a/a_views.py": "VIEWS = {}\n",
    "labs/demo/a/test_a.py": "from alab import mechanism, testing\n",
    # lab b: its mechanism takes a constant from its figures module, which therefore counts
    "labs/demo/b/lab.toml": 'name = "b"\ntitle = "b"\nrecord = "b.json"\nschema = "s.json"\n'
                            'tests = { start = "labs/demo/b", pattern = "test_*.py" }\n'
                            'benchmark = ["labs/demo/b/benchmark.py"]\n',
    "labs/demo/b/benchmark.py": LAUNCHER.format(package="blab"),
    "labs/demo/b/blab/__init__.py": "",
    "labs/demo/b/blab/benchmark.py": "from .mechanism import measure\n",
    "labs/demo/b/blab/mechanism.py": "from .figures import SIZE\n\n\ndef measure():\n    return SIZE\n",
    "labs/demo/b/blab/figures.py": "SIZE = 16\n",
    "labs/demo/b/blab/table.toml": "rows = 3\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def digests(root: Path) -> dict[str, str]:
    return {lab.name: lab_fingerprint(lab, root)["digest"] for lab in discover_labs(root)}


def labs_staled_by(root: Path, name: str, old: str, new: str) -> list[str]:
    """The labs whose fingerprint one edit of file ``name`` changes."""
    before = digests(root)
    path = root / name
    text = path.read_text()
    assert old in text, (name, old)
    path.write_text(text.replace(old, new))
    after = digests(root)
    return sorted(lab for lab in before if before[lab] != after[lab])


def test_each_lab_measures_its_script_its_entry_its_mechanism_and_what_that_imports(repo: Path) -> None:
    a, b = discover_labs(repo)
    assert measured_files(a, repo) == ["labs/demo/a/alab/__init__.py", "labs/demo/a/alab/benchmark.py",
                                       "labs/demo/a/alab/mechanism.py", "labs/demo/a/benchmark.py",
                                       "labs/shared/__init__.py", "labs/shared/kernel.py"]
    assert measured_files(b, repo) == ["labs/demo/b/benchmark.py", "labs/demo/b/blab/__init__.py",
                                       "labs/demo/b/blab/benchmark.py", "labs/demo/b/blab/figures.py",
                                       "labs/demo/b/blab/mechanism.py", "labs/demo/b/blab/table.toml"]


@pytest.mark.parametrize(("name", "old", "new"), [
    ("labs/shared/kernel.py", "# the width", "# the number of lanes"),  # a comment
    ("labs/shared/kernel.py", '"""Multiply."""', '"""Multiply by the width."""'),  # a docstring
    ("labs/shared/kernel.py", "    return x * WIDTH\n", "    return (\n        x * WIDTH\n    )\n"),  # formatting
    ("labs/demo/a/alab/figures.py", "raw * 2", "raw * 3"),  # a derivation the entry takes
    ("labs/demo/a/a_views.py", "{}", "{'x': None}"),  # a view
    ("labs/demo/a/test_a.py", "testing", "testing  # noqa"),  # a test
    ("labs/demo/a/alab/testing.py", "SEED = 1", "SEED = 2"),  # a test helper
], ids=["comment", "docstring", "formatting", "derivation", "view", "test", "test-helper"])
def test_an_edit_that_measures_nothing_differently_leaves_every_record_fresh(repo: Path, name: str, old: str,
                                                                             new: str) -> None:
    assert labs_staled_by(repo, name, old, new) == []


@pytest.mark.parametrize(("name", "old", "new", "staled"), [
    ("labs/shared/kernel.py", "WIDTH = 4", "WIDTH = 8", ["a"]),  # a constant only lab a's benchmark imports
    ("labs/demo/a/alab/mechanism.py", "kernel.run(2)", "kernel.run(3)", ["a"]),  # a line of a measured function
    ("labs/demo/b/blab/figures.py", "SIZE = 16", "SIZE = 32", ["b"]),  # a constant a mechanism takes from figures
    ("labs/demo/b/blab/table.toml", "rows = 3", "rows = 4", ["b"]),  # a data file beside measured code
], ids=["shared-constant", "measured-line", "figures-constant-a-mechanism-uses", "data-file"])
def test_a_change_to_measured_code_stales_exactly_the_labs_whose_benchmark_imports_it(
        repo: Path, name: str, old: str, new: str, staled: list[str]) -> None:
    assert labs_staled_by(repo, name, old, new) == staled


def test_a_comment_or_docstring_edit_in_the_harness_leaves_its_syntax_and_every_lab_fresh(tmp_path: Path) -> None:
    harness = ROOT / "labs" / "labkit" / "harness.py"
    edited = tmp_path / "harness.py"
    shutil.copy(harness, edited)
    text = edited.read_text()
    edited.write_text(text.replace('"""', '"""Reworded. ', 1) + "\n# a comment at the end\n")
    assert normalized_source(edited) == normalized_source(harness)
    edited.write_text(text + "\nEXTRA = 1\n")
    assert normalized_source(edited) != normalized_source(harness)
    labs: list[Lab] = discover_labs(ROOT)
    assert all("labs/labkit/harness.py" in measured_files(lab, ROOT) for lab in labs)  # code there stales each


def test_a_figure_added_to_a_figures_module_is_derived_when_the_record_is_read_without_a_benchmark_run() -> None:
    """The committed record stores no such figure: the check derives it and fills the record the views read, while
    a stored figure that disagrees with its derivation is still refused by its path."""
    import importlib
    import json

    from labkit.figures import Figures, check_record
    from labkit.records import RecordError
    from labkit.summary import with_figures

    lab = next(lab for lab in discover_labs(ROOT) if lab.name == "kv-cache")
    figures = importlib.import_module(lab.figures)
    record = with_figures(json.loads((ROOT / lab.record).read_text(encoding="utf-8")), None)  # the sweep's, as the build

    def derive_one_more(raw: dict) -> Figures:
        derived = figures.derive(raw)
        derived.add(("config", "benchmark", "lengths_count"), len(raw["config"]["benchmark"]["lengths"]),
                    "the number of lengths")
        return derived

    check_record(record, "cache-results.json", figures.check_invariants, derive_one_more)
    assert record["config"]["benchmark"]["lengths_count"] == len(record["config"]["benchmark"]["lengths"])
    record["config"]["benchmark"]["lengths_count"] += 1  # now stored, and wrong
    with pytest.raises(RecordError, match=r"\$\.config\.benchmark\.lengths_count is"):
        check_record(record, "cache-results.json", figures.check_invariants, derive_one_more)


def test_every_committed_record_stores_what_was_measured_and_no_figure_that_follows_from_it() -> None:
    from labkit.figures import stored_value
    from labkit.records import load_record
    from labkit.summary import sweep_figures, with_figures
    from site_hooks.labviews import lab_module

    for lab in discover_labs(ROOT):
        raw = load_record(ROOT / lab.record, ROOT / lab.schema)
        derived = [*(sweep_figures(raw) if "lengths" in raw else []),
                   *lab_module(lab, lab.figures).derive(with_figures(raw, None))]  # a lab's on the sweep's
        assert len(derived) > 10, lab.name  # it has figures, all derived when read
        assert [f.path for f in derived if stored_value(raw, f.path)[0]] == [], lab.name
