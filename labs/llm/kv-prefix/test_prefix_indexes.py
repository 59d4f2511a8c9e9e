"""The two prefix indexes: vLLM's hash map and SGLang's radix tree find the same blocks for every prompt and
respect a limit; the tree also counts a page matched in part. They differ in what they evict: the hash index the
least recently freed block, even a parent whose child stays cached (and unreachable); the tree an uncached
block first, then the least recently used leaf, never a parent before its cached child. An unchained hash
index hands out a block computed after another prefix."""

from __future__ import annotations

import random
import unittest
from collections import OrderedDict

from kv_prefix.broken import UnchainedHashIndex
from llm_models.serving.prefix import BlockKeys, HashIndex, RadixIndex

BLOCK = 4
NO_LIMIT = 1 << 20


def fill(*indexes: HashIndex | RadixIndex, prompts: list[list[int]], reuse: bool, first: int = 0) -> list[list[int]]:
    """Insert every prompt into every index, each with its own table: its hits (as the pool's ``take`` builds
    it) when ``reuse``, else only new blocks (prompts computed in one batch, before any was cached)."""
    tables, block = [], first
    for prompt in prompts:
        hits = indexes[0].match(prompt, NO_LIMIT) if reuse else []
        fresh = len(prompt) // BLOCK - len(hits)
        table = [*hits, *range(block, block + fresh)]
        block += fresh
        for index in indexes:
            index.insert(prompt, table)
        tables.append(table)
    return tables


def random_prompts(rng: random.Random, count: int) -> list[list[int]]:
    """Prompts over a small vocabulary that share heads of random lengths: some whole blocks, some partial."""
    heads = [[rng.randrange(8) for _ in range(rng.randint(0, 20))] for _ in range(rng.randint(1, 4))]
    return [rng.choice(heads)[:rng.randint(0, 20)] + [rng.randrange(8) for _ in range(rng.randint(0, 10))]
            for _ in range(count)]


def paged_prompts(rng: random.Random, count: int) -> list[list[int]]:
    """Prompts made of a few whole pages in random orders (and a partial tail): the same page often follows
    different ones, where only a chained hash tells the blocks apart."""
    pages = [[rng.randrange(4) for _ in range(BLOCK)] for _ in range(3)]
    return [[token for _ in range(rng.randint(1, 4)) for token in rng.choice(pages)]
            + [rng.randrange(4) for _ in range(rng.randint(0, BLOCK - 1))] for _ in range(count)]


def reachable(index: RadixIndex) -> set[int]:
    """The blocks a walk from the tree's root reaches."""
    seen, stack = set(), [index.root]
    while stack:
        node = stack.pop()
        for child in node.children.values():
            seen.add(child.block)
            stack.append(child)
    return seen


class SameMatches(unittest.TestCase):
    def test_hash_and_radix_indexes_match_the_same_blocks_for_random_prompts(self) -> None:
        for seed in range(150):
            rng = random.Random(seed)
            prompts = random_prompts(rng, rng.randint(1, 12)) + paged_prompts(rng, rng.randint(0, 6))
            queries = prompts + random_prompts(rng, 8) + paged_prompts(rng, 4)  # cached prompts, others like them
            for reuse in (True, False):
                hashed, tree = HashIndex(BLOCK), RadixIndex(BLOCK)
                fill(hashed, tree, prompts=prompts, reuse=reuse)
                for query in queries:
                    with self.subTest(seed=seed, reuse=reuse, query=query):
                        found, walked = hashed.match(query, NO_LIMIT), tree.match(query, NO_LIMIT)
                        if reuse:  # every prompt looked up before it is offered, as the engine admits
                            self.assertEqual(found, walked)
                        else:  # pages computed twice: the tree stops at the copy, the hash chain caches on
                            self.assertEqual(walked, found[:len(walked)])
                if reuse:
                    self.assertEqual(hashed.cached_blocks, tree.cached_blocks)

    def test_a_cached_prompt_finds_all_its_full_blocks_in_its_own_table(self) -> None:
        rng = random.Random(1)
        for name, index in (("hash", HashIndex(BLOCK)), ("radix", RadixIndex(BLOCK))):
            prompts = random_prompts(rng, 10)
            tables = fill(index, prompts=prompts, reuse=True)
            for prompt, table in zip(prompts, tables):
                with self.subTest(index=name, prompt=prompt):
                    self.assertEqual(index.match(prompt, NO_LIMIT), table)

    def test_match_respects_its_limit(self) -> None:
        rng = random.Random(2)
        prompts = random_prompts(rng, 10)
        for name, index in (("hash", HashIndex(BLOCK)), ("radix", RadixIndex(BLOCK))):
            fill(index, prompts=prompts, reuse=True)
            for prompt in prompts:
                whole = index.match(prompt, NO_LIMIT)
                for limit in range(len(whole) + 2):
                    with self.subTest(index=name, prompt=prompt, limit=limit):
                        self.assertEqual(index.match(prompt, limit), whole[:limit])

    def test_a_partial_tail_never_matches(self) -> None:
        prompt = list(range(10))  # 2 full blocks and 2 tokens
        for name, index in (("hash", HashIndex(BLOCK)), ("radix", RadixIndex(BLOCK))):
            with self.subTest(index=name):
                self.assertEqual(index.insert(prompt, [5, 6, 7]), 2)  # the third block is not full: not cached
                self.assertFalse(index.holds(7))
                self.assertEqual(index.match(list(range(12)), NO_LIMIT), [5, 6])


