"""Scheduler invariants: budget never exceeded, no block leaked, cancellation within one iteration."""

from __future__ import annotations

import asyncio
import random
import unittest

from llm_models.serving.admission import KVBudget, MaxRunning
from llm_models.serving.prefill_bound import DECAY, PrefillRate
from llm_models.serving.request import Failed, Finished, Request, Status, Token
from llm_models.serving.scheduler import Counters, RequestRefused, Scheduler, prefill_groups
from kv_serving.testing import TINY_MODEL, SchedulerTestCase, StepGate, drain, tiny_engine
from labkit.waiting import HANG_S, bounded, eventually, within


def greedy_alone(scheduler: Scheduler, prompt: list[int], max_tokens: int) -> list[int]:
    """What the model generates for this prompt with no cache and no neighbours."""
    ids = list(prompt)
    for _ in range(max_tokens):
        ids.append(int(scheduler.model.reference_logits(ids).argmax()))
    return ids[len(prompt):]


def random_requests(count: int, seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(TINY_MODEL.vocab_size) for _ in range(rng.randint(1, 30))], rng.randint(1, 20))
            for _ in range(count)]


class PrefillGroupsTest(unittest.TestCase):
    def test_admitted_prompts_are_cut_in_order_into_groups_within_the_token_budget(self) -> None:
        admitted = [Request(f"r{i}", [1] * n, 4) for i, n in enumerate((5, 3, 4, 12, 2, 2))]
        groups = prefill_groups(admitted, 8)
        self.assertEqual([[len(r.prompt) for r in group] for group in groups], [[5, 3], [4], [12], [2, 2]])
        self.assertEqual([r for group in groups for r in group], admitted)  # nobody lost, nobody reordered
        self.assertEqual(prefill_groups([], 8), [])


class PrefillRateTest(unittest.TestCase):
    def test_the_rate_is_decayed_tokens_over_decayed_seconds_and_a_given_rate_never_moves(self) -> None:
        rate = PrefillRate(64, 1.0)  # the probe: 64 tokens in 1 s
        rate.observe(100, 1.0)
        self.assertAlmostEqual(rate.tokens_per_s, (DECAY * 64 + 100) / (DECAY * 1.0 + 1.0), places=12)
        rate.observe(0, 0.5)  # a call that prefilled nothing says nothing of the rate
        self.assertEqual(rate.observed_calls, 1)
        given = PrefillRate.given(10.0)
        given.observe(1000, 1.0)
        self.assertEqual((given.tokens_per_s, given.observed_calls), (10.0, 0))
        for bad in (0.0, -1.0, float("inf"), float("nan")):
            with self.subTest(rate=bad), self.assertRaisesRegex(ValueError, "tokens per second above 0"):
                PrefillRate.given(bad)


