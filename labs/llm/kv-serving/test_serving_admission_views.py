"""The admission result in words: what each count limit did is said from its server's counters, for a run where the
count sized for the mean request over-committed, one where it filled the pool without a failure, and one where it
stayed below the pool."""

from __future__ import annotations

import unittest
from typing import Any

from kv_serving_views import VIEWS
from kv_serving_views.admission import outcome_sentences
from labkit.testing import committed_record
from site_hooks.blocks import render_block


def record(average_peak: int, average_failed: int, safe_failed: int = 0, pool: int = 112) -> dict[str, Any]:
    """The parts of a record the sentences read: three policies over one pool, the byte server's budget 84 blocks."""
    def run(name: str, limit: str, peak: int, failed: int, mean: float, budget: int) -> dict[str, Any]:
        return {"name": name, "options": ["--max-running" if name != "kv_budget_bytes" else "--kv-budget-bytes", limit],
                "mean_used_blocks": mean,
                "server": {"peak_used_blocks": peak, "failed_for_memory": failed, "budget_blocks": budget}}
    return {"admission": {"pool_blocks": pool, "policies": [
        run("kv_budget_bytes", "5505024", 84, 0, 61.2, 84),
        run("count_safe", "4", 62, safe_failed, 38.4, pool),
        run("count_average", "14", average_peak, average_failed, 70.0, pool)]}}


class AdmissionOutcome(unittest.TestCase):
    def test_a_count_sized_for_the_mean_that_stayed_below_the_pool_is_not_said_to_have_filled_it(self) -> None:
        safe, average = outcome_sentences(record(94, 0))
        self.assertEqual(safe, "The count safe for the longest request (4 running) never ran out of memory: it peaked "
                               "at 62 of the pool's 112 blocks and held 38 on average, against 61 admitted by bytes "
                               "within a budget of 84.")
        self.assertIn("can over-commit when long requests arrive together, but in this run it peaked at 94 of the "
                      "pool's 112 blocks and no request failed for memory", average)
        self.assertNotIn("filled", average)

    def test_failures_for_memory_are_said_with_their_count(self) -> None:  # the opposite run
        safe, average = outcome_sentences(record(112, 3, safe_failed=1))
        self.assertEqual(average, "The count sized for the mean request (14 running) over-committed: 3 requests found "
                                  "the pool without their blocks and failed at admission, before any token.")
        self.assertIn("still saw 1 request fail for memory", safe)
        self.assertNotIn("never ran out", safe)

    def test_a_full_pool_without_a_failure_is_said_as_exactly_that(self) -> None:  # the edge between the two
        _, average = outcome_sentences(record(112, 0))
        self.assertEqual(average, "The count sized for the mean request (14 running) filled all 112 blocks of the pool "
                                  "at its peak, yet no request failed for memory in this run.")
        _, below = outcome_sentences(record(111, 0))
        self.assertIn("peaked at 111 of the pool's 112 blocks", below)

    def test_the_committed_record_renders(self) -> None:
        html = render_block(VIEWS["admission-outcome"](committed_record(__file__)))
        self.assertIn("The count safe for the longest request", html)
        self.assertIn("The count sized for the mean request", html)


if __name__ == "__main__":
    unittest.main()
