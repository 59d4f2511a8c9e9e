"""The benchmark's record: valid, self-consistent, and never lost to a failed or interrupted run."""

from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import labkit.testing
from kv_cache import benchmark, figures, trained
from kv_cache.broken import PositionResetBlock
from labkit.figures import check
from labkit.records import RecordError, load_record, path_text
from labkit.waiting import communicate, lines_until
from llm_models.generations import first_departure

SCHEMA = benchmark.ROOT / benchmark.LAB.schema


def run_quietly(*argv: str, **kwargs: object) -> tuple[int, str]:
    return labkit.testing.run_quietly(benchmark.main, ["--quick", *argv], **kwargs)


class QuickRun(labkit.testing.QuickBenchmarkRun):
    main = staticmethod(benchmark.main)
    schema = SCHEMA

    def test_quick_run_writes_a_schema_valid_record_and_reports_progress(self) -> None:
        self.assertEqual(self.record["config"]["benchmark"]["lengths"], benchmark.QUICK["lengths"])
        self.assertIn("length 8: repetition 2/2", self.log)

    def test_stored_statistics_equal_those_of_the_raw_repetitions(self) -> None:
        for entry in self.record["lengths"]:
            full, cached = (entry["modes"][m]["durations_ns"] for m in ("full", "cached"))
            for name, durations in (("full", full), ("cached", cached)):
                stored = entry["modes"][name]
                self.assertEqual(stored["median_ns"], statistics.median(durations))
                self.assertEqual((stored["min_ns"], stored["max_ns"]), (min(durations), max(durations)))
            speedup = entry["speedup"]["cached"]
            self.assertAlmostEqual(speedup["ratio_of_medians"],
                                   statistics.median(full) / statistics.median(cached), places=12)
            self.assertAlmostEqual(speedup["median_of_paired_ratios"],
                                   statistics.median(f / c for f, c in zip(full, cached)), places=12)

    def test_the_trained_models_answers_and_their_verdicts_are_derived_from_its_tokens(self) -> None:
        record = self.record
        section = record["trained"]
        figures.check_invariants(record, "record.json")
        check(record, figures.derive(record), "record.json")
        self.assertTrue(section["same_answer_without_cache"])  # the cache changes the work, never the tokens
        self.assertEqual(section["float32"]["ids"], section["float32"]["full_recompute_ids"])
        self.assertEqual(len(section["float32"]["ids"]), trained.QUICK_NEW_TOKENS)

    def test_check_record_refuses_trained_verdicts_the_tokens_contradict(self) -> None:
        def refused(edit: Callable[[dict[str, Any]], None]) -> str:
            record = copy.deepcopy(self.record)
            edit(record)
            with self.assertRaises(RecordError) as caught:
                figures.check_invariants(record, "record.json")
                check(record, figures.derive(record), "record.json")
            return str(caught.exception)

        def flip(record: dict[str, Any]) -> None:
            record["trained"]["same_answer_without_cache"] = not record["trained"]["same_answer_without_cache"]
        self.assertIn("field $.trained.same_answer_without_cache is", refused(flip))

        def parted(record: dict[str, Any]) -> None:
            record["trained"]["bfloat16_parts_at"] = 0
        if self.record["trained"]["bfloat16_parts_at"] != 0:
            self.assertIn("field $.trained.bfloat16_parts_at is 0, but the first token where", refused(parted))

        def drifted(record: dict[str, Any]) -> None:
            record["trained"]["teacher_forced"]["cached_vs_full_max_abs_diff"] = 1.0
        self.assertIn("field $.trained.teacher_forced.cached_vs_full_max_abs_diff is 1, beyond", refused(drifted))

    def test_hand_edited_byte_capacity_and_projection_figures_are_refused_by_their_path(self) -> None:
        for path in (("cache_formula", "per_position_bytes"), ("compared_steps",), ("projections", "full"),
                     ("capacity", "models", figures.EXAMPLE_MODEL, "formats", "q4_0", "tokens_fit"),
                     ("capacity", "example", "spare_bytes")):
            record = copy.deepcopy(self.record)
            parent = record
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = parent[path[-1]] * 2 + 1  # far beyond float rounding
            with self.subTest(path=path), self.assertRaisesRegex(RecordError,
                                                                 re.escape(path_text(path)) + " is .*, but"):
                check(record, figures.derive(record), "record.json")

    def test_the_first_difference_of_two_answers_is_where_they_part_or_where_one_ends(self) -> None:
        self.assertIsNone(first_departure([1, 2, 3], [1, 2, 3]))
        self.assertEqual(first_departure([1, 2, 3], [1, 5, 3]), 1)
        self.assertEqual(first_departure([1, 2], [1, 2, 3]), 2)

    def test_each_repetition_reverses_the_previous_order(self) -> None:
        for entry in self.record["lengths"]:
            orders = entry["order"]
            self.assertEqual(orders[0], ["full", "cached"])
            for before, after in zip(orders, orders[1:]):
                self.assertEqual(after, before[::-1])

    def test_record_names_no_host_and_states_the_threads_in_force(self) -> None:
        import socket

        text = self.path.read_text()
        self.assertNotIn(f'"{socket.gethostname()}"', text)
        self.assertEqual(self.record["environment"]["torch"]["threads"], 1)
        self.assertEqual(self.record["command"].split()[:2], ["python", "labs/llm/kv-cache/benchmark.py"])


