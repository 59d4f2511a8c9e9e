"""Fixtures for the site tests: records to render, throwaway sites, and one real strict build."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from labkit.fingerprint import lab_fingerprint
from labkit.manifest import discover_labs, load_lab
from labkit.testing import committed_record
from labkit.waiting import HANG_S, interrupt_by_default, run
from site_hooks.evidence import Evidence
from site_hooks.machine import recording_machine
from site_hooks.orchestrate import TEST_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "results" / "cache-results.json"
SCHEMA = ROOT / "results" / "cache-results.schema.json"
LAB = load_lab(ROOT / "labs" / "llm" / "kv-cache" / "lab.toml", ROOT)
STORAGE_LAB = load_lab(ROOT / "labs" / "llm" / "kv-storage" / "lab.toml", ROOT)
OUTPUT = ROOT / "test-output"


def build_env(**extra: str) -> dict[str, str]:
    """The caller's environment without the variables that steer a build (a LAB_BENCH exported in the
    shell must not decide what a test measures, nor a LABKIT_RUN which run a test's record belongs to), plus
    ``extra``."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("LAB_BENCH", "LABKIT_RUN")}
    return inherited | {"NO_MKDOCS_2_WARNING": "1", "PYTHONDONTWRITEBYTECODE": "1"} | extra


@pytest.fixture
def record() -> dict[str, Any]:
    """The committed record as the views read it (its figures derived), a fresh copy free to edit."""
    return committed_record(ROOT / LAB.folder / "lab.toml")


@pytest.fixture
def test_report() -> dict[str, Any]:
    return {
        "started_utc": "2026-01-01T00:00:00Z", "command": "python -m unittest discover -s x -p 'test_*.py' -v",
        "python": "3.11.7", "python_implementation": "CPython", "torch": "2.13.0+cpu",
        "ran": 2, "passed": 2, "failed": 0, "errors": 0, "skipped": 0, "successful": True,
        "tests": [
            {"id": "test_a.A.test_one", "name": "test_one", "group": "test_a.A", "outcome": "passed",
             "seconds": 0.01, "detail": ""},
            {"id": "test_a.A.test_two", "name": "test_two", "group": "test_a.A", "outcome": "passed",
             "seconds": 0.02, "detail": ""},
        ],
    }


def same_machine(record: dict[str, Any]) -> dict[str, Any]:
    """A build machine identical to the record's: no test reads the real host."""
    return recording_machine(record)


@pytest.fixture
def evidence(record: dict[str, Any], test_report: dict[str, Any]) -> Evidence:
    return Evidence(lab=LAB, record=record, tests=test_report, measured_now=False,
                    build_machine=same_machine(record), record_url="../../results/cache-results.json")


@pytest.fixture
def storage_evidence(test_report: dict[str, Any]) -> Evidence:
    record = committed_record(ROOT / STORAGE_LAB.folder / "lab.toml")
    return Evidence(lab=STORAGE_LAB, record=record, tests=test_report, measured_now=False,
                    build_machine=same_machine(record))


FAKE_BENCHMARK = '''
"""Stands in for a real benchmark: copies the template record, stamped with the current fingerprint."""
import json, sys
from pathlib import Path
from labkit.fingerprint import lab_fingerprint
from labkit.manifest import discover_labs, load_lab
from labkit.records import atomic_write_json
sys.path.insert(0, "labs/demo/toy")
import toy  # what this benchmark measures with: its fingerprint covers it
record = json.loads(Path("template.json").read_text())
record["fingerprint"] = lab_fingerprint(load_lab(Path("labs/demo/toy/lab.toml"), Path(".")), Path("."))
print("benchmark: measuring the toy lab", file=sys.stderr)
atomic_write_json(Path(sys.argv[1]), record)
'''

PAGE = """# Toy

{{ lab:toy:findings }}

{{ lab:toy:medians }}
"""


class ToySite:
    """A complete throwaway MkDocs project using the real hook, with one tiny lab and no torch work."""

    def __init__(self, root: Path, template: dict[str, Any]) -> None:
        self.root = root
        lab = root / "labs" / "demo" / "toy"
        lab.mkdir(parents=True)
        (lab / "lab.toml").write_text(
            'name = "toy"\ntitle = "Toy"\nrecord = "results/toy.json"\nschema = "results/toy.schema.json"\n'
            'tests = { start = "labs/demo/toy", pattern = "test_*.py" }\n'
            'benchmark = ["bench.py", "{record}"]\n'
        )
        (lab / "toy.py").write_text("VALUE = 1\n")
        self.set_tests("import unittest\nclass T(unittest.TestCase):\n    def test_holds(self):\n        self.assertTrue(True)\n")
        (root / "results").mkdir()
        shutil.copy(SCHEMA, root / "results" / "toy.schema.json")
        shutil.copy(SCHEMA.with_name("record-common.schema.json"), root / "results")
        template = copy.deepcopy(template)
        template["lab"] = "toy"
        (root / "template.json").write_text(json.dumps(template))
        (root / "bench.py").write_text(FAKE_BENCHMARK)
        (root / "docs").mkdir()
        self.set_page(PAGE)
        (root / "mkdocs.yml").write_text(
            f"site_name: toy\ntheme:\n  name: material\n  font: false\nhooks:\n  - {ROOT / 'site_hooks' / 'hooks.py'}\n"
        )

    @property
    def record_path(self) -> Path:
        return self.root / "results" / "toy.json"

    def set_tests(self, source: str) -> None:
        (self.root / "labs" / "demo" / "toy" / "test_toy.py").write_text(source)

    def set_page(self, markdown: str) -> None:
        (self.root / "docs" / "index.md").write_text(markdown)

    def write_fresh_record(self, **changes: Any) -> dict[str, Any]:
        record = json.loads((self.root / "template.json").read_text())
        record["fingerprint"] = lab_fingerprint(discover_labs(self.root)[0], self.root)
        record.update(changes)
        self.record_path.write_text(json.dumps(record))
        return record

    def build(self, **env: str) -> subprocess.CompletedProcess[str]:
        return run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(self.root / "site")],
                   "the toy site's build", cwd=self.root, env=build_env(**env), capture_output=True, text=True)


@pytest.fixture
def toy_site(tmp_path: Path, record: dict[str, Any]) -> ToySite:
    return ToySite(tmp_path, record)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The real site, built once in strict mode from the committed record (LAB_BENCH=never)."""
    site = tmp_path_factory.mktemp("site")
    # The build runs every lab's suite first: about a minute and a half quiet, many times that on a machine
    # busy with other work. The bound is for a hang (orchestrate's per-suite bound, plus the pages).
    finished = run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                   "the real site's build", TEST_TIMEOUT_S + HANG_S, cwd=ROOT, env=build_env(LAB_BENCH="never"),
                   capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return site, finished.stderr


def pytest_configure(config: pytest.Config) -> None:
    interrupt_by_default()  # the tests signal what they start (make bench, servers, benchmarks)
