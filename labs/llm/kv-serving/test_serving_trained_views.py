"""The trained run's sentences: each word that depends on the record is chosen by code, and each case is fed."""

from __future__ import annotations

import copy
import dataclasses
import unittest
from typing import Any

from kv_serving.accelerator import served_here
from kv_serving_views import VIEWS
from kv_serving_views.accelerator import lessons
from kv_serving_views.trained import (
    admission_note,
    answer_concurrent_view,
    arrivals_sentence,
    budget_sentence,
    matching_sentence,
    prompts_sentence,
    speedup_sentence,
)
from labkit.manifest import lab_for
from labkit.testing import committed_record
from llm_models.accelerator import LONG_CONTEXT, full_budget
from llm_models.hardware import H100_SXM
from site_hooks.blocks import render_block

LAB, ROOT = lab_for(__file__)


def trained(speedup: float, compared: int = 12, matching: int = 12, unfinished: int = 0) -> dict:
    return {"speedup_over_serial": speedup, "serial": {"rate": 64.0}, "requests_compared": compared,
            "requests_matching_solo": matching, "requests_unfinished": unfinished}


class TrainedSentences(unittest.TestCase):
    def test_the_speedup_is_said_as_measured_and_no_gain_is_named(self) -> None:
        self.assertIn("6.20× the output tokens per second", speedup_sentence(trained(6.2)))
        self.assertNotIn("bought nothing", speedup_sentence(trained(2.5)))
        self.assertIn("batching bought nothing", speedup_sentence(trained(0.9)))
        for speedup in (6.2, 2.5, 0.9):
            self.assertNotIn("aims for", speedup_sentence(trained(speedup)))

    def test_matching_says_every_request_only_when_all_matched(self) -> None:
        every = matching_sentence(trained(5.0))
        self.assertTrue(every.startswith("Every one of the 12 completed requests"))
        self.assertNotIn("did not complete", every)
        partial = matching_sentence(trained(5.0, 12, 10))
        self.assertTrue(partial.startswith("10 of the 12 completed requests"))
        self.assertIn("the others parted from their solo run", partial)

    def test_requests_that_did_not_complete_are_named_apart_not_counted_as_parted(self) -> None:
        sentence = matching_sentence(trained(5.0, 67, 67, 5))
        self.assertTrue(sentence.startswith("Every one of the 67 completed requests"))
        self.assertIn("5 other requests did not complete", sentence)
        self.assertNotIn("parted", sentence)

    def test_the_admission_note_appears_only_when_the_safe_and_mean_counts_coincide(self) -> None:
        def policies(safe: str, average: str) -> dict:
            return {"request_blocks": [4, 5, 5], "admission": {"policies": [
                {"name": "kv_budget_bytes", "options": ["--num-blocks", "40", "--kv-budget-bytes", "100"]},
                {"name": "count_safe", "options": ["--num-blocks", "40", "--max-running", safe]},
                {"name": "count_average", "options": ["--num-blocks", "40", "--max-running", average]}]}}
        note = admission_note(policies("8", "8"))
        self.assertIn("are the same, 8 running: each request needs 4 to 5 blocks", note)
        self.assertIn("the two count rows run one policy twice", note)
        self.assertIsNone(admission_note(policies("6", "8")))
        once = policies("8", "8")
        del once["admission"]["policies"][2]  # the benchmark runs a count both are once
        self.assertIn("are the same, 8 running: each request needs 4 to 5 blocks, so one count row stands for both",
                      admission_note(once))

    def test_the_concurrency_answer_says_no_only_when_a_step_carried_several_requests(self) -> None:
        def record(peak: int) -> dict:
            point = {"rate": 64.0, "server": {"peak_running": peak, "mean_batch": 3.2 if peak > 1 else 1.0},
                     "matching_solo": 11, "completed_compared": 12, "summary": {"requests": 12}}
            return {"trained": {"points": [{**point, "rate": 2.0}, point]}}
        batched = render_block(answer_concurrent_view(record(6)))
        self.assertIn("No: at 64 arrivals per second up to 6 requests ran in one decode step, 3.2 on average", batched)
        self.assertIn("11 of its 12 completed requests wrote the same tokens as alone", batched)
        self.assertIn("On this run they did: at 64 arrivals per second no decode step carried more than one",
                      render_block(answer_concurrent_view(record(1))))

    def test_the_prompts_are_said_by_their_own_lengths_and_the_output_bound_apart(self) -> None:
        text = prompts_sentence({"requests": 3, "prompt_tokens": [40, 36, 53], "max_tokens": 28,
                                 "prompt_file": "prompts.json", "prompts_sha256": "ab" * 32,
                                 "model": {"layers": 30, "dtype": "float32"}})
        self.assertTrue(text.startswith("3 real prompts of 36 to 53 tokens from prompts.json"))
        self.assertIn("each answered with at most 28 tokens", text)

    @staticmethod
    def arrivals(*runs: tuple[float, float, float]) -> dict:
        """(rate, arrival span, run duration) per run; the share is derived as the figures module does."""
        return {"points": [{"rate": rate, "arrival_span_s": span, "arrival_share": span / duration,
                            "summary": {"requests": 16, "duration_s": duration}} for rate, span, duration in runs]}

    def test_arrivals_name_each_rate_and_span_and_call_a_run_a_burst_only_when_they_end_early(self) -> None:
        both = arrivals_sentence(self.arrivals((64.0, 0.107, 5.8), (4.0, 1.686, 5.9)))
        self.assertTrue(both.startswith("The load generator sent them at 2 Poisson rates, 4 and 64 per second: at 4/s "
                                        "the 16 arrivals took 1.69 s of a 5.9 s run and at 64/s the 16 arrivals took "
                                        "0.11 s of a 5.8 s run."))
        self.assertIn("At every rate the arrivals were over before half the run had passed: each run is a burst", both)
        steady = arrivals_sentence(self.arrivals((0.5, 30.0, 36.0), (1.0, 15.0, 21.0)))  # the opposite: streams
        self.assertNotIn("burst", steady)
        mixed = arrivals_sentence(self.arrivals((0.5, 30.0, 36.0), (64.0, 0.1, 6.0)))
        self.assertIn("At 64/s the arrivals were over before half the run had passed: a burst", mixed)
        self.assertNotIn("every rate", mixed)
        edge = arrivals_sentence(self.arrivals((4.0, 3.0, 6.0)))  # arrivals end exactly at half the run: no burst
        self.assertNotIn("burst", edge)
        self.assertIn("burst", arrivals_sentence(self.arrivals((4.0, 2.9, 6.0))))

    def test_the_byte_budget_is_said_as_its_share_of_the_pool_and_called_smaller_only_when_it_is(self) -> None:
        def policies(budget: int, pool: int = 40) -> dict:
            server = {"budget_blocks": budget, "num_blocks": pool, "budget_share_of_pool": budget / pool,
                      "peak_running": 6}
            return {"admission": {"policies": [
                {"name": "kv_budget_bytes", "server": server},
                {"name": "count_safe", "server": {"peak_running": 8}},
                {"name": "count_average", "server": {"peak_running": 8}}]}}
        smaller = budget_sentence(policies(30))
        self.assertIn("The byte server's budget is 75% of the pool, 30 of its 40 blocks, and it ran up to 6 requests "
                      "at once; the count servers, limited only by the pool, ran up to 8.", smaller)
        self.assertIn("a smaller budget beside the whole pool", smaller)
        one = policies(30)
        del one["admission"]["policies"][2]  # one count row where the two counts are equal
        self.assertIn("at once; the count server, limited only by the pool, ran up to 8.", budget_sentence(one))
        whole = budget_sentence(policies(40))
        self.assertIn("budget is 100% of the pool, 40 of its 40 blocks", whole)
        self.assertNotIn("smaller budget", whole)


