"""The committed serving record against the site's one check: it passes, and each kind of derived figure,
hand-edited in the record's text, is refused in one line naming its JSON path and both values."""

from __future__ import annotations

import json
import re
import unittest

from kv_serving import figures
from labkit.figures import check
from labkit.manifest import lab_for
from labkit.records import RecordError, load_record
from site_hooks.labviews import lab_check

LAB, ROOT = lab_for(figures.__file__)
SOURCE = LAB.record.as_posix()


def first(key: str, value: str) -> tuple[str, str]:
    """A regular expression for the first number stored under ``key`` and its replacement."""
    return rf'"{key}": -?[0-9.e+-]+', f'"{key}": {value}'


class CommittedRecordTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.text = (ROOT / LAB.record).read_text()

    def test_the_committed_record_passes_its_invariants_and_every_derived_figure(self) -> None:
        record = load_record(ROOT / LAB.record, ROOT / LAB.schema)
        figures.check_invariants(record, SOURCE)
        derived = figures.derive(record)
        check(record, derived, SOURCE)
        self.assertGreater(len(derived), 200)  # every run's summary, the steps, the sizes and the targets

    def refusal(self, pattern: str, replacement: str) -> str:
        text, count = re.subn(pattern, replacement, self.text, count=1)
        self.assertEqual(count, 1, pattern)
        with self.assertRaises(RecordError) as refused:
            lab_check(LAB)(json.loads(text), SOURCE)
        message = str(refused.exception)
        self.assertNotIn("\n", message)
        self.assertTrue(message.startswith(f"{SOURCE}: field $."), message)
        return message

    def assert_refused(self, edit: tuple[str, str], expected: str) -> None:
        self.assertRegex(self.refusal(*edit), "^" + re.escape(f"{SOURCE}: field ") + expected + "$")

    def test_a_pool_size_the_config_contradicts(self) -> None:
        self.assert_refused(first("block_bytes", "1"), r"\$\.config\.benchmark\.block_bytes is 1, but the bytes per "
                                                       r"token x block_size gives 65536")

    def test_a_step_statistic_its_durations_contradict(self) -> None:
        self.assert_refused(first("median_ns", "1"), r"\$\.step_times\[0\]\.median_ns is 1, but its raw durations "
                                                     r"gives 12494197")

    def test_tokens_per_second_its_median_step_contradicts(self) -> None:
        self.assert_refused(first("tokens_per_s", "1.5"), r"\$\.step_times\[0\]\.tokens_per_s is 1\.5, but batch / "
                                                          r"its median step gives 80\.\d+")

    def test_a_request_count_the_request_rows_contradict(self) -> None:
        self.assert_refused(first("completed", "59"), r"\$\.admission\.policies\[0\]\.summary\.completed is 59, but "
                                                      r"client_summary of its request rows gives 60")

    def test_a_duration_and_a_throughput_the_request_rows_contradict(self) -> None:
        self.assert_refused(first("duration_s", "1.0"), r"\$\.admission\.policies\[0\]\.summary\.duration_s is 1, "
                                                        r"but client_summary of its request rows gives 15\.849\d+")
        self.assert_refused(first("throughput_tokens_per_s", "9.0"),
                            r"\$\.admission\.policies\[0\]\.summary\.throughput_tokens_per_s is 9, but client_summary of its "
                            r"request rows gives 229\.85\d+")

    def test_a_latency_percentile_the_completed_requests_contradict(self) -> None:
        self.assert_refused(first("p50", "0.5"), r"\$\.admission\.policies\[0\]\.summary\.ttft_s\.p50 is 0\.5, but "
                                                 r"client_summary of its completed requests gives 3\.5806\d+")

    def test_a_mean_batch_that_is_not_rows_over_steps(self) -> None:
        self.assert_refused(first("mean_batch", "9.5"), r"\$\.admission\.policies\[0\]\.server\.mean_batch is 9\.5, "
                                                        r"but decode_rows / decode_steps gives 5\.8834\d+")

    def test_a_request_size_the_workload_contradicts(self) -> None:
        self.assert_refused(first("mean_request_blocks", "3.0"),
                            r"\$\.admission\.mean_request_blocks is 3, but the mean of request_blocks gives 8\.85")

    def test_a_best_rate_and_a_verdict_the_runs_contradict(self) -> None:
        self.assert_refused(first("best_rate", "3.0"), r"\$\.rates\.best_rate is 3, but the rate of highest "
                                                       r"throughput gives 24")
        self.assert_refused((r'"speedup_met": true', '"speedup_met": false'),
                            r"\$\.targets\.speedup_met is False, but the speedup against its target gives True")


if __name__ == "__main__":
    unittest.main()
