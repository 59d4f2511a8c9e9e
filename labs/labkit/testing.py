"""Helpers for labs' tests of their own benchmarks."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import shutil
import tempfile
import unittest
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .figures import Derive, stored_value
from .manifest import Lab, lab_for
from .records import load_record
from .summary import derived_figures, with_figures


def lab_derive(lab: Lab) -> Derive | None:
    """The derive of ``lab``'s figures module (its lab.toml's ``figures``), if it has one."""
    return getattr(importlib.import_module(lab.figures), "derive", None) if lab.figures else None


def committed_record(source: str | Path) -> dict[str, Any]:
    """The reference record of the lab ``source`` (a test file) belongs to, as its views read it."""
    lab, root = lab_for(source)
    return with_figures(load_record(root / lab.record, root / lab.schema), lab_derive(lab))


def run_quietly(main: Callable[..., int], argv: list[str], **kwargs: object) -> tuple[int, str]:
    """Call a benchmark's main(argv), capturing its progress lines: (exit code, stderr text)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = main(argv, **kwargs)
    return code, stderr.getvalue()


@dataclass(frozen=True)
class QuickRunResult:
    code: int
    log: str
    record: Path | None  # None when the run wrote nothing


# A deliberate cache: one quick run per benchmark entry point and process, however many test classes read it
# (a lab's suite runs in one process; the quick runs are most of its time). The folder lives as long as the process.
_QUICK_RUNS: dict[tuple[Callable[..., int], str], QuickRunResult] = {}
_QUICK_FOLDER: list[tempfile.TemporaryDirectory[str]] = []


def quick_run(main: Callable[..., int], *arguments: str, **kwargs: Any) -> QuickRunResult:
    """The result of ``main(["--quick", "--output", <file>, *arguments], **kwargs)``, run once per process, arguments
    and kwargs (a test that fixes what a timing would choose passes it here: the probe timings a benchmark takes
    instead; ``arguments`` narrow a run whose record a test reads for one thing only)."""
    key = (main, repr((arguments, sorted(kwargs.items()))))
    if key not in _QUICK_RUNS:
        if not _QUICK_FOLDER:
            _QUICK_FOLDER.append(tempfile.TemporaryDirectory(prefix="quick-runs-"))
        path = Path(_QUICK_FOLDER[0].name) / f"run-{len(_QUICK_RUNS)}" / "record.json"
        path.parent.mkdir()
        code, log = run_quietly(main, ["--quick", "--output", str(path), *arguments], **kwargs)
        _QUICK_RUNS[key] = QuickRunResult(code, log, path if path.exists() else None)
    return _QUICK_RUNS[key]


class QuickBenchmarkRun(unittest.TestCase):
    """A benchmark's --quick record, measured once per process (quick_run) and copied into this test class's own
    temporary folder; subclasses set ``main`` (the benchmark's entry point, wrapped in staticmethod), ``schema``
    and, where a timing would choose a branch, ``main_kwargs`` that fix the choice."""

    main: Callable[..., int]
    schema: Path
    main_arguments: tuple[str, ...] = ()
    main_kwargs: dict[str, Any] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls.folder = tempfile.TemporaryDirectory()
        cls.path = Path(cls.folder.name) / "record.json"
        result = quick_run(cls.main, *cls.main_arguments, **cls.main_kwargs)
        cls.code, cls.log = result.code, result.log
        if result.record is not None:
            shutil.copyfile(result.record, cls.path)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.folder.cleanup()

    @property
    def record(self) -> dict[str, Any]:
        """The quick record as the views read it: what was measured, with every figure derived from it."""
        self.assertEqual(self.code, 0, f"the quick benchmark run failed:\n{self.log}")
        lab, _ = lab_for(inspect.getsourcefile(self.main) or "")
        return with_figures(load_record(self.path, self.schema), lab_derive(lab))

    def __init_subclass__(cls, **options: Any) -> None:
        # NOTE: given to each subclass, not defined on this class: a test module that imports QuickBenchmarkRun
        # would otherwise have unittest collect it, and run its test with no benchmark to run
        super().__init_subclass__(**options)
        cls.test_the_written_record_stores_what_was_measured_and_no_figure_that_follows_from_it = (  # type: ignore[attr-defined]
            QuickBenchmarkRun.stores_only_what_was_measured)
        cls.test_the_written_record_holds_the_machines_state_before_and_after_its_measurement = (  # type: ignore[attr-defined]
            QuickBenchmarkRun.holds_the_machines_state)

    def stores_only_what_was_measured(self) -> None:
        """The benchmark writes raw data only (labkit.writing): no path its figures module derives is in the file,
        since every figure is derived when the record is read."""
        self.assertEqual(self.code, 0, f"the quick benchmark run failed:\n{self.log}")
        lab, _ = lab_for(inspect.getsourcefile(self.main) or "")
        raw = load_record(self.path, self.schema)
        derived = derived_figures(raw, lab_derive(lab))
        self.assertTrue(derived, "this benchmark's record has no derived figure to look for")
        self.assertEqual([figure.path for figure in derived if stored_value(raw, figure.path)[0]], [])

    def holds_the_machines_state(self) -> None:
        """labkit.writing keeps samples of other work through the run (labkit.watch), whatever they say: a machine
        without /proc has none, and says why."""
        self.assertEqual(self.code, 0, f"the quick benchmark run failed:\n{self.log}")
        state = load_record(self.path, self.schema)["machine_state"]
        phases = [sample["phase"] for sample in state["samples"]]
        if not phases:
            self.assertTrue(state["unavailable"])
            return
        self.assertEqual((phases[0], phases[-1]), ("before", "after"))
        self.assertEqual(set(phases[1:-1]) - {"during"}, set())


class ExistingRecordTest(unittest.TestCase):
    """Each test starts with a previous record on disk; ``assert_untouched`` checks a failed run kept it."""

    PREVIOUS = b'{"previous": "record"}\n'

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.path = Path(folder.name) / "record.json"
        self.path.write_bytes(self.PREVIOUS)

    def assert_untouched(self, log: str) -> None:
        self.assertEqual(self.path.read_bytes(), self.PREVIOUS)
        self.assertEqual([p.name for p in self.path.parent.iterdir()], ["record.json"])  # no temp left
        self.assertIn("still holds the previous record", log)
