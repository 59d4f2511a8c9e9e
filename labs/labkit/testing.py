"""Helpers for labs' tests of their own benchmarks."""

from __future__ import annotations

import contextlib
import io
import tempfile
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .records import load_record


def run_quietly(main: Callable[..., int], argv: list[str], **kwargs: object) -> tuple[int, str]:
    """Call a benchmark's main(argv), capturing its progress lines: (exit code, stderr text)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = main(argv, **kwargs)
    return code, stderr.getvalue()


class QuickBenchmarkRun(unittest.TestCase):
    """Runs a benchmark's --quick mode once per test class into a temporary record; subclasses set
    ``main`` (the benchmark's entry point, wrapped in staticmethod) and ``schema``."""

    main: Callable[..., int]
    schema: Path

    @classmethod
    def setUpClass(cls) -> None:
        cls.folder = tempfile.TemporaryDirectory()
        cls.path = Path(cls.folder.name) / "record.json"
        cls.code, cls.log = run_quietly(cls.main, ["--quick", "--output", str(cls.path)])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.folder.cleanup()

    @property
    def record(self) -> dict[str, Any]:
        self.assertEqual(self.code, 0, f"the quick benchmark run failed:\n{self.log}")
        return load_record(self.path, self.schema)


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
