"""The block pool and its requests: tables, reference counts, copy-on-write, exhaustion, release."""

from __future__ import annotations

import unittest

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule, run_state_machine_as_test

from kv_storage.paged import PagedSequence
from kv_storage.testing import TINY, random_ids
from llm_models.paged.pool import BlockPool, PoolExhausted
from llm_models.toy.model import DecoderBlock

HEADS, DIM = 2, 3


def entries(count: int, start: float) -> torch.Tensor:
    """(1, Hkv, count, D) entries whose values identify their position: easy to check after a gather."""
    ramp = torch.arange(start, start + count, dtype=torch.float32).view(1, 1, count, 1)
    return ramp.expand(1, HEADS, count, DIM).clone()


class BlockTables(unittest.TestCase):
    def setUp(self) -> None:
        self.pool = BlockPool(num_blocks=8, block_size=4, kv_heads=HEADS, head_dim=DIM)

    def test_positions_map_to_block_and_slot_through_the_table(self) -> None:
        request = PagedSequence(self.pool)
        keys, _ = request.update(entries(10, 0), entries(10, 0))
        self.assertEqual(request.table, [0, 1, 2])
        self.assertEqual(request.wasted_slots, 2)
        self.assertTrue(torch.equal(keys, entries(10, 0)))
        self.assertEqual(float(self.pool.keys[2, 0, 1, 0]), 9.0)  # position 9 = block 2, slot 1

    def test_fork_shares_blocks_and_a_divergent_append_copies_only_the_partly_filled_last_block(self) -> None:
        parent = PagedSequence(self.pool)
        parent.update(entries(10, 0), entries(10, 0))
        child = parent.fork()
        self.assertEqual((self.pool.blocks_in_use, child.table), (3, parent.table))
        self.assertEqual(self.pool.refcount[:3], [2, 2, 2])
        child.update(entries(1, 100), entries(1, 100))
        self.assertEqual(self.pool.blocks_in_use, 4)  # one copy, nothing else
        self.assertEqual(child.table[:2], parent.table[:2])
        self.assertNotEqual(child.table[2], parent.table[2])
        self.assertTrue(torch.equal(parent.stored()[0], entries(10, 0)))  # the parent never sees the child's token
        self.assertTrue(torch.equal(child.stored()[0], torch.cat([entries(10, 0), entries(1, 100)], dim=2)))

    def test_appending_after_a_full_shared_block_copies_nothing(self) -> None:
        parent = PagedSequence(self.pool)
        parent.update(entries(8, 0), entries(8, 0))
        child = parent.fork()
        child.update(entries(1, 50), entries(1, 50))
        self.assertEqual(self.pool.blocks_in_use, 3)
        self.assertEqual(self.pool.refcount[:2], [2, 2])

    def test_a_block_still_referenced_is_neither_freed_nor_reused(self) -> None:
        parent = PagedSequence(self.pool)
        parent.update(entries(8, 0), entries(8, 0))
        child = parent.fork()
        parent.release()
        self.assertEqual(self.pool.refcount[:2], [1, 1])
        newcomer = PagedSequence(self.pool)
        newcomer.update(entries(8, 7), entries(8, 7))
        self.assertTrue(set(newcomer.table).isdisjoint(child.table))
        self.assertTrue(torch.equal(child.stored()[0], entries(8, 0)))

    def test_pool_exhaustion_is_a_clear_error_and_leaves_every_request_intact(self) -> None:
        first, second = PagedSequence(self.pool), PagedSequence(self.pool)
        first.update(entries(20, 0), entries(20, 0))  # 5 blocks
        second.update(entries(9, 0), entries(9, 0))  # 3 blocks: the pool is full, 3 slots spare in block 7
        before = (list(first.table), list(second.table), list(self.pool.free), first.length, second.length)
        with self.assertRaisesRegex(PoolExhausted, r"appending 4 positions needs 1 free blocks, the pool has 0 of 8"):
            second.update(entries(4, 9), entries(4, 9))
        self.assertEqual(before, (first.table, second.table, self.pool.free, first.length, second.length))
        self.assertTrue(torch.equal(first.stored()[0], entries(20, 0)))
        second.update(entries(3, 9), entries(3, 9))  # what still fits is accepted
        self.assertEqual(second.wasted_slots, 0)

    def test_refused_append_into_a_shared_partial_block_changes_nothing(self) -> None:
        pool = BlockPool(num_blocks=2, block_size=4, kv_heads=HEADS, head_dim=DIM)
        parent = PagedSequence(pool)
        parent.update(entries(3, 0), entries(3, 0))
        child = parent.fork()
        # 2 more positions need the copy of the shared tail plus one new block: 2 blocks, 1 is free
        self.assertEqual(child.blocks_needed(2), 2)
        with self.assertRaisesRegex(PoolExhausted, r"appending 2 positions needs 2 free blocks, the pool has 1 of 2"):
            child.update(entries(2, 3), entries(2, 3))
        self.assertEqual((child.table, parent.table, pool.refcount, pool.free), ([0], [0], [2, 0], [1]))
        child.update(entries(1, 3), entries(1, 3))  # one position fits: only the copy is needed
        self.assertEqual((child.table, pool.refcount), ([1], [1, 1]))

    def test_an_empty_append_writes_nothing_and_copies_nothing(self) -> None:
        parent = PagedSequence(self.pool)
        parent.update(entries(3, 0), entries(3, 0))
        child = parent.fork()
        keys, _ = child.update(entries(0, 0), entries(0, 0))
        self.assertEqual((child.table, self.pool.blocks_in_use, tuple(keys.shape)), (parent.table, 1, (1, HEADS, 3, DIM)))

    def test_an_empty_request_reads_back_nothing(self) -> None:
        keys, values = PagedSequence(self.pool).stored()
        self.assertEqual((tuple(keys.shape), tuple(values.shape)), ((1, HEADS, 0, DIM), (1, HEADS, 0, DIM)))

    def test_entries_that_are_not_four_dimensional_are_a_clear_error(self) -> None:
        with self.assertRaisesRegex(ValueError, r"new keys \(2, 1, 3\) / values \(2, 1, 3\) do not fit"):
            PagedSequence(self.pool).update(torch.zeros(HEADS, 1, DIM), torch.zeros(HEADS, 1, DIM))

    def test_released_requests_return_every_block(self) -> None:
        requests = [PagedSequence(self.pool) for _ in range(3)]
        for i, request in enumerate(requests):
            request.update(entries(3 + i, 0), entries(3 + i, 0))
        requests.append(requests[0].fork())
        for request in requests:
            request.release()
        self.assertEqual(self.pool.refcount, [0] * 8)
        self.assertEqual(sorted(self.pool.free), list(range(8)))
        with self.assertRaisesRegex(ValueError, r"released"):
            requests[1].update(entries(1, 0), entries(1, 0))

    def test_entries_of_another_dtype_are_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, r"torch.float64 entries, the pool stores torch.float32"):
            PagedSequence(self.pool).update(torch.zeros(1, HEADS, 1, DIM).double(), torch.zeros(1, HEADS, 1, DIM).double())

    def test_a_batch_of_several_rows_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, r"do not fit a paged request: \(1, 2, T, 3\)"):
            PagedSequence(self.pool).update(torch.zeros(2, HEADS, 1, DIM), torch.zeros(2, HEADS, 1, DIM))

    def test_decoder_block_decodes_through_a_pool_without_a_contiguous_copy_kept(self) -> None:
        model = DecoderBlock(TINY)
        pool = BlockPool.for_model(TINY, num_blocks=3, block_size=16)
        request = PagedSequence(pool)
        with torch.inference_mode():
            for token in random_ids(20, seed=0).split(1, dim=1):
                model(token, request)
        self.assertEqual((request.length, request.table, pool.blocks_in_use), (20, [0, 1], 2))
        # No side copy anywhere: the request and the pool hold exactly their bookkeeping and storage.
        self.assertEqual(set(vars(request)), {"pool", "table", "_length", "released"})
        self.assertEqual(set(vars(pool)), {"block_size", "keys", "values", "refcount", "free"})
        self.assertEqual(tuple(pool.keys.shape), (3, TINY.kv_heads, 16, TINY.head_dim))