class SchedulerTest(SchedulerTestCase):

    def assert_every_row_accounted_for(self, counters: Counters) -> None:
        """Each computed row (a prefill's or one request's in a decode step) was streamed or dropped; rows for
        departed clients were dropped (honoured) or streamed to nobody (ignored)."""
        self.assertEqual(counters.decode_rows + counters.prefills - counters.tokens_generated, counters.rows_dropped)
        self.assertEqual(counters.decode_rows_after_disconnect + counters.prefills_after_disconnect,
                         counters.tokens_after_disconnect + counters.rows_dropped)

    async def gate_after_prefill(self, scheduler: Scheduler, requests: list[Request]) -> StepGate:
        """Hold the first decode step of requests submitted together, once every one has its first token."""
        gate = StepGate(scheduler.model)
        await eventually(lambda: gate.holding and len(scheduler.running) == len(requests),
                         "every request prefilled and the first decode step held")
        self.assertTrue(all(len(r.output) == 1 for r in requests))
        return gate

    def assert_idle_with_every_block_free(self, scheduler: Scheduler) -> None:
        pool = scheduler.pool
        self.assertEqual((scheduler.running, list(scheduler.waiting)), ([], []))
        self.assertEqual(pool.num_used_blocks, 0)
        self.assertEqual(sorted(pool.blocks.free), list(range(pool.num_blocks)))  # each block exactly once
        self.assertEqual(set(pool.blocks.refcount), {0})

    async def test_continuous_batching_gives_every_request_its_alone_tokens(self) -> None:
        scheduler = self.start(num_blocks=24)
        work = random_requests(10, seed=0)
        # The first three arrive before the loop's first iteration (nothing is awaited in between): together they
        # fit the pool (11 + 3 + 6 of 24 blocks) and each needs decode steps, so the first step decodes three rows
        # however fast the host is. The rest arrive spread over iterations, so batches change as they run.
        requests = [scheduler.submit(prompt, max_tokens) for prompt, max_tokens in work[:3]]
        for prompt, max_tokens in work[3:]:
            await asyncio.sleep(0.002)
            requests.append(scheduler.submit(prompt, max_tokens))
        outcomes = await within(asyncio.gather(*(drain(r) for r in requests)), "every request to finish")
        for (prompt, max_tokens), (tokens, end) in zip(work, outcomes):
            self.assertEqual(end, Finished("length"))
            self.assertEqual(tokens, greedy_alone(scheduler, prompt, max_tokens))
        self.assertGreater(scheduler.counters.decode_rows, scheduler.counters.decode_steps)  # some batching
        # the first three were admitted in one iteration: one packed prefill for them
        self.assertLess(scheduler.counters.prefill_calls, scheduler.counters.prefills)
        self.assert_idle_with_every_block_free(scheduler)

    async def test_byte_budget_is_never_exceeded_and_no_request_fails_for_memory(self) -> None:
        num_blocks = 40
        budget_blocks = 12
        scheduler = self.start(num_blocks=num_blocks, policy=KVBudget(budget_blocks * tiny_engine().block_bytes))
        peaks = []

        async def watch() -> None:
            while True:
                peaks.append(scheduler.pool.num_used_blocks)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        requests = [scheduler.submit(p, m) for p, m in random_requests(25, seed=1)]
        outcomes = await within(asyncio.gather(*(drain(r) for r in requests)), "every request to finish")
        watcher.cancel()
        self.assertTrue(all(isinstance(end, Finished) for _, end in outcomes))
        self.assertLessEqual(max(peaks), budget_blocks)
        self.assertLessEqual(scheduler.counters.peak_used_blocks, budget_blocks)
        self.assertEqual(scheduler.counters.failed_for_memory, 0)
        self.assert_idle_with_every_block_free(scheduler)

    async def test_count_limit_sized_for_average_requests_overcommits_and_fails_some(self) -> None:
        scheduler = self.start(num_blocks=10, policy=MaxRunning(6))
        requests = [scheduler.submit([1] * 20, 12) for _ in range(6)]  # 31 positions = 8 blocks of 4 each
        outcomes = await within(asyncio.gather(*(drain(r) for r in requests)), "every request to end")
        failures = [end for _, end in outcomes if isinstance(end, Failed)]
        self.assertEqual(len(failures), 5)  # only one request's 8 blocks fit a 10-block pool
        self.assertEqual(failures[0].message, "out of KV memory: admitted as running request 2 under max_running=6, "
                                              "but 8 blocks needed, 2 of 10 are free")
        self.assertEqual(scheduler.counters.failed_for_memory, 5)
        self.assert_idle_with_every_block_free(scheduler)

    async def test_a_request_that_can_never_fit_is_refused_at_once_with_the_numbers(self) -> None:
        scheduler = self.start(num_blocks=40, policy=KVBudget(5 * tiny_engine().block_bytes))
        with self.assertRaises(RequestRefused) as refused:
            scheduler.submit([1] * 20, 10)  # 29 positions = 8 blocks > 5
        self.assertEqual(refused.exception.status, 400)
        self.assertIn("29 cached positions = 8 blocks of 4", str(refused.exception))
        self.assertIn("KV budget is 5 blocks", str(refused.exception))
        self.assertEqual(list(scheduler.waiting), [])

    async def test_a_full_waiting_queue_refuses_with_503(self) -> None:
        scheduler = tiny_engine(num_blocks=8, max_waiting=2).build()  # not started: nothing leaves the queue
        self.schedulers.append(scheduler)
        scheduler.submit([1], 1)
        scheduler.submit([2], 1)
        with self.assertRaises(RequestRefused) as refused:
            scheduler.submit([3], 1)
        self.assertEqual(refused.exception.status, 503)
        self.assertIn("2 of 2", str(refused.exception))

    async def test_prompt_tokens_past_the_target_times_the_rate_are_refused_with_the_drain_time(self) -> None:
        # 10 tokens/s for 5 s: 50 prompt tokens may wait; the bound's arithmetic, never the host's speed
        scheduler = tiny_engine(num_blocks=40, ttft_target_s=5.0, prefill_rate=10.0).build()  # not started
        self.schedulers.append(scheduler)
        first = scheduler.submit([1] * 30, 1)  # an empty queue takes any prompt, even one past the bound alone
        scheduler.submit([2] * 20, 1)  # 50 waiting: exactly the bound
        with self.assertRaises(RequestRefused) as refused:
            scheduler.submit([3], 1)  # 51 would pass it
        error = refused.exception
        self.assertEqual((error.status, error.code, error.retry_after_s), (503, "prefill_queue_full", 5))
        self.assertIn("50 prompt tokens wait for prefill; with this request's 1 they would pass 50", str(error))
        self.assertIn("5 s time-to-first-token target at the 10 tokens/s", str(error))
        self.assertEqual((scheduler.counters.refused_prefill_bound, scheduler.waiting_prompt_tokens), (1, 50))
        scheduler.waiting.remove(first)  # once 30 of them are prefilled, the same request fits
        scheduler.submit([3], 1)
        self.assertEqual(scheduler.metrics()["waiting_prompt_tokens"], 21)

    async def test_without_a_target_only_the_count_bounds_the_queue(self) -> None:
        scheduler = tiny_engine(num_blocks=40, prefill_rate=10.0).build()  # ttft_target_s None: no time bound
        self.schedulers.append(scheduler)
        for _ in range(5):
            scheduler.submit([1] * 30, 1)  # 150 tokens, 15 s at 10 tokens/s: accepted all the same
        self.assertEqual(scheduler.counters.refused_prefill_bound, 0)

    async def test_a_started_scheduler_measures_its_prefill_rate_and_every_prefill_updates_it(self) -> None:
        scheduler = self.start(num_blocks=40, ttft_target_s=5.0)
        await eventually(lambda: scheduler.prefill_rate is not None, "the start-up probe to seed the rate")
        rate = scheduler.prefill_rate
        assert rate is not None
        self.assertGreater(rate.tokens_per_s, 0)
        self.assertEqual((rate.observed_calls, scheduler.pool.num_used_blocks), (0, 0))  # the probe's blocks are back
        _, end = await drain(scheduler.submit([5] * 10, 2))
        self.assertIsInstance(end, Finished)
        self.assertEqual(rate.observed_calls, 1)
        self.assertIsNotNone(scheduler.metrics()["prefill_tokens_per_s"])

    async def test_a_start_up_probe_that_fails_is_raised_to_whoever_waits_for_the_rate_not_waited_on_forever(
            self) -> None:
        scheduler = tiny_engine(num_blocks=40, ttft_target_s=5.0).build()

        def failing_prefill(*args: object) -> None:
            raise RuntimeError("the model cannot prefill")

        scheduler.model.prefill = failing_prefill  # type: ignore[method-assign]
        scheduler.start()
        self.schedulers.append(scheduler)
        with self.assertRaisesRegex(RuntimeError, "the model cannot prefill"):
            await within(scheduler.seeded(), "the failed probe to be reported")
        self.assertIsNone(scheduler.prefill_rate)
        self.assertEqual(scheduler.pool.num_used_blocks, 0)  # the probe's blocks went back

    async def test_a_cancelled_request_stops_within_one_iteration_and_returns_its_blocks(self) -> None:
        scheduler = self.start(num_blocks=40)
        long = scheduler.submit([5] * 10, 60)
        other = scheduler.submit([6] * 3, 40)
        async with bounded("the long request's fifth token"):
            while len(long.output) < 5:
                await long.events.get()
        scheduler.disconnect(long)
        tokens, end = await within(drain(long), "the cancelled request to end")
        self.assertEqual(long.status, Status.CANCELLED)
        self.assertIsInstance(end, Failed)
        self.assertLessEqual(long.decode_steps_after_gone, 1)  # at most the step already under way
        self.assertLess(len(long.output), 60)
        _, other_end = await within(drain(other), "the other request to finish")
        self.assertEqual(other_end, Finished("length"))
        self.assert_idle_with_every_block_free(scheduler)

    async def test_a_server_ignoring_disconnects_decodes_for_nobody_until_max_tokens(self) -> None:
        scheduler = self.start(num_blocks=40, honor_disconnect=False)
        request = scheduler.submit([5] * 10, 30)
        async with bounded("the request's third token"):
            while len(request.output) < 3:
                await request.events.get()
        scheduler.disconnect(request)
        tokens, end = await within(drain(request), "the request to run to max_tokens")
        self.assertEqual(end, Finished("length"))
        self.assertEqual(len(request.output), 30)
        self.assertGreaterEqual(scheduler.counters.tokens_after_disconnect, 30 - 3 - 1)
        self.assertGreater(scheduler.counters.block_seconds_after_disconnect, 0)
        self.assert_idle_with_every_block_free(scheduler)

    async def test_honoured_disconnects_cost_exactly_the_rows_of_the_step_under_way_and_are_counted(self) -> None:
        scheduler = self.start(num_blocks=40)
        requests = [scheduler.submit([5] * 10, 30), scheduler.submit([6] * 3, 30), scheduler.submit([7] * 6, 30)]
        with await self.gate_after_prefill(scheduler, requests) as gate:
            scheduler.disconnect(requests[0])  # both leave while one decode step is held mid-flight
            scheduler.disconnect(requests[1])
            gate.open()
            outcomes = await within(asyncio.gather(*(drain(r) for r in requests)), "every request to end")
        counters = scheduler.counters
        self.assertEqual([r.status for r in requests], [Status.CANCELLED, Status.CANCELLED, Status.FINISHED])
        self.assertEqual(len(outcomes[2][0]), 30)
        self.assertEqual([r.decode_steps_after_gone for r in requests], [1, 1, 0])
        self.assertEqual((counters.cancelled, counters.decode_rows_after_disconnect, counters.rows_dropped,
                          counters.decode_steps_with_departed, counters.tokens_after_disconnect), (2, 2, 2, 1, 0))
        self.assert_every_row_accounted_for(counters)
        self.assert_idle_with_every_block_free(scheduler)

    async def test_ignored_disconnects_decode_and_stream_every_remaining_row_for_nobody_and_are_counted(self) -> None:
        scheduler = self.start(num_blocks=40, honor_disconnect=False)
        requests = [scheduler.submit([5] * 10, 30), scheduler.submit([6] * 3, 12)]
        with await self.gate_after_prefill(scheduler, requests) as gate:
            scheduler.disconnect(requests[0])
            gate.open()
            await within(asyncio.gather(*(drain(r) for r in requests)), "every request to run to max_tokens")
        counters = scheduler.counters
        self.assertEqual([len(r.output) for r in requests], [30, 12])
        self.assertEqual((counters.cancelled, counters.rows_dropped), (0, 0))
        self.assertEqual((counters.decode_rows_after_disconnect, counters.tokens_after_disconnect,
                          counters.decode_steps_with_departed), (29, 29, 29))  # every step after the prefill
        self.assert_every_row_accounted_for(counters)
        self.assert_idle_with_every_block_free(scheduler)

    async def test_fail_all_fails_waiting_requests_at_once_running_ones_after_the_step_under_way_and_refuses_more(
            self) -> None:
        scheduler = self.start(num_blocks=40, policy=MaxRunning(1))
        running, waiting = scheduler.submit([5] * 10, 30), scheduler.submit([6] * 3, 30)
        with await self.gate_after_prefill(scheduler, [running]) as gate:
            scheduler.fail_all("the server is shutting down")
            _, waiting_end = await within(drain(waiting), "the waiting request to fail")
            held = (running.done, scheduler.pool.num_used_blocks)  # the held step still writes into its blocks
            settled_while_held = await scheduler.settled(0.05)  # a bound: the step is held until the gate opens
            gate.open()
            settled = await scheduler.settled(HANG_S)
            _, running_end = await within(drain(running), "the running request to fail after its step")
        self.assertEqual(held, (False, 10))
        self.assertEqual((settled_while_held, settled), (False, True))
        self.assertEqual(waiting_end, Failed("the server is shutting down", 503, "server_shutting_down"))
        self.assertEqual(running_end, waiting_end)
        with self.assertRaises(RequestRefused) as refused:
            scheduler.submit([1], 1)
        self.assertEqual((refused.exception.status, str(refused.exception)), (503, "the server is shutting down"))
        self.assertEqual(scheduler.health(), "the server is shutting down")
        self.assert_idle_with_every_block_free(scheduler)

    async def test_a_failing_prefill_fails_only_its_own_request(self) -> None:
        scheduler = self.start(num_blocks=40)
        prefill = scheduler.model.prefill

        def failing_prefill(pool: object, prompts: list[list[int]], tables: list[list[int]]) -> object:
            if any(ids[0] == 9 for ids in prompts):  # packed with the others first, then alone
                raise ValueError("simulated prefill failure")
            return prefill(pool, prompts, tables)

        scheduler.model.prefill = failing_prefill  # type: ignore[method-assign]
        with self.assertLogs("llm_models.serving.scheduler", "ERROR"):
            requests = [scheduler.submit(prompt, 8) for prompt in ([1] * 5, [9] * 5, [2] * 7)]
            outcomes = await within(asyncio.gather(*(drain(r) for r in requests)), "every request to end")
        self.assertEqual([end for _, end in outcomes], [
            Finished("length"),
            Failed("internal error in the prefill: ValueError: simulated prefill failure", 500, "internal_error"),
            Finished("length")])
        self.assertEqual([len(tokens) for tokens, _ in outcomes], [8, 0, 8])
        self.assertEqual(scheduler.counters.failed_for_error, 1)
        self.assertEqual(scheduler.counters.prefills, 2)  # the packed call failed; the two good prompts alone
        self.assertIsNone(scheduler.health())
        self.assert_idle_with_every_block_free(scheduler)

    async def test_waiting_requests_cancelled_before_admission_never_take_blocks(self) -> None:
        scheduler = self.start(num_blocks=8, policy=KVBudget(8 * tiny_engine().block_bytes))
        first = scheduler.submit([1] * 20, 12)  # 8 blocks: the whole budget
        queued = [scheduler.submit([2] * 4, 4) for _ in range(3)]
        for request in queued:
            scheduler.disconnect(request)
        await within(drain(first), "the first request to finish")
        for request in queued:
            _, end = await within(drain(request), "a queued request to fail")
            self.assertIsInstance(end, Failed)
            self.assertEqual(request.output, [])
        self.assert_idle_with_every_block_free(scheduler)

    async def test_a_request_is_stamped_when_admitted_never_while_it_waits(self) -> None:
        scheduler = self.start(num_blocks=8, policy=KVBudget(8 * tiny_engine().block_bytes))
        first = scheduler.submit([1] * 20, 12)  # 8 blocks: the whole budget
        second = scheduler.submit([2] * 4, 4)  # waits until the first has ended
        cancelled = scheduler.submit([3] * 4, 4)
        scheduler.disconnect(cancelled)
        event = await within(first.events.get(), "the first request's first token")
        self.assertIsInstance(event, Token)
        self.assertIsNone(second.admitted_s)  # the pool is full while the first runs: the second still waits
        tokens, _ = await within(drain(first), "the first request to finish")
        self.assertEqual(len(tokens), 11)  # its other tokens: it ran on while the second waited
        await within(drain(second), "the queued request to finish")
        await within(drain(cancelled), "the cancelled request to fail")
        self.assertIsNotNone(first.admitted_s)
        self.assertGreaterEqual(first.admitted_s, first.arrival_s)
        # admitted only once the first had ended and given its blocks back
        self.assertGreater(second.admitted_s, first.admitted_s)
        self.assertIsNone(cancelled.admitted_s)


if __name__ == "__main__":
    unittest.main()
