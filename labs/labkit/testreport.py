"""Run a lab's unittest suite and write a JSON report: each test's name and outcome, and the versions.

    python -m labkit.testreport --start labs/llm/kv-cache --pattern 'test_*.py' --output report.json

The site build runs this in a subprocess and renders the report; the
process exits non-zero when any test failed or errored. ``--apart FILE`` (the lab.toml's ``tests.apart``) runs
those of the suite's files in a second process beside the rest, and the report holds both: a suite whose time is
mostly spent waiting (servers starting, streams answered) then takes its longest file's time instead of the sum.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import platform
import subprocess
import sys
import tempfile
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


def test_files(start: Path, pattern: str) -> list[str]:
    """The suite's test files (names in ``start``), as discovery would find them there."""
    return sorted(path.name for path in start.iterdir() if path.is_file() and fnmatch.fnmatch(path.name, pattern))


def load(start: Path, pattern: str, files: list[str]) -> unittest.TestSuite:
    """The tests of ``files`` (names matching ``pattern`` in ``start``), in name order, as discovery loads them."""
    loader = unittest.defaultTestLoader
    return unittest.TestSuite(loader.discover(str(start), pattern=name, top_level_dir=str(start)) for name in files)


def apart_entry(files: list[str], detail: str) -> dict[str, Any]:
    """The report's line for files run apart whose process gave no report: an error naming them."""
    name = ", ".join(files)
    return {"id": f"{name} (run apart)", "name": name, "group": "apart", "outcome": "error", "seconds": 0.0,
            "detail": detail}


def run(start: Path, pattern: str, apart: tuple[str, ...] = (), only: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the suite (``only``: just those files) and report it; ``apart`` files run in a child process of this
    module at the same time, their report merged into this one."""
    started, began = datetime.now(UTC), time.perf_counter()
    found = test_files(start, pattern)
    unknown = sorted(set(apart) - set(found)) or sorted(set(only) - set(found))
    if unknown:
        raise SystemExit(f"labkit.testreport: {', '.join(unknown)} named to run apart or alone is not a test file of "
                         f"{start.as_posix()} matching {pattern!r}")
    files = [name for name in found if name in only] if only else [name for name in found if name not in apart]
    with tempfile.TemporaryDirectory() as folder:
        child = None
        if apart:
            output, log = Path(folder) / "apart.json", Path(folder) / "apart.log"
            with log.open("w") as stream:
                child = subprocess.Popen([sys.executable, "-m", "labkit.testreport", "--start", str(start),
                                          "--pattern", pattern, "--only", *apart, "--output", str(output)],
                                         stdout=subprocess.DEVNULL, stderr=stream)
        try:
            runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=RecordingResult)
            result = runner.run(load(start, pattern, files))
            counts = {"ran": result.testsRun, "failed": len(result.failures), "errors": len(result.errors),
                      "skipped": len(result.skipped)}
            entries, successful = list(result.entries), result.wasSuccessful()
            if child is not None:
                code = child.wait()
                sys.stderr.write(log.read_text(encoding="utf-8", errors="replace"))
                if output.exists():
                    other = json.loads(output.read_text(encoding="utf-8"))
                    entries += other["tests"]
                    counts = {key: counts[key] + other[key] for key in counts}
                    successful = successful and other["successful"] and code in (0, 1)
                else:
                    last = (log.read_text(encoding="utf-8", errors="replace").strip().splitlines() or ["no output"])[-1]
                    entries.append(apart_entry(list(apart), f"exited {code} before reporting: {last}"))
                    counts["errors"] += 1
                    successful = False
        finally:
            if child is not None and child.poll() is None:  # this run failed or was interrupted: so does the child
                child.kill()
                child.wait()
    return {
        "started_utc": started.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "command": f"python -m unittest discover -s {start.as_posix()} -p '{pattern}' -v",
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "torch": version_of("torch"),
        "ran": counts["ran"],
        "passed": sum(entry["outcome"] == "passed" for entry in entries),
        **{key: counts[key] for key in ("failed", "errors", "skipped")},
        "successful": successful,
        "seconds": round(time.perf_counter() - began, 1),  # the whole run, discovery included
        "tests": entries,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", type=Path, required=True, help="folder to discover tests in")
    parser.add_argument("--pattern", default="test_*.py", help="test file pattern")
    parser.add_argument("--output", type=Path, required=True, help="JSON report to write")
    parser.add_argument("--apart", nargs="+", default=[], metavar="FILE",
                        help="test files run in a second process beside the rest, reported with them")
    parser.add_argument("--only", nargs="+", default=[], metavar="FILE", help="run just these test files")
    args = parser.parse_args(argv)
    if args.apart and args.only:
        parser.error("--apart and --only exclude each other")
    interrupt_by_default()  # the tests signal what they start
    report = run(args.start, args.pattern, tuple(args.apart), tuple(args.only))
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["successful"] else 1


if __name__ == "__main__":
    sys.exit(main())