class RecordSurvivesFailures(labkit.testing.ExistingRecordTest):

    def test_failed_equivalence_check_writes_nothing_and_exits_non_zero(self) -> None:
        code, log = run_quietly("--output", str(self.path), model_class=PositionResetBlock)
        self.assertEqual(code, 2)
        self.assertIn("equivalence check failed, no timing taken", log)
        self.assert_untouched(log)

    def test_failed_check_without_a_previous_record_creates_no_file(self) -> None:
        self.path.unlink()
        code, _ = run_quietly("--output", str(self.path), model_class=PositionResetBlock)
        self.assertEqual(code, 2)
        self.assertFalse(self.path.exists())

    def test_interrupted_run_leaves_the_existing_record_byte_identical(self) -> None:
        real = benchmark.time_loop
        calls = iter(range(100))

        def interrupt_on_third(*args: object) -> int:
            if next(calls) == 2:
                raise KeyboardInterrupt
            return real(*args)

        with mock.patch.object(benchmark, "time_loop", interrupt_on_third):
            code, log = run_quietly("--output", str(self.path))
        self.assertEqual(code, 130)
        self.assertIn("interrupted", log)
        self.assert_untouched(log)

    def test_crash_while_writing_leaves_the_existing_record_byte_identical(self) -> None:
        with mock.patch("labkit.records.json.dump", side_effect=RuntimeError("disk full")):
            code, log = run_quietly("--output", str(self.path))
        self.assertEqual(code, 1)
        self.assertIn("RuntimeError: disk full", log)
        self.assert_untouched(log)


class BadArgumentsFailBeforeMeasuring(labkit.testing.ExistingRecordTest):

    def assert_refused(self, argv: list[str], message: str) -> None:
        stderr = io.StringIO()
        with mock.patch.object(benchmark, "sections") as measure, self.assertRaises(SystemExit) as stop, \
                contextlib.redirect_stderr(stderr):
            benchmark.main(argv)
        self.assertEqual(stop.exception.code, 2)
        measure.assert_not_called()
        self.assertEqual(self.path.read_bytes(), self.PREVIOUS)
        self.assertIn(message, stderr.getvalue())

    def test_output_that_is_a_folder_empty_or_in_a_missing_folder_is_refused(self) -> None:
        folder = self.path.parent
        for output, message in ((str(folder), "is a folder"), ("", "is empty"),
                                (str(folder / "missing" / "r.json"), "does not exist")):
            with self.subTest(output=output):
                self.assert_refused(["--output", output], message)

    def test_output_in_a_folder_that_cannot_be_written_is_refused(self) -> None:
        if os.geteuid() == 0:  # root writes anywhere: fake the failing write instead
            with mock.patch("labkit.harness.tempfile.NamedTemporaryFile", side_effect=OSError(30, "Read-only file system")):
                self.assert_refused(["--output", str(self.path)], "Read-only")
            return
        self.path.parent.chmod(0o555)
        self.addCleanup(self.path.parent.chmod, 0o755)
        self.assert_refused(["--output", str(self.path)], "cannot write in")

    def test_batch_beyond_the_bound_is_refused(self) -> None:
        self.assert_refused(["--output", str(self.path), "--batch", str(benchmark.MAX_BATCH + 1)],
                            f"--batch must lie in [1, {benchmark.MAX_BATCH}], got {benchmark.MAX_BATCH + 1}")


