"""The trained run's sentences: each word that depends on the record is chosen by code, and each case is fed."""

from __future__ import annotations

import unittest

from kv_serving_views.trained import answer_concurrent_view, matching_sentence, speedup_sentence
from site_hooks.blocks import render_block


def trained(speedup: float, compared: int = 12, matching: int = 12) -> dict:
    return {"speedup_over_serial": speedup, "serial": {"rate": 64.0}, "requests_compared": compared,
            "requests_matching_solo": matching}


class TrainedSentences(unittest.TestCase):
    def test_the_speedup_is_worded_by_where_it_falls_against_one_at_a_time_and_the_aim(self) -> None:
        self.assertIn("6.2× the output tokens per second", speedup_sentence(trained(6.2), 4.0))
        self.assertIn("at least the 4× this page aims for", speedup_sentence(trained(6.2), 4.0))
        self.assertIn("short of the 4× this page aims for", speedup_sentence(trained(2.5), 4.0))
        self.assertIn("batching bought nothing", speedup_sentence(trained(0.9), 4.0))

    def test_matching_says_every_request_only_when_all_matched(self) -> None:
        self.assertTrue(matching_sentence(trained(5.0)).startswith("Every one of the 12 requests"))
        partial = matching_sentence(trained(5.0, 12, 10))
        self.assertTrue(partial.startswith("10 of the 12 requests"))
        self.assertIn("the others parted from their solo run", partial)

    def test_the_concurrency_answer_says_no_only_when_a_step_carried_several_requests(self) -> None:
        def record(peak: int) -> dict:
            point = {"rate": 64.0, "server": {"peak_running": peak, "mean_batch": 3.2 if peak > 1 else 1.0},
                     "matching_solo": 11, "summary": {"requests": 12}}
            return {"trained": {"points": [{**point, "rate": 2.0}, point]}}
        batched = render_block(answer_concurrent_view(record(6)))
        self.assertIn("No: at 64 arrivals per second up to 6 requests ran in one decode step, 3.2 on average", batched)
        self.assertIn("11 of its 12 requests wrote the same tokens as alone", batched)
        self.assertIn("On this run they did: at 64 arrivals per second no decode step carried more than one",
                      render_block(answer_concurrent_view(record(1))))


if __name__ == "__main__":
    unittest.main()
