"""The benchmark's record: valid, self-consistent, and never lost to a failed or interrupted run."""

from __future__ import annotations

import statistics
import unittest
from unittest import mock

import benchmark  # first: it makes labkit importable
import labkit.testing
from labkit.records import load_record

from kv_cache.broken import PositionResetBlock

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


class CommittedRecord(unittest.TestCase):
    def test_committed_record_is_valid_against_the_schema(self) -> None:
        record = load_record(benchmark.ROOT / benchmark.LAB.record, SCHEMA)
        self.assertEqual(record["lab"], benchmark.LAB.name)


if __name__ == "__main__":
    unittest.main()