# The launcher run so that the signal lands exactly while it imports torch, whatever the machine's speed.
INTERRUPT_DURING_IMPORT = """
import os, runpy, signal, sys
signum = getattr(signal, sys.argv[1])
class InterruptDuringImport:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            os.kill(os.getpid(), signum)
        return None
sys.meta_path.insert(0, InterruptDuringImport())
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


class SigtermIsHandledLikeCtrlC(unittest.TestCase):
    """The real launcher in a subprocess, stopped by SIGTERM while importing, measuring and writing."""

    LAUNCHER = Path(benchmark.ROOT / benchmark.LAB.benchmark[0])
    PREVIOUS = b'{"previous": "record"}\n'

    def run_and_terminate(self, when: str, signum: int = signal.SIGTERM) -> tuple[int, str, Path]:
        """Signal the benchmark while it imports torch ("importing"), or once it says it has timed a repetition
        ("measuring"): the moments are states of the run, not delays."""
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        path = Path(folder.name) / "record.json"
        path.write_bytes(self.PREVIOUS)
        # 1,000 repetitions at 64 tokens: minutes of measuring are left when the first is reported
        arguments = [str(self.LAUNCHER), "--output", str(path), "--lengths", "64", "--repeats", "1000"]
        if when == "importing":
            arguments = ["-c", INTERRUPT_DURING_IMPORT, signal.Signals(signum).name, *arguments]
        process = subprocess.Popen([sys.executable, *arguments], stderr=subprocess.PIPE, text=True,
                                   cwd=benchmark.ROOT)
        said = []
        if when == "measuring":
            assert process.stderr is not None
            said = lines_until(process, process.stderr, "repetition", "the benchmark's first timed repetition")
            process.send_signal(signum)
        _, stderr = communicate(process, f"the benchmark to stop at {signal.Signals(signum).name} while {when}")
        return process.returncode, "".join(said) + stderr, path

    def test_sigterm_at_any_moment_keeps_the_previous_record_and_leaves_no_temporary_file(self) -> None:
        for when in ("importing", "measuring"):  # early and late: any moment must hold
            with self.subTest(when=when):
                code, stderr, path = self.run_and_terminate(when)
                self.assertEqual(code, 143, stderr)
                self.assertIn("interrupted (SIGTERM)", stderr)
                self.assertNotIn("Traceback", stderr)
                self.assertEqual(path.read_bytes(), self.PREVIOUS)
                self.assertEqual([p.name for p in path.parent.iterdir()], ["record.json"])


    def test_ctrl_c_while_torch_is_imported_prints_one_line_and_no_traceback(self) -> None:
        code, stderr, path = self.run_and_terminate("importing", signal.SIGINT)
        self.assertEqual(code, 130, stderr)
        self.assertIn("interrupted (SIGINT)", stderr)
        self.assertNotIn("Traceback", stderr)
        self.assertEqual(path.read_bytes(), self.PREVIOUS)


class CommittedRecord(unittest.TestCase):
    def test_committed_record_is_valid_against_the_schema(self) -> None:
        record = load_record(benchmark.ROOT / benchmark.LAB.record, SCHEMA, lab=benchmark.LAB.name)
        self.assertEqual(record["lab"], benchmark.LAB.name)


if __name__ == "__main__":
    unittest.main()
