"""A bounded end-to-end load test: the load generator against the lab server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import io
import unittest

from kv_serving.client_stats import latency_summary
from kv_serving.launch import free_port
from kv_serving.loadgen import main, run_load
from kv_serving.testing import TINY_MODEL, QuietLoopTestCase, serve_in_loop, tiny_engine
from kv_serving.workload import WorkItem, WorkloadSpec, make_workload, real_workload
from labkit.waiting import HANG_S, eventually, within


def spec(**changes: object) -> WorkloadSpec:
    return WorkloadSpec(**{"requests": 14, "rate": 60.0, "seed": 4, "vocab_size": TINY_MODEL.vocab_size,
                           "prompt_tokens": (1, 40), "output_tokens": (2, 30), **changes})


class WorkloadTest(unittest.TestCase):
    def test_same_seed_same_workload_and_lengths_vary_widely(self) -> None:
        a, b = make_workload(spec(requests=200)), make_workload(spec(requests=200))
        self.assertEqual(a, b)
        self.assertNotEqual(a, make_workload(spec(requests=200, seed=5)))
        prompts = [len(item.prompt) for item in a]
        self.assertGreaterEqual(max(prompts) / min(prompts), 10)
        arrivals = [item.arrival_s for item in a]
        self.assertEqual(arrivals, sorted(arrivals))
        mean_gap = arrivals[-1] / len(arrivals)
        self.assertAlmostEqual(mean_gap, 1 / 60, delta=0.5 / 60)  # Poisson at the stated rate

    def test_latency_percentiles_interpolate_between_ranks(self) -> None:
        summary = latency_summary([4.0, 1.0, 3.0, 2.0])
        self.assertEqual((summary["p50"], summary["mean"], summary["count"]), (2.5, 2.5, 4))
        self.assertAlmostEqual(summary["p90"], 3.7)  # rank 0.9 x 3 = 2.7: 3 + 0.7 x (4 - 3)
        self.assertAlmostEqual(summary["p99"], 3.97)
        self.assertIsNone(latency_summary([]))


class LoadTest(QuietLoopTestCase):
    async def test_a_text_request_refused_before_any_usage_keeps_its_planned_prompt_length(self) -> None:
        # The random model's server has no chat endpoint for these messages: the request ends without a usage chunk.
        planned = [[5, 6, 7], [8, 9]]
        workload = [WorkItem(**{**vars(item), "arrival_s": 0.0})
                    for item in real_workload(2, 1.0, 0, 4, planned_ids=planned)]
        self.assertEqual([item.prompt for item in workload], planned)
        async with serve_in_loop(tiny_engine(num_blocks=64)) as (url, _):
            run = await run_load(url, workload, "tiny", metrics_interval_s=0.01, timeout_s=HANG_S)
        self.assertTrue(all(r.outcome != "completed" for r in run.requests), [r.outcome for r in run.requests])
        self.assertEqual([r.prompt_tokens for r in run.requests], [3, 2])
        with self.assertRaisesRegex(ValueError, "planned_ids holds 1 prompts' ids for 2 requests"):
            real_workload(2, 1.0, 0, 4, planned_ids=[[1]])

    async def test_every_request_completes_with_its_tokens_and_client_side_latencies(self) -> None:
        workload = make_workload(spec())
        async with serve_in_loop(tiny_engine(num_blocks=64)) as (url, _):
            run = await run_load(url, workload, "tiny", metrics_interval_s=0.01, timeout_s=HANG_S)
        summary = run.summary()
        self.assertEqual((summary["completed"], summary["refused"], summary["failed"]), (14, 0, 0))
        for item, result in zip(workload, run.requests):
            self.assertEqual(result.tokens, item.max_tokens)
            self.assertEqual(len(result.itl_s), item.max_tokens - 1)
            self.assertLessEqual(result.ttft_s, result.e2e_s)
        self.assertEqual(summary["output_tokens"], sum(item.max_tokens for item in workload))
        self.assertGreater(len(run.occupancy), 0)
        self.assertLessEqual(max(s["used_blocks"] for s in run.occupancy), 64)

    async def test_clients_that_leave_are_counted_apart_and_their_blocks_return(self) -> None:
        workload = make_workload(spec(leave_fraction=1.0))
        async with serve_in_loop(tiny_engine(num_blocks=64)) as (url, app):
            run = await run_load(url, workload, "tiny", metrics_interval_s=0.01, timeout_s=HANG_S)
            scheduler = app.state.scheduler
            await eventually(lambda: not scheduler.running, "the departed clients' requests to retire")
            self.assertEqual(scheduler.pool.num_used_blocks, 0)
        self.assertEqual(run.summary()["left"], sum(item.leave_after_tokens is not None for item in workload))
        self.assertGreater(run.summary()["left"], 0)



    async def test_an_item_waiting_for_first_tokens_is_sent_after_the_last_of_them_even_one_refused(self) -> None:
        # item 2 waits for item 0's first token and for item 1, which the server refuses (a prompt of no token): a
        # request that gets no token releases its waiters when it ends, so nothing hangs
        workload = [WorkItem(0, 0.0, [1, 2, 3], 6), WorkItem(1, 0.0, [], 2),
                    WorkItem(2, 0.0, [4, 5], 2, after_first_tokens=(0, 1))]
        async with serve_in_loop(tiny_engine(num_blocks=64)) as (url, _):
            run = await within(run_load(url, workload, "tiny", metrics_interval_s=0.01, timeout_s=HANG_S),
                               "the waiting item to be sent and answered")
        first, refused, waiter = run.requests
        self.assertEqual((first.outcome, refused.outcome, waiter.outcome), ("completed", "refused", "completed"))
        self.assertGreaterEqual(waiter.sent_s, first.sent_s + first.ttft_s)
        self.assertGreaterEqual(waiter.sent_s, refused.sent_s)  # and it was sent at all: the refusal released it

    async def test_a_wait_for_a_missing_item_or_for_one_that_waits_itself_is_refused_naming_it(self) -> None:
        for waits, why in (((7,), "item 7, which the workload does not hold"), ((1,), "item 1, which waits itself")):
            workload = [WorkItem(0, 0.0, [1], 2, after_first_tokens=waits), WorkItem(1, 0.0, [2], 2,
                                                                                     after_first_tokens=(1,))]
            with self.subTest(waits=waits), self.assertRaisesRegex(ValueError, f"work item 0 waits .* {why}"):
                await run_load("http://127.0.0.1:9", workload, "tiny", timeout_s=HANG_S)


class LoadgenCommandTest(unittest.TestCase):
    def run_main(self, *argv: str) -> tuple[int | str | None, str]:
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            try:
                code: int | str | None = main(list(argv))
            except SystemExit as stop:
                code = stop.code
        return code, stderr.getvalue()

    def test_a_vocabulary_of_no_token_or_a_base_url_without_a_scheme_is_an_argument_error(self) -> None:
        for argv, message in ((["--vocab-size", "0"], "vocab_size must be at least 1"),
                              (["--base-url", "127.0.0.1:8000"], "--base-url must start with http:// or https://")):
            with self.subTest(argv=argv):
                code, stderr = self.run_main(*argv)
                self.assertEqual(code, 2)
                self.assertIn(message, stderr)
                self.assertNotIn("Traceback", stderr)

    def test_a_run_in_which_every_request_failed_exits_1_in_one_line(self) -> None:
        url = f"http://127.0.0.1:{free_port()}"  # nobody listens there
        code, stderr = self.run_main("--base-url", url, "--requests", "2", "--rate", "100")
        self.assertEqual(code, 1)
        self.assertEqual(stderr.count("\n"), 1)
        self.assertTrue(stderr.startswith(f"loadgen: every one of the 2 requests to {url} failed; the first: Connect"),
                        stderr)


if __name__ == "__main__":
    unittest.main()
