"""Scheduler invariants: budget never exceeded, no block leaked, cancellation within one iteration; one pass's
decisions (``schedule``) without a model or an event loop; the waiting queue's order kept without sorting; and the
serving core kept free of HTTP, whose statuses the server alone maps refusals to."""

from __future__ import annotations

import ast
import asyncio
import random
import unittest
from pathlib import Path

import llm_models.serving
from kv_serving.protocol import HTTP_STATUS
from kv_serving.testing import (
    TINY_BLOCK,
    TINY_LAYERS,
    TINY_MODEL,
    SchedulerTestCase,
    StepGate,
    Unrunnable,
    drain,
    greedy_alone,
    ran,
    tiny_engine,
)
from labkit.waiting import HANG_S, bounded, eventually, within
from llm_models.serving.admission import KVBudget, MaxRunning
from llm_models.serving.output import ScheduledPrefill
from llm_models.serving.pool import LayeredPool
from llm_models.serving.prefill_bound import DECAY, PrefillCost, over_bound
from llm_models.serving.prefix import CachingPool
from llm_models.serving.refusals import Refusal, RequestRefused
from llm_models.serving.request import Failed, Finished, Request, Status, Token
from llm_models.serving.scheduler import Counters, Scheduler, prefill_groups
from llm_models.serving.waiting import WaitingQueue


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


class PrefillCostTest(unittest.TestCase):
    def test_the_per_token_part_is_decayed_excess_seconds_over_decayed_tokens_and_a_given_cost_never_moves(
            self) -> None:
        cost = PrefillCost.probed(0.1, 64, 1.1)  # the probe: one token in 0.1 s, 64 tokens in 1.1 s
        self.assertAlmostEqual(cost.per_token_s, 1.0 / 64, places=12)
        cost.observe(100, 1.1)  # 1.0 s beyond the call's fixed part
        self.assertAlmostEqual(cost.tokens_per_s, (DECAY * 64 + 100) / (DECAY * 1.0 + 1.0), places=12)
        self.assertAlmostEqual(cost.call_s(10), 0.1 + 10 * cost.per_token_s, places=12)
        cost.observe(0, 0.5)  # a call that prefilled nothing says nothing of the cost
        self.assertEqual(cost.observed_calls, 1)
        given = PrefillCost.given(10.0, per_call_s=0.5)
        given.observe(1000, 1.0)
        self.assertEqual((given.tokens_per_s, given.per_call_s, given.observed_calls), (10.0, 0.5, 0))
        for bad in (0.0, -1.0, float("inf"), float("nan")):
            with self.subTest(rate=bad), self.assertRaisesRegex(ValueError, "tokens per second above 0"):
                PrefillCost.given(bad)
        with self.assertRaisesRegex(ValueError, "fixed cost"):
            PrefillCost.given(10.0, per_call_s=-1.0)
        disturbed = PrefillCost.probed(0.2, 64, 0.1)  # the long call finished first: all of it priced per token
        self.assertEqual((disturbed.per_call_s, disturbed.tokens_per_s), (0.0, 640.0))

    def test_one_token_prefills_leave_the_rate_of_long_ones_where_it_was(self) -> None:
        """A one-token prefill still reads every weight: priced as a call, it no longer drags the per-token rate
        down (a rate alone fell from 363 to 30 tokens/s after 40 of them and refused prompts that fit)."""
        cost = PrefillCost.probed(0.05, 256, 0.05 + 256 / 363)
        for _ in range(40):
            cost.observe(1, 0.05 + 1 / 363)
        self.assertAlmostEqual(cost.tokens_per_s, 363, places=6)
        self.assertIsNone(over_bound([200, 200, 200], 0.0, 200, 10.0, cost))  # four 200-token prompts: 2.4 s

    def test_the_call_under_way_counts_what_it_has_run_and_retry_after_is_when_the_prompt_fits(self) -> None:
        cost = PrefillCost.given(100.0, per_call_s=1.0)  # a call: 1 s + 10 ms a token
        self.assertIsNone(over_bound([400], 1.5, 400, 10.0, cost))  # 5 s ahead, 1.5 of it done: 3.5 + 5 = 8.5 s
        over = over_bound([400, 400], 0.0, 400, 10.0, cost)  # 10 s ahead + 5 s of its own
        assert over is not None
        self.assertEqual(over.retry_after_s, 5)  # once 5 s of the work ahead is done, 5 s are left: 5 + 5 = 10
        self.assertIsNone(over_bound([400, 400], 5.0, 400, 10.0, cost))  # and then it fits
        self.assertIn("2 prefills (800 prompt tokens) wait ahead, about 10.0 s of work", over.message)
        alone = over_bound([], 0.0, 1000, 10.0, cost)  # 11 s alone: no queue makes it fit
        assert alone is not None
        self.assertIsNone(alone.retry_after_s)
        self.assertIn("beyond its 10 s time-to-first-token target even with nothing queued", alone.message)


