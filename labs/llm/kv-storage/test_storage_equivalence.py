"""Every storage layout gives the full-prefix logits: step by step, chunked, grouped-query, forked."""

from __future__ import annotations

import dataclasses
import unittest

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kv_storage.paged import PagedSequence
from kv_storage.testing import (
    CHUNKINGS,
    FLOAT64_AGREEMENT,
    KV_HEADS,
    STORES,
    TINY,
    assert_matches_full_pass,
    chunked_logits,
    paged,
    random_ids,
    with_kv_heads,
)
from llm_models.paged.pool import BlockPool
from llm_models.toy.equivalence import ATOL, RTOL
from llm_models.toy.model import DecoderBlock


class EveryLayoutMatchesFullPrefix(unittest.TestCase):
    def test_every_layout_matches_full_prefix_logits_at_every_single_token_step(self) -> None:
        for kv_heads in KV_HEADS:
            model = DecoderBlock(with_kv_heads(kv_heads))
            ids = random_ids(40, seed=kv_heads)
            for name, make in STORES.items():
                with self.subTest(layout=name, kv_heads=kv_heads):
                    assert_matches_full_pass(model, ids, [1] * 40, make(model.config))

    def test_every_layout_matches_full_sequence_after_chunked_prefill(self) -> None:
        ids = random_ids(40, seed=7)
        for kv_heads in KV_HEADS:
            model = DecoderBlock(with_kv_heads(kv_heads))
            for name, make in STORES.items():
                for chunks in CHUNKINGS:
                    with self.subTest(layout=name, kv_heads=kv_heads, chunks=chunks[:4]):
                        assert_matches_full_pass(model, ids, chunks, make(model.config))

    @settings(max_examples=25, deadline=None)
    @given(
        chunks=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=5),  # <= 45 of 48 positions
        block_size=st.integers(min_value=1, max_value=12),
        kv_heads=st.sampled_from(KV_HEADS),
        seed=st.integers(min_value=0, max_value=2**16),
    )
    def test_any_chunking_through_any_block_size_gives_the_full_pass(
        self, chunks: list[int], block_size: int, kv_heads: int, seed: int
    ) -> None:
        config = with_kv_heads(kv_heads)
        assert_matches_full_pass(DecoderBlock(config), random_ids(sum(chunks), seed), chunks, paged(block_size)(config))

    def test_paged_attention_reads_scattered_blocks_through_the_table(self) -> None:
        model = DecoderBlock(TINY)
        pool = BlockPool.for_model(TINY, num_blocks=20, block_size=4)
        other = PagedSequence(pool)
        request = PagedSequence(pool)
        ids, noise = random_ids(24, seed=1), random_ids(24, seed=2)
        cache_a, cache_b = request, other
        pieces = []
        with torch.inference_mode():
            for t in range(24):  # interleave two requests, so neither owns a contiguous run of blocks
                logits, cache_a = model(ids[:, t : t + 1], cache_a)
                _, cache_b = model(noise[:, t : t + 1], cache_b)
                pieces.append(logits)
            full = model(ids)[0]
        contiguous = list(range(request.table[0], request.table[0] + len(request.table)))
        self.assertNotEqual(request.table, contiguous)  # e.g. [0, 2, 4, ...]: the gather does real work
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=ATOL, rtol=RTOL)

    def test_forked_requests_share_a_prompt_and_each_matches_its_own_full_pass(self) -> None:
        model = DecoderBlock(TINY)
        pool = BlockPool.for_model(TINY, num_blocks=12, block_size=4)
        prompt, tail_a, tail_b = random_ids(10, 1), random_ids(6, 2), random_ids(6, 3)
        parent = PagedSequence(pool)
        with torch.inference_mode():
            model(prompt, parent)
            child = parent.fork()
            logits_a, _ = model(tail_a, parent)
            logits_b, _ = model(tail_b, child)
            full_a = model(torch.cat([prompt, tail_a], dim=1))[0][:, 10:]
            full_b = model(torch.cat([prompt, tail_b], dim=1))[0][:, 10:]
        torch.testing.assert_close(logits_a, full_a, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(logits_b, full_b, atol=ATOL, rtol=RTOL)
        self.assertEqual(parent.table[:2], child.table[:2])  # the two full prompt blocks stay shared

    def test_stores_and_concatenation_agree_to_rounding_in_float64(self) -> None:
        model = DecoderBlock(dataclasses.replace(with_kv_heads(2), dtype=torch.float64))
        ids = random_ids(20, seed=5)
        concat = chunked_logits(model, ids, [1] * 20, None)
        for name, make in STORES.items():
            with self.subTest(layout=name):
                store_logits = chunked_logits(model, ids, [1] * 20, make(model.config))
                self.assertLess(float((store_logits - concat).abs().max()), FLOAT64_AGREEMENT)


if __name__ == "__main__":
    unittest.main()
