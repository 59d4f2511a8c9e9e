"""The caching pool: a block shared by running requests is stored and counted once; a failed ``take`` leaves
nothing held; freed cached blocks stay findable until the pool needs them (then counted as evictions); a prompt
never matches its last token; release refuses a block not in use and frees a table tail first; the stats count
queries and hits in tokens. vLLM's end-to-end example is replayed block for block, and a pool that frees a block
another request still holds is caught handing it out twice."""

from __future__ import annotations

import random
import unittest
from dataclasses import dataclass

import torch

from kv_prefix.broken import EagerFreePool
from llm_models.paged.pool import PoolExhausted
from llm_models.serving.prefix import BlockKeys, CachingPool, PrefixStats

BLOCK = 4
INDEXES = ("hash", "radix")


@dataclass(frozen=True)
class Tiny:
    kv_heads: int = 1
    head_dim: int = 4
    dtype: torch.dtype = torch.float32


def pool(num_blocks: int, index: str = "hash", kind: type[CachingPool] = CachingPool) -> CachingPool:
    return kind(Tiny(), 1, num_blocks, BLOCK, index=index)


def admit(cache: CachingPool, prompt: list[int], extra: int = 0) -> list[int]:
    """What the scheduler does for a prompt: look it up, take its hits and the blocks it lacks (``extra`` more for
    its output), and offer the table once the prompt is written."""
    hits = cache.match(prompt)
    table = cache.take(prompt, hits, -(-len(prompt) // BLOCK) + extra - len(hits))
    cache.offer(prompt, table)
    return table


def holders(cache: CachingPool, tables: list[list[int]]) -> list[int]:
    """How many of ``tables`` hold each block."""
    return [sum(table.count(block) for table in tables) for block in range(cache.num_blocks)]


class Sharing(unittest.TestCase):
    def test_a_block_shared_by_two_requests_is_counted_once(self) -> None:
        for index in INDEXES:
            with self.subTest(index=index):
                cache = pool(8, index)
                first = admit(cache, list(range(9)))  # 3 blocks, 2 of them full and cached
                second = admit(cache, [*range(8), 50, 51])  # shares the 2 full blocks
                self.assertEqual(second[:2], first[:2])
                self.assertEqual(cache.num_used_blocks, 4)
                self.assertEqual(cache.num_free_blocks, 4)
                self.assertEqual(cache.refcount, holders(cache, [first, second]))

    def test_shared_counts_only_the_hits_a_running_request_holds(self) -> None:
        cache = pool(8)
        prompt = list(range(13))
        first = admit(cache, prompt)
        hits = cache.match(prompt)
        self.assertEqual(hits, first[:3])
        self.assertEqual(cache.shared(hits), 3)
        cache.release(first)
        self.assertEqual(cache.match(prompt), hits)  # still cached, no longer held
        self.assertEqual(cache.shared(hits), 0)
        partial = admit(cache, [*range(4), 99])  # takes back the first block only
        self.assertEqual(partial[0], hits[0])
        self.assertEqual(cache.shared(hits), 1)

    def test_a_failed_take_holds_nothing_and_counts_nothing(self) -> None:
        for index in INDEXES:
            with self.subTest(index=index):
                cache = pool(6, index)
                prompt = list(range(9))
                other = admit(cache, [7, 7, 7, 7, 7])  # 2 blocks, held throughout
                first = admit(cache, prompt)  # 3 blocks: 1 left free
                cache.release(first)  # 2 of them stay cached and free
                hits = cache.match(prompt)
                self.assertEqual(len(hits), 2)
                refcount, stats, free = list(cache.refcount), PrefixStats(**vars(cache.stats)), cache.num_free_blocks
                with self.assertRaises(PoolExhausted):
                    cache.take(prompt, hits, 3)  # 2 hits and 3 new blocks: only 2 other blocks are free
                self.assertEqual(cache.refcount, refcount)
                self.assertEqual(cache.stats, stats)
                self.assertEqual(cache.num_free_blocks, free)
                self.assertEqual(cache.num_used_blocks, len(other))
                self.assertEqual(cache.match(prompt), hits)  # nothing evicted making room that was not there
                self.assertEqual(cache.stats.evictions, 0)

    # A take that cannot be served must not touch the free queue: holding its hits first and giving them back
    # would put them at the queue's back, as if freed just now (vLLM checks the free count first, as take does).
    def test_a_failed_take_leaves_the_eviction_order_unchanged(self) -> None:
        cache = pool(6)  # the hash index: the free queue's order is the eviction order
        prompt = list(range(9))
        cache.release(admit(cache, prompt))  # [0, 1, 2]; 0 and 1 cached
        cache.release(cache.allocate(1))  # block 3, freed last
        hits = cache.match(prompt)
        self.assertEqual(hits, [0, 1])
        free = list(cache.free)
        self.assertEqual(free, [4, 5, 2, 1, 0, 3])
        with self.assertRaises(PoolExhausted):
            cache.take(prompt, hits, 5)  # 4 other blocks are free
        self.assertEqual(list(cache.free), free)

    def test_a_failed_take_with_a_hit_another_request_holds_leaves_it_held(self) -> None:
        cache = pool(4)
        prompt = list(range(9))
        first = admit(cache, prompt)  # 3 of 4 blocks
        hits = cache.match(prompt)
        with self.assertRaises(PoolExhausted):
            cache.take(prompt, hits, 2)  # 1 block is free
        self.assertEqual(cache.refcount, holders(cache, [first]))
        self.assertEqual(cache.num_used_blocks, 3)


class Caching(unittest.TestCase):
    def test_freed_cached_blocks_stay_until_the_pool_needs_them(self) -> None:
        for index in INDEXES:
            with self.subTest(index=index):
                cache = pool(4, index)
                prompt = list(range(9))
                table = admit(cache, prompt)  # [0, 1, 2]: 0 and 1 cached, 2 holds one token
                cache.release(table)
                self.assertEqual(cache.num_used_blocks, 0)
                self.assertEqual(cache.cached_free_blocks, 2)
                self.assertEqual(cache.match(prompt), table[:2])
                taken = cache.allocate(2)  # the two blocks that cache nothing go first
                self.assertEqual(sorted(taken), [2, 3])
                self.assertEqual(cache.stats.evictions, 0)
                self.assertEqual(cache.match(prompt), table[:2])
                taken += cache.allocate(1)  # now a cached block must go: the child, under both indexes
                self.assertEqual(taken[-1], table[1])
                self.assertEqual(cache.stats.evictions, 1)
                self.assertEqual(cache.match(prompt), table[:1])
                taken += cache.allocate(1)
                self.assertEqual(cache.stats.evictions, 2)
                self.assertEqual(cache.match(prompt), [])
                self.assertEqual(cache.cached_blocks, 0)
                with self.assertRaises(PoolExhausted):
                    cache.allocate(1)
                cache.release(taken)
                self.assertEqual(cache.num_free_blocks, 4)

    def test_a_block_held_by_a_request_is_never_evicted(self) -> None:
        for index in INDEXES:
            with self.subTest(index=index):
                cache = pool(6, index)
                held = admit(cache, list(range(9)))
                cache.release(admit(cache, [5] * 9))  # 2 cached free blocks that may go, and 1 uncached
                taken = cache.allocate(cache.num_free_blocks)
                self.assertFalse(set(taken) & set(held))
                self.assertEqual(cache.stats.evictions, 2)
                self.assertEqual(cache.match(list(range(9))), held[:2])

    def test_match_leaves_the_last_token_to_compute(self) -> None:
        for index in INDEXES:
            cache = pool(16, index)
            long = list(range(24))
            table = admit(cache, long)
            for length in range(1, 25):
                with self.subTest(index=index, length=length):
                    hits = cache.match(long[:length])
                    self.assertEqual(hits, table[:(length - 1) // BLOCK])

    def test_a_fully_cached_prompt_still_computes_its_last_block(self) -> None:
        cache = pool(8)
        prompt = list(range(8))
        first = admit(cache, prompt)
        self.assertEqual(cache.cached_blocks, 2)
        self.assertEqual(cache.match(prompt), first[:1])
        second = admit(cache, prompt)  # the second block is computed again, into a new block
        self.assertEqual(second[0], first[0])
        self.assertNotEqual(second[1], first[1])
        self.assertEqual(cache.cached_blocks, 2)  # the copy stays uncached: the first one is kept
        self.assertEqual(cache.stats.hit_tokens, BLOCK)

    def test_random_admissions_and_releases_keep_the_counts_consistent(self) -> None:
        for index in INDEXES:
            rng = random.Random(3)
            cache = pool(12, index)
            heads = [[rng.randrange(5) for _ in range(12)] for _ in range(3)]
            running: list[list[int]] = []
            for step in range(300):
                if running and (rng.random() < 0.4 or cache.num_free_blocks < 5):
                    cache.release(running.pop(rng.randrange(len(running))))
                else:
                    prompt = rng.choice(heads)[:rng.randint(0, 12)] + [rng.randrange(5) for _ in range(rng.randint(1, 6))]
                    try:
                        running.append(admit(cache, prompt, extra=rng.randint(0, 1)))
                    except PoolExhausted:
                        pass
                with self.subTest(index=index, step=step):
                    self.assertEqual(cache.refcount, holders(cache, running))
                    self.assertEqual(cache.num_used_blocks, len({b for table in running for b in table}))
                    self.assertEqual(set(cache.free), {b for b in range(12) if cache.refcount[b] == 0})
            self.assertGreater(cache.stats.hit_tokens, 0)
            self.assertGreater(cache.stats.evictions, 0)


    def test_every_block_a_lookup_finds_holds_the_tokens_it_is_found_for(self) -> None:
        """A shadow of what each block holds (written when a table is taken: a hit keeps its contents, a new block
        gets the request's page there), checked against every lookup through many evictions, both indexes, with
        pages computed twice by requests admitted before either offers (one batch)."""
        for index in INDEXES:
            rng = random.Random(11)
            cache = pool(16, index)
            held: dict[int, tuple[int, ...]] = {}  # block -> the page of tokens written into it
            heads = [[rng.randrange(3) for _ in range(16)] for _ in range(3)]
            running: list[tuple[list[int], list[int]]] = []
            checked = 0
            for step in range(400):
                if running and (rng.random() < 0.45 or cache.num_free_blocks < 6):
                    cache.release(running.pop(rng.randrange(len(running)))[1])
                    continue
                batch = [rng.choice(heads)[:rng.randint(0, 16)] + [rng.randrange(3) for _ in range(rng.randint(1, 5))]
                         for _ in range(rng.randint(1, 2))]
                admitted = []
                for prompt in batch:  # looked up and taken together, offered after both are written
                    hits = cache.match(prompt)
                    for position, block in enumerate(hits):
                        with self.subTest(index=index, step=step, block=block):
                            self.assertEqual(held[block], tuple(prompt[position * BLOCK:(position + 1) * BLOCK]))
                        checked += 1
                    try:
                        table = cache.take(prompt, hits, -(-len(prompt) // BLOCK) - len(hits))
                    except PoolExhausted:
                        continue
                    for position in range(len(hits), len(table)):  # the prefill writes what the hits do not hold
                        held[table[position]] = tuple(prompt[position * BLOCK:(position + 1) * BLOCK])
                    admitted.append((prompt, table))
                for prompt, table in admitted:
                    cache.offer(prompt, table)
                running += admitted
            self.assertGreater(checked, 100)
            self.assertGreater(cache.stats.evictions, 10)


class Release(unittest.TestCase):
    def test_releasing_a_block_not_in_use_names_it(self) -> None:
        cache = pool(4)
        with self.assertRaisesRegex(ValueError, r"block 3 is not in use"):
            cache.release([3])
        table = admit(cache, list(range(6)))
        cache.release(table)
        with self.assertRaisesRegex(ValueError, rf"block {table[0]} is not in use"):
            cache.release(table)

    def test_a_refused_release_changes_nothing(self) -> None:
        cache = pool(4)
        table = admit(cache, list(range(6)))
        free = list(cache.free)
        with self.assertRaisesRegex(ValueError, r"block 3 is not in use"):
            cache.release([*table, 3])
        self.assertEqual(cache.refcount, holders(cache, [table]))
        self.assertEqual(list(cache.free), free)

    def test_release_frees_a_table_tail_first(self) -> None:
        cache = pool(4)
        prompt = list(range(13))
        table = admit(cache, prompt)  # [0, 1, 2, 3]: three full blocks cached, the fourth holds one token
        self.assertEqual(table, [0, 1, 2, 3])
        cache.release(table)
        self.assertEqual(list(cache.free), [3, 2, 1, 0])
        cache.allocate(1)  # block 3 caches nothing
        self.assertEqual(cache.stats.evictions, 0)
        cache.allocate(1)  # the last block of the prefix goes before its parents
        self.assertEqual(cache.stats.evictions, 1)
        self.assertEqual(cache.match(prompt), [0, 1])

    def test_a_block_returns_to_the_free_queue_only_when_its_last_holder_releases_it(self) -> None:
        cache = pool(8)
        first = admit(cache, list(range(9)))
        second = admit(cache, list(range(9)))
        cache.release(first)
        self.assertEqual([b in cache.free for b in first], [False, False, True])
        cache.release(second)
        self.assertTrue(all(b in cache.free for b in second))


class Stats(unittest.TestCase):
    def test_stats_count_queries_and_hits_in_tokens(self) -> None:
        cache = pool(8)
        admit(cache, list(range(10)))
        self.assertEqual((cache.stats.requests, cache.stats.query_tokens, cache.stats.hit_tokens), (1, 10, 0))
        second = [*range(8), 40, 41, 42, 43]
        self.assertEqual(len(cache.match(second)), 2)  # a lookup alone counts nothing
        self.assertEqual((cache.stats.requests, cache.stats.query_tokens, cache.stats.hit_tokens), (1, 10, 0))
        admit(cache, second)
        self.assertEqual((cache.stats.requests, cache.stats.query_tokens, cache.stats.hit_tokens), (2, 22, 8))
        self.assertAlmostEqual(cache.stats.hit_rate, 8 / 22)
        self.assertEqual(cache.stats.cached_blocks_peak, 3)  # 2 shared and the second prompt's third block
        self.assertEqual(cache.stats.evictions, 0)

    def test_no_query_no_hit_rate(self) -> None:
        self.assertIsNone(pool(2).stats.hit_rate)

    def test_an_unknown_index_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "prefix index"):
            pool(2, "lru")


class DocumentExample(unittest.TestCase):
    """vLLM's design document, "Automatic Prefix Caching", Example: block size 4, 10 blocks, the hash index."""

    def test_the_end_to_end_example_allocates_and_evicts_the_documents_blocks(self) -> None:
        cache = pool(10)
        rng = random.Random(7)
        request0 = [rng.randrange(1000) for _ in range(15)]
        # Time 1: 15 tokens, 4 blocks; 3 full and cached.
        table0 = admit(cache, request0)
        self.assertEqual(table0, [0, 1, 2, 3])
        self.assertEqual(cache.cached_blocks, 3)
        # Time 3: a decoded token fills block 3 (cached) and the next one needs block 4.
        request0.append(1001)
        cache.offer(request0, table0)
        table0 += cache.allocate(1)
        self.assertEqual(table0[-1], 4)
        self.assertEqual(cache.cached_blocks, 4)
        # Time 4: 14 tokens, the first 10 request 0's: only the first 2 blocks hit.
        request1 = request0[:10] + [2001, 2002, 2003, 2004]
        hits = cache.match(request1)
        self.assertEqual(hits, [0, 1])
        table1 = cache.take(request1, hits, 2)
        cache.offer(request1, table1)
        self.assertEqual(table1, [0, 1, 5, 6])
        # Time 5 and 6: request 0 then request 1 finish; each frees its blocks nobody else holds, tail first.
        cache.release(table0)
        self.assertEqual(list(cache.free), [7, 8, 9, 4, 3, 2])
        cache.release(table1)
        self.assertEqual(list(cache.free), [7, 8, 9, 4, 3, 2, 6, 5, 1, 0])
        # Time 7: 29 tokens, the first 12 request 0's: hits 0, 1, 2 leave the queue before 5 blocks are taken
        # from its front, the last of them (3) cached and evicted.
        request2 = request0[:12] + [3000 + i for i in range(17)]
        hits = cache.match(request2)
        self.assertEqual(hits, [0, 1, 2])
        table2 = cache.take(request2, hits, 5)
        self.assertEqual(table2, [0, 1, 2, 7, 8, 9, 4, 3])
        self.assertEqual(cache.stats.evictions, 1)
        self.assertEqual(list(cache.free), [6, 5])


class EagerFree(unittest.TestCase):
    """Requests A and B share two cached blocks; A finishes while B still runs, and C takes every block the pool
    reports free."""

    def scenario(self, kind: type[CachingPool]) -> tuple[CachingPool, list[int], list[int]]:
        cache = pool(5, kind=kind)
        a = admit(cache, list(range(9)))  # [0, 1, 2]
        b = admit(cache, [*range(8), 70])  # [0, 1, 3]: 0 and 1 shared
        cache.release(a)
        c = cache.take([90] * 9, [], cache.num_free_blocks)
        return cache, b, c

    def test_the_caching_pool_never_hands_out_a_block_a_request_holds(self) -> None:
        cache, b, c = self.scenario(CachingPool)
        self.assertFalse(set(b) & set(c))
        self.assertEqual(cache.refcount, holders(cache, [b, c]))

    def test_the_eager_free_pool_is_caught_handing_out_a_held_block(self) -> None:
        cache, b, c = self.scenario(EagerFreePool)
        self.assertTrue(set(b) & set(c))  # B still reads keys and values C is about to overwrite
        self.assertNotEqual(cache.refcount, holders(cache, [b, c]))


class SaltedWorkload(unittest.TestCase):
    """Requests under ten salts and none, sharing prompt heads, admitted, decoding (their new full blocks offered),
    released and evicted at random: every hit a lookup returns holds the same salt's same tokens, and the radix index
    keeps no empty salt tree, every cached block reachable from its own tree, no block in use below a free one."""

    SALTS = (None, "a", "b", "c", *(f"tenant-{i}" for i in range(6)))

    def check_tree(self, cache: CachingPool) -> None:
        index = cache.index
        reached: dict[int, object] = {}
        stack = [index.root, *index.salted.values()]
        for salt, root in index.salted.items():
            self.assertTrue(root.children, f"salt {salt!r} keeps an empty tree")
        while stack:
            node = stack.pop()
            for child in node.children.values():
                reached[child.block] = child
                stack.append(child)
                if cache.refcount[child.block] > 0:  # in use: no free node above it
                    parent = node
                    while parent.block >= 0:
                        self.assertGreater(cache.refcount[parent.block], 0)
                        parent = parent.parent
        self.assertEqual(set(reached), set(index.node_of))

    def run_workload(self, index: str, seed: int) -> int:
        rng = random.Random(seed)
        cache = pool(24, index)
        holds: dict[int, tuple[str | None, tuple[int, ...]]] = {}  # block -> the salt and prefix it was written for
        running: list[list] = []
        heads = [[rng.randrange(5) for _ in range(20)] for _ in range(3)]
        hits_seen = 0
        for _ in range(600):
            roll = rng.random()
            if roll < 0.4:
                salt = rng.choice(self.SALTS)
                prompt = rng.choice(heads)[:rng.randrange(1, 17)] + [rng.randrange(5) for _ in range(rng.randrange(5))]
                keys = BlockKeys(prompt, salt)
                hits = cache.match(keys)
                for i, block in enumerate(hits):
                    self.assertEqual(holds.get(block), (salt, tuple(prompt[:(i + 1) * BLOCK])))
                hits_seen += len(hits)
                try:
                    table = cache.take(keys, hits, -(-(len(prompt) + 6) // BLOCK) - len(hits))
                except PoolExhausted:
                    continue
                for i in range(len(hits), len(prompt) // BLOCK):
                    holds[table[i]] = (salt, tuple(prompt[:(i + 1) * BLOCK]))
                cache.offer(keys, table)
                running.append([keys, table, rng.randrange(6)])
            elif roll < 0.75 and running:
                request = rng.choice(running)
                keys, table, left = request
                if left:
                    keys.extend([rng.randrange(5)])
                    request[2] -= 1
                    if len(keys) % BLOCK == 0:  # a block filled by decoding: offered as the scheduler does
                        holds[table[len(keys) // BLOCK - 1]] = (keys.salt, tuple(keys.tokens))
                        cache.offer(keys, table)
            elif running:
                cache.release(running.pop(rng.randrange(len(running)))[1])
            if index == "radix":
                self.check_tree(cache)
        return hits_seen

    def test_no_hit_crosses_a_salt_and_the_tree_stays_whole(self) -> None:
        for index in INDEXES:
            for seed in range(4):
                with self.subTest(index=index, seed=seed):
                    self.assertGreater(self.run_workload(index, seed), 0)  # the workload does reuse blocks


if __name__ == "__main__":
    unittest.main()
