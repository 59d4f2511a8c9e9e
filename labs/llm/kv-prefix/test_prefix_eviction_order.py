"""What the page says of the hash chain's eviction order: a request holds every block of its prefix and frees them
tail first, so the free queue holds a block's cached children ahead of it, and a cached block the pool gives up has
no cached child left. A page computed twice in one batch is the exception: the second request's later block is
cached under the first copy's hash, and that first copy, freed earlier, goes first."""

from __future__ import annotations

import random
import unittest
from dataclasses import dataclass

import torch

from llm_models.paged.pool import PoolExhausted
from llm_models.serving.prefix import CachingPool

BLOCK = 4


@dataclass(frozen=True)
class Tiny:
    kv_heads: int = 1
    head_dim: int = 4
    dtype: torch.dtype = torch.float32


def pool(num_blocks: int) -> CachingPool:
    return CachingPool(Tiny(), 1, num_blocks, BLOCK, index="hash")


class HashChainEviction(unittest.TestCase):
    def test_a_cached_block_is_given_up_only_once_no_cached_child_is_left(self) -> None:
        """Random admissions and releases, one request at a time (no page computed twice): a shadow of the prefix
        each block holds names every cached block's children; none may still be cached when the block is given up."""
        rng = random.Random(5)
        cache = pool(14)
        prefix_of: dict[int, tuple[int, ...]] = {}  # block -> the tokens from position 0 to the end of its page
        forget = cache.index.forget
        checked = 0

        def checked_forget(block: int) -> int:
            nonlocal checked
            if cache.index.holds(block):
                children = [other for other in range(cache.num_blocks) if other != block and cache.index.holds(other)
                            and prefix_of[other][:-BLOCK] == prefix_of[block]]
                self.assertEqual(children, [], f"block {block} given up before its cached children {children}")
                checked += 1
            return forget(block)

        cache.index.forget = checked_forget  # type: ignore[method-assign]
        heads = [[rng.randrange(3) for _ in range(16)] for _ in range(3)]
        running: list[list[int]] = []
        for _ in range(500):
            if running and (rng.random() < 0.45 or cache.num_free_blocks < 6):
                cache.release(running.pop(rng.randrange(len(running))))
                continue
            prompt = rng.choice(heads)[:rng.randint(0, 16)] + [rng.randrange(3) for _ in range(rng.randint(1, 6))]
            hits = cache.match(prompt)
            try:
                table = cache.take(prompt, hits, -(-len(prompt) // BLOCK) - len(hits))
            except PoolExhausted:
                continue
            for position in range(len(hits), len(table)):  # what the prefill writes into each new block
                prefix_of[table[position]] = tuple(prompt[:(position + 1) * BLOCK])
            cache.offer(prompt, table)
            running.append(table)
        self.assertGreater(checked, 30)  # cached blocks were given up, each checked

    def test_a_page_computed_twice_in_one_batch_lets_a_parent_go_first(self) -> None:
        cache = pool(7)
        first = [1] * BLOCK + [2] * BLOCK + [9]  # two full pages and a partial one
        second = [1] * BLOCK + [2] * BLOCK + [3] * BLOCK + [9]  # the same two pages, then one of its own
        # Admitted together: neither finds anything, both compute the shared pages.
        tables = [cache.take(prompt, [], -(-len(prompt) // BLOCK)) for prompt in (first, second)]
        for prompt, table in zip((first, second), tables):
            cache.offer(prompt, table)
        own = tables[1][2]  # the second request's third block: cached under the chain of the first's pages
        self.assertTrue(cache.index.holds(own))
        self.assertFalse(cache.index.holds(tables[1][1]))  # its copy of the second page stays uncached
        cache.release(tables[0])
        cache.release(tables[1])
        cache.allocate(2)  # the queue's front: the first request's partial block, then its second page
        self.assertFalse(cache.index.holds(tables[0][1]))  # the parent went ...
        self.assertTrue(cache.index.holds(own))  # ... while its child stays cached
        self.assertEqual(cache.match(second), [tables[0][0]])  # and out of reach: the walk stops at the parent

    def test_a_last_page_computed_again_lets_a_parent_go_first(self) -> None:
        """A prompt cached to its very end still computes its last page (the logits of its first new token come from
        it): a copy of a cached page. The block its reply fills next is cached under the original's hash, which the
        request does not hold, so the original can be freed, and given up, first."""
        cache = pool(4)
        prompt = [1] * BLOCK + [2] * BLOCK
        first = cache.take(prompt, [], 2)
        cache.offer(prompt, first)
        cache.release(first)
        hits = cache.match(prompt)
        self.assertEqual(hits, first[:1])  # the last page is left to compute
        table = cache.take(prompt, hits, 2)  # the copy of the last page and a block for the reply
        cache.offer(prompt, table)
        self.assertFalse(cache.index.holds(table[1]))  # the copy stays uncached
        reply = prompt + [3] * BLOCK
        cache.offer(reply, table)  # the reply fills the third block, cached under the original second page's hash
        self.assertTrue(cache.index.holds(table[2]))
        cache.release(table)
        cache.allocate(1)  # the queue's front: the original second page, freed before the request that hung below it
        self.assertFalse(cache.index.holds(first[1]))
        self.assertTrue(cache.index.holds(table[2]))
        self.assertEqual(cache.match([*reply, 9]), first[:1])


if __name__ == "__main__":
    unittest.main()
