"""Run a lab's unittest suite and write a JSON report: each test's name and outcome, and the versions.

    python -m labkit.testreport --start labs/llm/kv-cache --pattern 'test_*.py' --output report.json

The site build runs this in a subprocess and renders the report; the
process exits non-zero when any test failed or errored.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import unittest
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from labkit.waiting import interrupt_by_default


class RecordingResult(unittest.TextTestResult):
    """A verbose text result that also keeps one entry per test, in the order they ran."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries: list[dict[str, Any]] = []
        self._started = 0.0

    def startTest(self, test: unittest.TestCase) -> None:
        self._started = time.perf_counter()
        super().startTest(test)

    def _add(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        test_id = test.id()
        module, _, name = test_id.split(" ")[0].rpartition(".")
        name += test_id[len(module) + 1 + len(name):]  # keep a subtest's parameters
        self.entries.append({
            "id": test_id,
            "name": name,
            "group": module,
            "outcome": outcome,
            "seconds": round(time.perf_counter() - self._started, 4),
            "detail": detail.strip().splitlines()[-1] if detail.strip() else "",
        })

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._add(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._add(test, "failed", self.failures[-1][1])

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._add(test, "error", self.errors[-1][1])

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:  # a failing subtest fails its test, which then gets no addSuccess
            failed = issubclass(err[0], test.failureException)
            self._add(subtest, "failed" if failed else "error", (self.failures if failed else self.errors)[-1][1])

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._add(test, "skipped", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._add(test, "expected failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._add(test, "unexpected success")


def version_of(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def run(start: Path, pattern: str) -> dict[str, Any]:
    started, began = datetime.now(UTC), time.perf_counter()
    suite = unittest.defaultTestLoader.discover(str(start), pattern=pattern, top_level_dir=str(start))
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=RecordingResult)
    result = runner.run(suite)
    entries = result.entries
    passed = sum(entry["outcome"] == "passed" for entry in entries)
    return {
        "started_utc": started.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "command": f"python -m unittest discover -s {start.as_posix()} -p '{pattern}' -v",
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "torch": version_of("torch"),
        "ran": result.testsRun,
        "passed": passed,
        "failed": len(result.failures),
        "errors": len(result.errors),
        "skipped": len(result.skipped),
        "successful": result.wasSuccessful(),
        "seconds": round(time.perf_counter() - began, 1),  # the whole run, discovery included
        "tests": entries,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", type=Path, required=True, help="folder to discover tests in")
    parser.add_argument("--pattern", default="test_*.py", help="test file pattern")
    parser.add_argument("--output", type=Path, required=True, help="JSON report to write")
    args = parser.parse_args(argv)
    interrupt_by_default()  # the tests signal what they start
    report = run(args.start, args.pattern)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["successful"] else 1


if __name__ == "__main__":
    sys.exit(main())