class PartialPages(unittest.TestCase):
    def test_the_tree_counts_a_page_matched_in_part(self) -> None:
        tree, hashed = RadixIndex(BLOCK), HashIndex(BLOCK)
        cached = [1, 2, 3, 4, 5, 6, 7, 8]
        for index in (tree, hashed):
            index.insert(cached, [0, 1])
        query = [1, 2, 3, 4, 5, 6, 90, 91, 92]  # shares 6 tokens: one whole page and half of the next
        self.assertEqual(tree.matched_tokens(query), 6)
        self.assertEqual(tree.match(query, NO_LIMIT), [0])
        self.assertEqual(hashed.match(query, NO_LIMIT), [0])

    def test_matched_tokens_within_the_first_page_at_the_end_and_on_an_empty_tree(self) -> None:
        tree = RadixIndex(BLOCK)
        self.assertEqual(tree.matched_tokens([1, 2, 3]), 0)
        tree.insert([1, 2, 3, 4, 5, 6, 7, 8], [0, 1])
        self.assertEqual(tree.matched_tokens([1, 2, 9, 9, 9]), 2)
        self.assertEqual(tree.matched_tokens([1, 2, 3, 4, 5, 6]), 6)  # a short query ends inside the page
        self.assertEqual(tree.matched_tokens([1, 2, 3, 4, 5, 6, 7, 8]), 8)
        self.assertEqual(tree.matched_tokens([1, 2, 3, 4, 5, 6, 7, 8, 9]), 8)
        self.assertEqual(tree.matched_tokens([9, 1, 2, 3]), 0)

    def test_matched_tokens_takes_the_best_of_several_children(self) -> None:
        tree = RadixIndex(BLOCK)
        tree.insert([1, 2, 3, 4, 5, 0, 0, 0], [0, 1])
        tree.insert([1, 2, 3, 4, 5, 6, 7, 0], [0, 2])
        self.assertEqual(tree.matched_tokens([1, 2, 3, 4, 5, 6, 7, 8]), 7)

    def test_matched_tokens_is_the_longest_common_prefix_for_random_prompts(self) -> None:
        for seed in range(100):
            rng = random.Random(seed)
            prompts = [prompt for prompt in random_prompts(rng, 6) if len(prompt) >= BLOCK]
            tree = RadixIndex(BLOCK)
            fill(tree, prompts=prompts, reuse=True)
            for query in random_prompts(rng, 6):
                # what the tree holds: every cached prompt's full pages
                best = max((next((i for i, (a, b) in enumerate(zip(query, p)) if a != b), min(len(query), len(p)))
                            for p in (q[:len(q) // BLOCK * BLOCK] for q in prompts)), default=0)
                with self.subTest(seed=seed, query=query):
                    self.assertEqual(tree.matched_tokens(query), best)


class Eviction(unittest.TestCase):
    """Prompt A = two cached blocks, 0 (parent) then 1 (child); prompt B = one cached block, 2; block 3 caches
    nothing. Free queue, least recently freed first: 0, 2, 1, 3."""

    A, B = [1, 2, 3, 4, 5, 6, 7, 8], [9, 9, 9, 9]

    def setUp(self) -> None:
        self.hashed, self.tree = HashIndex(BLOCK), RadixIndex(BLOCK)
        for index in (self.hashed, self.tree):
            index.insert(self.A, [0, 1])
            index.insert(self.B, [2])

    @staticmethod
    def evict_all(index: HashIndex | RadixIndex, free: OrderedDict[int, None]) -> list[int]:
        order = []
        while free:
            block = index.victim(free)
            del free[block]
            index.forget(block)
            order.append(block)
        return order

    def test_the_hash_index_evicts_the_least_recently_freed_block_even_a_parent(self) -> None:
        free = OrderedDict.fromkeys([0, 2, 1, 3])
        self.assertEqual(self.hashed.victim(free), 0)
        del free[0]
        self.hashed.forget(0)
        # The child stays cached but no lookup reaches it: the chain stops at the evicted parent.
        self.assertTrue(self.hashed.holds(1))
        self.assertEqual(self.hashed.match(self.A, NO_LIMIT), [])
        self.assertEqual(self.evict_all(self.hashed, free), [2, 1, 3])
        self.assertEqual(self.hashed.cached_blocks, 0)

    def test_the_radix_index_evicts_an_uncached_block_then_leaves_never_a_parent_first(self) -> None:
        free = OrderedDict.fromkeys([0, 2, 1, 3])
        order = []
        while free:
            block = self.tree.victim(free)
            if self.tree.holds(block):
                for node in self.tree.node_of.values():  # no cached block under it: it is a leaf
                    self.assertIsNot(node.parent, self.tree.node_of[block], f"block {block} evicted before a child")
            del free[block]
            self.tree.forget(block)
            order.append(block)
            self.assertEqual(reachable(self.tree), set(self.tree.node_of))  # nothing cached is unreachable
        # 3 caches nothing; then the least recently used leaf: A's child (A was inserted before B), then A's
        # parent, a leaf now and used when its child was, and B last.
        self.assertEqual(order, [3, 1, 0, 2])

    def test_the_radix_index_keeps_a_recently_used_prefix_the_hash_index_does_not(self) -> None:
        self.tree.touch([0, 1])  # A was just used again: B's leaf is now the least recently used
        free = OrderedDict.fromkeys([0, 1, 2])
        self.assertEqual(self.tree.victim(free), 2)
        self.hashed.touch([0, 1])  # a no-op: recency is the order of the free queue alone
        self.assertEqual(self.hashed.victim(free), 0)

    def test_forgetting_a_parent_in_the_tree_drops_its_subtree(self) -> None:
        self.tree.forget(0)
        self.assertFalse(self.tree.holds(0))
        self.assertFalse(self.tree.holds(1))
        self.assertTrue(self.tree.holds(2))
        self.assertEqual(self.tree.cached_blocks, 1)
        self.assertEqual(self.tree.match(self.A, NO_LIMIT), [])


class Unchained(unittest.TestCase):
    """Prompt X = [x, y] cached in blocks 0, 1; prompt Z = [z, y] computed in blocks 2, 3: the same second page
    after another first one."""

    X = [1, 1, 1, 1, 5, 6, 7, 8]
    Z = [2, 2, 2, 2, 5, 6, 7, 8]

    def test_a_chained_index_never_hands_out_a_block_computed_after_another_prefix(self) -> None:
        index = HashIndex(BLOCK)
        index.insert(self.X, [0, 1])
        self.assertEqual(index.insert(self.Z, [2, 3]), 2)
        self.assertEqual(index.match([*self.Z, 9], NO_LIMIT), [2, 3])

    def test_the_unchained_index_is_caught_matching_another_prefixs_block(self) -> None:
        index = UnchainedHashIndex(BLOCK)
        index.insert(self.X, [0, 1])
        self.assertEqual(index.insert(self.Z, [2, 3]), 1)  # Z's second block collides with X's
        # Block 1 holds keys computed after [1, 1, 1, 1]: wrong for a prompt that starts [2, 2, 2, 2].
        self.assertEqual(index.match([*self.Z, 9], NO_LIMIT), [2, 1])

    def test_the_unchained_index_disagrees_with_the_tree_on_random_prompts(self) -> None:
        wrong = 0
        for seed in range(50):
            rng = random.Random(seed)
            prompts = paged_prompts(rng, 10)
            unchained, tree = UnchainedHashIndex(BLOCK), RadixIndex(BLOCK)
            fill(unchained, tree, prompts=prompts, reuse=False)
            wrong += sum(unchained.match(p, NO_LIMIT) != tree.match(p, NO_LIMIT) for p in prompts)
        self.assertGreater(wrong, 0)



class Salted(unittest.TestCase):
    """A prompt cached under one cache_salt is found under that salt only, by both indexes; the tree keeps one root
    per salt and drops it with its last page."""

    PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9]  # two full blocks and a position

    def test_each_salt_finds_only_its_own_blocks_in_either_index(self) -> None:
        for kind in (HashIndex, RadixIndex):
            index = kind(BLOCK)
            index.insert(BlockKeys(self.PROMPT, "a"), [10, 11])
            index.insert(self.PROMPT, [20, 21])  # the same tokens, unsalted
            with self.subTest(index=kind.name):
                self.assertEqual(index.match(BlockKeys(self.PROMPT, "a"), NO_LIMIT), [10, 11])
                self.assertEqual(index.match(BlockKeys(self.PROMPT, "b"), NO_LIMIT), [])
                self.assertEqual(index.match(BlockKeys(self.PROMPT), NO_LIMIT), [20, 21])
                self.assertEqual(index.match(self.PROMPT, NO_LIMIT), [20, 21])

    def test_a_salts_tree_goes_with_its_last_page_and_a_prompt_shorter_than_a_page_starts_none(self) -> None:
        index = RadixIndex(BLOCK)
        index.insert(BlockKeys([1, 2], "short"), [])
        self.assertEqual(index.salted, {})
        index.insert(BlockKeys(self.PROMPT, "a"), [10, 11])
        self.assertEqual(set(index.salted), {"a"})
        self.assertEqual(index.matched_tokens(BlockKeys(self.PROMPT[:6], "b")), 0)
        self.assertEqual(index.forget(10), 2)  # the first page, and the one below it
        self.assertEqual(index.salted, {})
        self.assertEqual(index.match(BlockKeys(self.PROMPT, "a"), NO_LIMIT), [])


if __name__ == "__main__":
    unittest.main()
