"""The serving scheduler with a prefix cache: a prompt that starts with cached blocks computes only the rest and
generates what it generates without the cache; a cached block shared by running requests is admitted once; the
cache-aware order admits the longest cached prefix first; /metrics counts queries, hits and evictions."""

from __future__ import annotations

import unittest

from kv_serving.server import parse_args
from kv_serving.testing import TINY_BLOCK, TINY_LAYERS, TINY_MODEL, SchedulerTestCase, drain
from labkit.waiting import within
from llm_models.serving.admission import KVBudget
from llm_models.serving.pool import pool_block_bytes
from llm_models.serving.request import Finished, Request
from llm_models.serving.scheduler import Scheduler

SHARED = [(5 * i + 2) % TINY_MODEL.vocab_size for i in range(3 * TINY_BLOCK)]  # three full blocks


async def finished(request: Request) -> list[int]:
    tokens, end = await drain(request)
    assert isinstance(end, Finished), end
    return tokens


class PrefixScheduling(SchedulerTestCase):

    async def run_one(self, scheduler: Scheduler, prompt: list[int], max_tokens: int = 5) -> tuple[Request, list[int]]:
        request = scheduler.submit(prompt, max_tokens)
        return request, await within(finished(request), "the request to finish")

    async def test_a_shared_prefix_is_computed_once_and_changes_no_token(self) -> None:
        plain, cached = self.start(num_blocks=40), self.start(num_blocks=40, prefix_index="hash")
        prompts = [SHARED + [7, 8, 9], SHARED + [10, 11], SHARED + [7, 8, 9]]
        for prompt in prompts:
            _, expected = await self.run_one(plain, prompt)
            request, tokens = await self.run_one(cached, prompt)
            self.assertEqual(tokens, expected)
        self.assertEqual(plain.counters.prefill_tokens, sum(map(len, prompts)))
        # the first computes everything; the others find the three shared blocks (the third also finds nothing
        # more: its fourth block is partial)
        self.assertEqual(cached.counters.prefill_tokens, sum(map(len, prompts)) - 2 * len(SHARED))
        metrics = cached.metrics()["prefix_caching"]
        self.assertEqual((metrics["requests"], metrics["query_tokens"], metrics["hit_tokens"]),
                         (3, sum(map(len, prompts)), 2 * len(SHARED)))
        self.assertIsNone(plain.metrics()["prefix_caching"])
        self.assertEqual(cached.pool.num_used_blocks, 0)  # every block back, the cached ones free but kept
        self.assertGreaterEqual(metrics["cached_free_blocks"], 3)

    async def test_blocks_filled_while_decoding_are_found_by_the_next_turn(self) -> None:
        plain, cached = self.start(num_blocks=40), self.start(num_blocks=40, prefix_index="hash")
        first = SHARED + [7]  # 13 tokens: three full blocks and one position of the fourth
        _, reply = await self.run_one(cached, first, max_tokens=8)
        # the reply's tokens but the last were fed back and stored: 13 + 7 = 20 positions, five full blocks
        turn = first + reply + [9]
        request, tokens = await self.run_one(cached, turn)
        self.assertEqual(request.cached_tokens, 5 * TINY_BLOCK)
        self.assertEqual(tokens, (await self.run_one(plain, turn))[1])

    async def test_a_page_computed_twice_in_one_batch_is_cached_once(self) -> None:
        for index in ("hash", "radix"):
            with self.subTest(index=index):
                scheduler = self.start(num_blocks=40, prefix_index=index)
                twins = [scheduler.submit(SHARED + [n], 2) for n in (1, 2)]  # admitted and prefilled together
                for twin in twins:
                    await within(finished(twin), "both to finish")
                self.assertEqual(twins[1].cached_tokens, 0)  # nothing was cached when both were admitted
                self.assertEqual(scheduler.pool.cached_blocks, 3)  # the first one's three full blocks, once
                request, _ = await self.run_one(scheduler, SHARED + [3])
                self.assertEqual(request.cached_tokens, len(SHARED))

    async def test_both_indexes_give_the_same_hits_when_nothing_is_evicted(self) -> None:
        prompts = [SHARED + [1], SHARED[:TINY_BLOCK] + [2] * 20, SHARED + [3, 4], SHARED[:2 * TINY_BLOCK] + [5]]
        hits = {}
        for index in ("hash", "radix"):
            scheduler = self.start(num_blocks=60, prefix_index=index)
            hits[index] = [(await self.run_one(scheduler, prompt))[0].cached_tokens for prompt in prompts]
        self.assertEqual(hits["hash"], hits["radix"])
        self.assertEqual(hits["hash"], [0, TINY_BLOCK, len(SHARED), 2 * TINY_BLOCK])

    async def test_a_cached_block_shared_by_running_requests_is_admitted_once(self) -> None:
        # Each request needs 4 blocks (13 prompt tokens and 2 more positions: three shared blocks, one of its own). Six blocks admit both only if the three
        # shared ones count once: 3 + 1 + 1 = 5; counted per request it would be 8.
        budget = KVBudget(6 * pool_block_bytes(TINY_MODEL, TINY_LAYERS, TINY_BLOCK))
        scheduler = self.start(num_blocks=6, policy=budget, prefix_index="hash")
        await self.run_one(scheduler, SHARED + [1], max_tokens=2)  # caches the three shared blocks
        first, second = scheduler.submit(SHARED + [2], 3), scheduler.submit(SHARED + [3], 3)
        await within(finished(first), "the first to finish")
        await within(finished(second), "the second to finish")
        self.assertEqual(scheduler.counters.peak_running, 2)
        self.assertEqual(scheduler.counters.peak_used_blocks, 5)

    async def test_longest_prefix_order_admits_the_cached_prefix_first(self) -> None:
        # 30 blocks; the blocker needs 23, the cold request 11, the warm one 13 (3 of them cached). All three queue
        # at once: first come, first served admits the blocker, then the other two once it is done; the
        # cache-aware order admits the warm request first, then the blocker, then the cold one.
        expected = {"fcfs": ["blocker", "cold", "warm"], "longest-prefix": ["warm", "blocker", "cold"]}
        for order, names in expected.items():
            with self.subTest(order=order):
                scheduler = self.start(num_blocks=30, prefix_index="hash", order=order,
                                       policy=KVBudget(30 * pool_block_bytes(TINY_MODEL, TINY_LAYERS, TINY_BLOCK)))
                await self.run_one(scheduler, SHARED + [1])
                prompts = {"blocker": [9] * 80, "cold": [4] * 40, "warm": SHARED + [2]}
                take, admitted = scheduler.pool.take, []

                def recording(tokens: list[int], *args: object, take=take, admitted=admitted,
                              prompts=prompts) -> list[int]:
                    admitted.append(next(name for name, prompt in prompts.items() if prompt == list(tokens)))
                    return take(tokens, *args)

                scheduler.pool.take = recording  # type: ignore[method-assign]
                requests = [scheduler.submit(prompt, 10 if name == "blocker" else 2) for name, prompt in prompts.items()]
                for request in requests:
                    await within(finished(request), "every request to finish")
                self.assertEqual(admitted, names)

    async def test_a_waiting_prompt_is_hashed_once_however_often_it_is_looked_up(self) -> None:
        # a queue behind a request that holds most of the pool: every submit prices the queue (the TTFT bound),
        # every iteration sorts it by cached prefix and looks at its head; each full block is still hashed once
        scheduler = self.start(num_blocks=30, prefix_index="hash", order="longest-prefix",
                               policy=KVBudget(30 * pool_block_bytes(TINY_MODEL, TINY_LAYERS, TINY_BLOCK)))
        await self.run_one(scheduler, SHARED + [1])
        hashed: list[int] = []
        index = scheduler.pool.index
        chain = index.hash_next

        def counting(parent: bytes, page: list[int], chain=chain, hashed=hashed) -> bytes:
            hashed.append(1)
            return chain(parent, page)

        index.hash_next = counting  # type: ignore[method-assign]
        prompts = [[9] * 80, *[SHARED + [2, i] for i in range(6)]]
        requests = [scheduler.submit(prompt, 10 if len(prompt) == 80 else 2) for prompt in prompts]
        for request in requests:
            await within(finished(request), "every request to finish")
        stored = sum(len(r.keys) for r in requests)  # every position each request wrote, prompt and fed-back tokens
        self.assertGreater(scheduler.counters.iterations, 10)
        self.assertGreater(scheduler.pool.stats.hit_tokens, 0)  # the shared blocks were found: lookups hashed
        self.assertGreater(len(hashed), 0)
        self.assertLessEqual(len(hashed), stored // TINY_BLOCK)

    def test_the_server_refuses_a_cache_aware_order_without_a_cache(self) -> None:
        with self.assertRaises(SystemExit):
            parse_args(["--schedule", "longest-prefix"])
        args = parse_args(["--prefix-caching", "radix", "--schedule", "longest-prefix"])
        self.assertEqual((args.prefix_caching, args.schedule), ("radix", "longest-prefix"))


if __name__ == "__main__":
    unittest.main()