SHARED = [(5 * i + 2) % TINY_MODEL.vocab_size for i in range(3 * TINY_BLOCK)]  # three full blocks


class ScheduleWithoutALoop(unittest.TestCase):
    """``schedule()`` called by hand: no event loop, no model call, a pool of a few blocks."""

    def scheduler(self, num_blocks: int, budget_blocks: int, prefix: bool = False, **options: object) -> Scheduler:
        pool = (CachingPool(TINY_MODEL, TINY_LAYERS, num_blocks, TINY_BLOCK) if prefix
                else LayeredPool(TINY_MODEL, TINY_LAYERS, num_blocks, TINY_BLOCK))
        return Scheduler(Unrunnable(), pool, KVBudget(budget_blocks * pool.block_bytes), prefix=pool if prefix else None,
                         **options)  # type: ignore[arg-type]

    def test_requests_that_fit_are_prefilled_together_one_that_does_not_waits_and_running_ones_decode(self) -> None:
        scheduler = self.scheduler(num_blocks=8, budget_blocks=8)
        first = scheduler.submit([1] * 5, 4)  # 8 positions: 2 blocks of 4
        second = scheduler.submit([2] * 6, 3)  # 8 positions: 2 blocks
        third = scheduler.submit([3] * 20, 5)  # 24 positions: 6 blocks, beyond the 4 the first two leave
        output = scheduler.schedule()
        self.assertEqual(output.prefill_groups, ((ScheduledPrefill(first, 0, 5), ScheduledPrefill(second, 0, 6)),))
        self.assertEqual(output.decodes, (first, second))  # after their prefill, in the same pass
        self.assertEqual((output.finished, output.preempted), ((), ()))
        self.assertEqual(list(scheduler.waiting), [third])
        self.assertEqual((third.status, third.table, scheduler.pool.num_used_blocks), (Status.WAITING, [], 4))

        ran(output)
        following = scheduler.schedule()  # nothing finished: the two still run, the third still does not fit
        self.assertEqual((following.prefills, following.decodes), ((), (first, second)))
        self.assertEqual(list(scheduler.waiting), [third])

    def test_a_departed_client_is_retired_in_the_next_pass_and_its_blocks_admit_the_head_of_the_queue(self) -> None:
        scheduler = self.scheduler(num_blocks=8, budget_blocks=8)
        first, second = scheduler.submit([1] * 5, 4), scheduler.submit([2] * 6, 3)
        third = scheduler.submit([3] * 20, 5)
        ran(scheduler.schedule())
        scheduler.disconnect(first)
        output = scheduler.schedule()
        self.assertEqual(output.finished, (first,))
        self.assertEqual(first.events.get_nowait(), Failed("cancelled: the client disconnected", Refusal.REQUEST_FAILED))
        self.assertEqual((output.prefills, output.decodes), ((ScheduledPrefill(third, 0, 20),), (second, third)))
        self.assertEqual((scheduler.pool.num_used_blocks, list(scheduler.waiting)), (8, []))
        self.assertEqual(scheduler.schedule().finished, ())  # each retirement is told once

    def test_prompts_admitted_together_are_packed_into_one_prefill_in_admission_order(self) -> None:
        scheduler = self.scheduler(num_blocks=24, budget_blocks=24)
        requests = [scheduler.submit([4] * 30, 1) for _ in range(3)]  # 30 positions each: 8 blocks
        output = scheduler.schedule()
        self.assertEqual([[p.request for p in group] for group in output.prefill_groups], [requests])  # 90 tokens

    def test_a_prompt_found_in_the_prefix_cache_is_prefilled_from_the_end_of_its_cached_blocks(self) -> None:
        scheduler = self.scheduler(num_blocks=20, budget_blocks=20, prefix=True)
        first = scheduler.submit(SHARED + [1], 2)
        output = scheduler.schedule()
        self.assertEqual(output.prefills, (ScheduledPrefill(first, 0, len(SHARED) + 1),))
        ran(output)
        assert scheduler.prefix is not None
        scheduler.prefix.offer(first.keys, first.table)  # what the loop does once the prefill has written them
        second = scheduler.submit(SHARED + [2, 3], 2)
        output = scheduler.schedule()
        self.assertEqual(output.prefills, (ScheduledPrefill(second, len(SHARED), 2),))
        self.assertEqual(output.decodes, (first, second))
        self.assertEqual(second.computed, len(SHARED))  # its cached positions: computed, as far as decoding goes

    def test_prefix_caching_is_a_component_given_to_the_scheduler_never_found_by_the_pool_type(self) -> None:
        pool = CachingPool(TINY_MODEL, TINY_LAYERS, 8, TINY_BLOCK)
        policy = KVBudget(8 * pool.block_bytes)
        self.assertIsNone(Scheduler(Unrunnable(), pool, policy).prefix)  # type: ignore[arg-type]
        other = LayeredPool(TINY_MODEL, TINY_LAYERS, 8, TINY_BLOCK)
        with self.assertRaisesRegex(ValueError, "pass the CachingPool as both pool and prefix"):
            Scheduler(Unrunnable(), other, policy, prefix=pool)  # type: ignore[arg-type]
        with self.assertRaisesRegex(ValueError, "it needs a prefix cache"):
            Scheduler(Unrunnable(), pool, policy, order="longest-prefix")  # type: ignore[arg-type]