class PoolMachine(RuleBasedStateMachine):
    """Random admit / append / fork / release sequences must keep the allocator's books straight."""

    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.pool = BlockPool(num_blocks=10, block_size=3, kv_heads=HEADS, head_dim=DIM)
        self.live: dict[int, tuple[PagedSequence, torch.Tensor]] = {}  # id -> (request, expected keys)
        self.counter = 0.0

    def fresh(self, count: int) -> torch.Tensor:
        self.counter += count
        return entries(count, self.counter)

    @rule(target=requests)
    def admit(self) -> int:
        request = PagedSequence(self.pool)
        self.live[id(request)] = (request, entries(0, 0))
        return id(request)

    @rule(key=requests, count=st.integers(min_value=1, max_value=7))
    def append(self, key: int, count: int) -> None:
        if key not in self.live:
            return
        request, expected = self.live[key]
        new = self.fresh(count)
        size, length = self.pool.block_size, request.length
        shared_tail = length % size != 0 and self.pool.refcount[request.table[-1]] > 1
        need = -(-(length + count) // size) - len(request.table) + shared_tail  # worked out independently
        before = (list(request.table), request.length, list(self.pool.free), list(self.pool.refcount))
        if need > len(self.pool.free):
            try:
                request.update(new, new)
            except PoolExhausted:
                assert before == (request.table, request.length, self.pool.free, self.pool.refcount)
                return
            raise AssertionError(f"an append needing {need} blocks with {len(before[2])} free was accepted")
        request.update(new, new)  # it fits, so it must be accepted
        self.live[key] = (request, torch.cat([expected, new], dim=2))

    @rule(target=requests, key=requests)
    def fork(self, key: int) -> int:
        if key not in self.live:
            return key
        request, expected = self.live[key]
        child = request.fork()
        self.live[id(child)] = (child, expected.clone())
        return id(child)

    @rule(key=consumes(requests))
    def release(self, key: int) -> None:
        if key in self.live:
            request, _ = self.live.pop(key)
            request.release()

    @invariant()
    def no_block_is_both_free_and_in_use(self) -> None:
        in_use = {b for request, _ in self.live.values() for b in request.table}
        assert in_use.isdisjoint(self.pool.free)
        assert len(self.pool.free) == len(set(self.pool.free))
        assert len(in_use) + len(self.pool.free) == self.pool.num_blocks

    @invariant()
    def reference_counts_equal_the_tables_that_hold_each_block(self) -> None:
        counts = [0] * self.pool.num_blocks
        for request, _ in self.live.values():
            for block in request.table:
                counts[block] += 1
        assert counts == self.pool.refcount

    @invariant()
    def every_request_reads_back_exactly_what_it_wrote(self) -> None:
        for request, expected in self.live.values():
            if request.length:
                assert torch.equal(request.stored()[0], expected)

    def teardown(self) -> None:
        for request, _ in self.live.values():
            request.release()
        assert self.pool.refcount == [0] * self.pool.num_blocks
        assert sorted(self.pool.free) == list(range(self.pool.num_blocks))


class RandomRequestSequences(unittest.TestCase):
    def test_random_admit_append_fork_release_sequences_keep_the_allocator_consistent(self) -> None:
        run_state_machine_as_test(PoolMachine, settings=settings(max_examples=60, stateful_step_count=30,
                                                                 deadline=None))


if __name__ == "__main__":
    unittest.main()