if __name__ == "__main__":
    unittest.main()


class AcceleratorArithmetic(unittest.TestCase):
    """The trained server's budget beside an H100's for Llama-3-8B: the left column from the record, the right from
    the decode lab's formula and the datasheet, each sentence worded from both."""

    RECORD = committed_record(__file__)

    def edited(self, **trained: Any) -> dict[str, Any]:
        record = copy.deepcopy(self.RECORD)
        for point in record["trained"]["points"]:
            point["budget_kv_bytes"] = trained.get("budget", point["budget_kv_bytes"])
        record["trained"]["speedup_over_serial"] = trained.get("gain", record["trained"]["speedup_over_serial"])
        return record

    def test_the_left_column_prices_the_records_budget_with_the_trained_models_bytes_per_token(self) -> None:
        here = served_here(self.RECORD)
        model = self.RECORD["trained"]["model"]
        element = {"float32": 4, "bfloat16": 2}[model["dtype"]]  # the dtype the record's probe chose
        token = 2 * model["layers"] * model["kv_heads"] * model["head_dim"] * element  # keys and values
        self.assertEqual(here["token"], token)
        self.assertEqual(here["tokens"], max(p["budget_kv_bytes"] for p in self.RECORD["trained"]["points"]) // token)
        there = full_budget()
        self.assertEqual(there.sequences, int(there.budget_bytes // (there.token_bytes * LONG_CONTEXT)))
        html = render_block(VIEWS["accelerator"](self.RECORD))
        self.assertIn("not a measurement", html)
        self.assertIn(f'href="{H100_SXM.source}"', html)

    def test_the_budget_sentence_follows_how_many_long_sequences_it_holds(self) -> None:
        token = served_here(self.RECORD)["token"]
        none = " ".join(VIEWS["accelerator-lessons"](self.edited(budget=token * LONG_CONTEXT - 1)).items)
        self.assertIn("does not hold one 8,192-token sequence (8,191 tokens in all)", none)
        one = " ".join(VIEWS["accelerator-lessons"](self.edited(budget=token * LONG_CONTEXT)).items)
        self.assertIn("holds 1 8,192-token sequence,", one)
        three = " ".join(VIEWS["accelerator-lessons"](self.edited(budget=token * LONG_CONTEXT * 3)).items)
        self.assertIn("holds 3 8,192-token sequences", three)
        self.assertNotIn("does not hold", three)

    def test_the_gain_sentence_quotes_both_and_the_batch_this_server_ran(self) -> None:
        here, there = served_here(self.RECORD), full_budget()
        text = " ".join(lessons(here, there))
        self.assertIn(f"promises {there.gain:.1f}× there for {there.sequences} long sequences", text)
        self.assertIn(f"measured {here['gain']:.2f}× with at most {here['peak_running']} of its "
                      f"{here['requests']} requests running at once", text)
        self.assertIn("still bound by bytes", text)
        bound = " ".join(lessons(here, dataclasses.replace(there, compute_bound=True)))
        self.assertIn("bound by arithmetic: past it", bound)
        self.assertNotIn("still bound by bytes", bound)