class WaitingQueueOrder(unittest.TestCase):
    def test_the_longest_prefix_order_is_what_sorting_by_the_cache_as_it_is_now_gives(self) -> None:
        """Requests arrive, leave and are looked up again while blocks are cached and evicted under them; after each
        ``reorder`` the queue reads as the queue sorted by (-cached blocks now, arrival)."""
        rng = random.Random(7)
        families = [[(7 * f + 3 * i + 1) % TINY_MODEL.vocab_size for i in range(4 * TINY_BLOCK)] for f in range(3)]
        pool = CachingPool(TINY_MODEL, TINY_LAYERS, 10, TINY_BLOCK)
        queue, arrival = WaitingQueue(pool), {}
        for step in range(300):
            action = rng.random()
            if action < 0.4:
                family = rng.choice(families)
                request = Request(f"r{step}", family[:rng.randrange(4) * TINY_BLOCK] + [rng.randrange(60)], 2)
                arrival[request] = step
                queue.add(request)
            elif action < 0.8:  # blocks computed for some prompt and cached; taking them may evict others
                tokens = rng.choice(families)[:rng.randint(1, 4) * TINY_BLOCK]
                table = pool.allocate(len(tokens) // TINY_BLOCK)
                pool.offer(tokens, table)
                pool.release(table)
            elif len(queue):
                queue.remove(rng.choice(list(queue)))
            if step % 3 == 0:
                queue.reorder()
                expected = sorted(queue, key=lambda r: (-len(pool.match(r.keys)), arrival[r]))
                self.assertEqual(list(queue), expected, f"step {step}")
        self.assertGreater(pool.stats.evictions, 0)  # the cache did shrink under the queue, not only grow

    def test_without_a_cache_the_queue_is_first_come_first_served(self) -> None:
        queue = WaitingQueue()
        requests = [Request(f"r{i}", [1] * (10 - i), 2) for i in range(5)]
        for request in requests:
            queue.add(request)
        queue.remove(requests[2])
        queue.reorder()
        self.assertEqual((list(queue), queue.head, requests[2] in queue), ([*requests[:2], *requests[3:]], requests[0],
                                                                           False))


SERVING_CORE = Path(llm_models.serving.__file__).parent
HTTP_PACKAGES = {"http", "h11", "httpx", "aiohttp", "starlette", "uvicorn", "fastapi", "kv_serving"}


class TheCoreKnowsNoHttp(unittest.TestCase):
    def test_no_module_of_the_serving_core_imports_an_http_library_or_the_serving_lab(self) -> None:
        imports = []
        for path in sorted(SERVING_CORE.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
                imports += [f"{path.relative_to(SERVING_CORE)}: {name}" for name in names
                            if name.split(".")[0] in HTTP_PACKAGES]
        self.assertGreater(len(list(SERVING_CORE.rglob("*.py"))), 10)  # the walk found the core
        self.assertEqual(imports, [])

    def test_every_refusal_has_one_http_status(self) -> None:
        self.assertEqual(set(HTTP_STATUS), set(Refusal))
        self.assertTrue(all(status in (400, 500, 503) for status in HTTP_STATUS.values()))


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
        self.assertEqual(refused.exception.refusal, Refusal.KV_BUDGET_EXCEEDED)
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
        self.assertEqual(refused.exception.refusal, Refusal.QUEUE_FULL)
        self.assertIn("2 of 2", str(refused.exception))

    async def test_prefills_past_the_target_are_refused_with_the_time_until_the_request_fits(self) -> None:
        # 10 tokens/s for 5 s: 50 prompt tokens may wait; the bound's arithmetic, never the host's speed
        scheduler = tiny_engine(num_blocks=40, ttft_target_s=5.0, prefill_rate=10.0).build()  # not started
        self.schedulers.append(scheduler)
        first = scheduler.submit([1] * 30, 1)
        scheduler.submit([2] * 20, 1)  # 50 waiting: exactly the bound
        with self.assertRaises(RequestRefused) as refused:
            scheduler.submit([3], 1)  # 51 would pass it
        error = refused.exception
        self.assertEqual((error.refusal, error.retry_after_s), (Refusal.PREFILL_QUEUE_FULL, 1))  # 0.1 s of work
        self.assertIn("2 prefills (50 prompt tokens) wait ahead, about 5.0 s of work", str(error))
        self.assertIn("first token would come after 5.1 s, beyond the 5 s target", str(error))
        self.assertEqual((scheduler.counters.refused_prefill_bound, scheduler.waiting_prompt_tokens), (1, 50))
        scheduler.waiting.remove(first)  # once 30 of them are prefilled, the same request fits
        scheduler.submit([3], 1)
        self.assertEqual(scheduler.metrics()["waiting_prompt_tokens"], 21)

    async def test_a_request_behind_a_head_that_waits_for_blocks_is_priced_with_that_wait(self) -> None:
        # 10 tokens/s, so a decode step of one row is priced 0.1 s; blocks of 4 positions, 12 in the pool
        for held_tokens, refused in ((40, True), (4, False)):
            with self.subTest(held_tokens=held_tokens):
                scheduler = tiny_engine(num_blocks=12, ttft_target_s=5.0, prefill_rate=10.0).build()  # not started
                self.schedulers.append(scheduler)
                holder = scheduler.submit([1] * 2, held_tokens)  # 41 positions = 11 blocks (40), or 2 (4)
                scheduler.schedule()  # admitted, holding its blocks until its last token
                self.assertIn(holder, scheduler.running)
                head = scheduler.submit([2] * 4, 4)  # 2 blocks: waits for the holder's while it holds 11
                scheduler.schedule()
                self.assertEqual(head in scheduler.running, not refused)
                # 8 tokens: 0.2 + 0.4 + 0.8 s of prefill, 1.4 s in all, far inside the target; behind the holder's 40
                # remaining steps (4.0 s) 5.4 s, past it
                if not refused:
                    scheduler.submit([3] * 8, 1)
                    continue
                with self.assertRaises(RequestRefused) as caught:
                    scheduler.submit([3] * 8, 1)
                error = caught.exception
                self.assertEqual((error.refusal, error.retry_after_s), (Refusal.PREFILL_QUEUE_FULL, 1))
                self.assertIn("waits about 4.0 s for running requests to free KV blocks", str(error))
                self.assertIn("first token would come after 5.4 s", str(error))

    async def test_the_head_waits_for_the_running_request_that_ends_first_not_the_last(self) -> None:
        scheduler = tiny_engine(num_blocks=12, ttft_target_s=3.0, prefill_rate=10.0).build()  # not started
        self.schedulers.append(scheduler)
        scheduler.submit([1] * 2, 30)  # 31 positions = 8 blocks, 30 steps to go
        scheduler.submit([1] * 2, 10)  # 11 positions = 3 blocks, 10 steps to go
        scheduler.schedule()
        self.assertEqual(len(scheduler.running), 2)  # 11 of 12 blocks held
        scheduler.submit([2] * 4, 4)  # 2 blocks: the 10-step holder's 3 free them, 10 steps of two rows at 0.2 s
        with self.assertRaises(RequestRefused) as caught:
            scheduler.submit([3] * 8, 1)  # 2.0 s for blocks + 0.8 s of prefill ahead + its own 0.8 s: 3.6 s
        self.assertIn("waits about 2.0 s for running requests to free KV blocks", str(caught.exception))
        self.assertIn("first token would come after 3.6 s", str(caught.exception))

    async def test_a_prompt_whose_own_prefill_passes_the_target_is_refused_even_at_an_empty_queue(self) -> None:
        scheduler = tiny_engine(num_blocks=40, ttft_target_s=5.0, prefill_rate=10.0).build()  # not started
        self.schedulers.append(scheduler)
        with self.assertRaises(RequestRefused) as refused:
            scheduler.submit([1] * 60, 1, prompt_field="messages")  # 6 s alone
        error = refused.exception
        self.assertEqual((error.refusal, error.param), (Refusal.PROMPT_OVER_TTFT_TARGET, "messages"))
        self.assertIn("this prompt's 60 tokens to prefill take about 6.0 s", str(error))
        self.assertEqual(len(scheduler.waiting), 0)
        scheduler.submit([1] * 50, 1)  # 5 s alone: taken

    async def test_without_a_target_only_the_count_bounds_the_queue(self) -> None:
        scheduler = tiny_engine(num_blocks=40, prefill_rate=10.0).build()  # ttft_target_s None: no time bound
        self.schedulers.append(scheduler)
        for _ in range(5):
            scheduler.submit([1] * 30, 1)  # 150 tokens, 15 s at 10 tokens/s: accepted all the same
        self.assertEqual(scheduler.counters.refused_prefill_bound, 0)

    async def test_a_started_scheduler_measures_its_prefill_cost_and_every_prefill_updates_it(self) -> None:
        scheduler = self.start(num_blocks=40, ttft_target_s=5.0)
        await eventually(lambda: scheduler.prefill_cost is not None, "the start-up probe to seed the cost")
        rate = scheduler.prefill_cost
        assert rate is not None
        self.assertGreater(rate.tokens_per_s, 0)
        # NOTE: not > 0: on a busy host the tiny model's long probe can finish before its one-token one, and then
        # the whole call is priced per token (PrefillCost.probed): which happened is the host's speed, not a state
        self.assertGreaterEqual(rate.per_call_s, 0)
        self.assertEqual((rate.observed_calls, scheduler.pool.num_used_blocks), (0, 0))  # the probe's blocks are back
        _, end = await drain(scheduler.submit([5] * 10, 2))
        self.assertIsInstance(end, Finished)
        self.assertEqual(rate.observed_calls, 1)
        self.assertIsNotNone(scheduler.metrics()["prefill_tokens_per_s"])
        self.assertEqual(scheduler.metrics()["prefill_call_s"], rate.per_call_s)

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
        self.assertIsNone(scheduler.prefill_cost)
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
        self.assertEqual(waiting_end, Failed("the server is shutting down", Refusal.SERVER_SHUTTING_DOWN))
        self.assertEqual(running_end, waiting_end)
        with self.assertRaises(RequestRefused) as refused:
            scheduler.submit([1], 1)
        self.assertEqual((refused.exception.refusal, str(refused.exception)),
                         (Refusal.SERVER_SHUTTING_DOWN, "the server is shutting down"))
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
            Failed("internal error in the prefill: ValueError: simulated prefill failure", Refusal.INTERNAL_ERROR),
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
