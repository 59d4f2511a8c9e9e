"""The cached path computes what the full-prefix path computes, and the checks would notice if not."""

from __future__ import annotations

import dataclasses
import unittest

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kv_cache.broken import PositionResetBlock, TopLeftMaskBlock, UnmaskedChunkBlock
from kv_cache.decode import cached_step_logits
from kv_cache.equivalence import compare_paths
from kv_cache.testing import TINY, assert_chunk_matches, assert_steps_match, random_ids
from llm_models.toy.equivalence import ATOL
from llm_models.toy.model import DecoderBlock

FLOAT64_BOUND = 1e-12  # observed ~1e-15 on the 12-token fixture; float32 sits near 1e-7


class CachedPathMatchesFullPrefix(unittest.TestCase):
    def test_cached_logits_match_full_prefix_at_every_step(self) -> None:
        assert_steps_match(DecoderBlock(TINY), random_ids(batch=2, length=12, seed=0))

    def test_chunked_prefill_matches_full_sequence_at_every_new_position(self) -> None:
        assert_chunk_matches(DecoderBlock(TINY), random_ids(batch=2, length=12, seed=0), prefix=7)

    def test_grouped_query_heads_cache_only_kv_heads_and_still_match_full_prefix(self) -> None:
        for kv_heads in (2, 1):
            with self.subTest(kv_heads=kv_heads):
                model = DecoderBlock(dataclasses.replace(TINY, kv_heads=kv_heads))
                ids = random_ids(batch=2, length=12, seed=0)
                assert_steps_match(model, ids)  # also checks the cache is (B, kv_heads, T, D)
                assert_chunk_matches(model, ids, prefix=7)

    def test_unrelated_request_between_identical_calls_changes_nothing(self) -> None:
        model = DecoderBlock(TINY)
        weights = {name: p.clone() for name, p in model.state_dict().items()}
        attributes = {id(m): set(vars(m)) for m in model.modules()}
        request, other = random_ids(1, 9, seed=1), random_ids(1, 14, seed=2)
        with torch.inference_mode():
            first = cached_step_logits(model, request)
            cached_step_logits(model, other)
            second = cached_step_logits(model, request)
        self.assertTrue(torch.equal(first, second))
        self.assertEqual(list(model.buffers()), [])
        self.assertEqual(attributes, {id(m): set(vars(m)) for m in model.modules()})
        for name, tensor in model.state_dict().items():
            self.assertTrue(torch.equal(tensor, weights[name]), name)

    @settings(max_examples=30, deadline=None)
    @given(
        chunks=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=5),
        seed=st.integers(min_value=0, max_value=2**16),
    )
    def test_any_split_into_chunks_gives_the_logits_of_one_full_pass(
        self, chunks: list[int], seed: int
    ) -> None:
        model = DecoderBlock(TINY)
        ids = random_ids(batch=2, length=sum(chunks), seed=seed)
        cache, pieces, start = None, [], 0
        with torch.inference_mode():
            full = model(ids)[0]
            for size in chunks:
                logits, cache = model(ids[:, start : start + size], cache)
                pieces.append(logits)
                start += size
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=ATOL, rtol=ATOL)


class ChecksCatchTheClassicBugs(unittest.TestCase):
    """Run the same assertions on deliberately broken blocks: they must fail."""

    ids = random_ids(batch=2, length=12, seed=0)

    def test_step_check_fails_right_after_the_first_step_when_positions_restart_at_zero(self) -> None:
        # Step 0 has no cache, so position 0 is right; step 1 is the first to be misnumbered.
        with self.assertRaisesRegex(AssertionError, r"^step 1: "):
            assert_steps_match(PositionResetBlock(TINY), self.ids)

    def test_chunk_check_fails_when_positions_restart_at_zero(self) -> None:
        with self.assertRaises(AssertionError):
            assert_chunk_matches(PositionResetBlock(TINY), self.ids, prefix=7)

    def test_step_check_fails_right_after_the_first_step_with_a_top_left_mask(self) -> None:
        # A (1, t + 1) top-left triangle shows the newest query only key 0.
        with self.assertRaisesRegex(AssertionError, r"^step 1: "):
            assert_steps_match(TopLeftMaskBlock(TINY), self.ids)

    def test_chunk_check_fails_with_top_left_mask_on_rectangular_scores(self) -> None:
        with self.assertRaises(AssertionError):
            assert_chunk_matches(TopLeftMaskBlock(TINY), self.ids, prefix=7)

    def test_comparison_reports_disagreement_and_greedy_flips_for_a_broken_block(self) -> None:
        for broken in (PositionResetBlock, TopLeftMaskBlock):
            with self.subTest(block=broken.__name__):
                result = compare_paths(broken(TINY), self.ids)
                self.assertFalse(result.within_tolerance)
                self.assertFalse(result.argmax_agrees_every_step)  # seeded: the greedy token flips somewhere
                self.assertGreater(result.max_abs_diff, 100 * ATOL)

    def test_unmasked_chunk_passes_single_steps_but_fails_chunked_prefill(self) -> None:
        assert_steps_match(UnmaskedChunkBlock(TINY), self.ids)
        with self.assertRaises(AssertionError):
            assert_chunk_matches(UnmaskedChunkBlock(TINY), self.ids, prefix=7)


class DifferencesAreRounding(unittest.TestCase):
    def test_float64_paths_agree_far_tighter_than_the_float32_tolerance(self) -> None:
        ids = random_ids(batch=2, length=12, seed=0)
        single = compare_paths(DecoderBlock(TINY), ids)
        double = compare_paths(DecoderBlock(dataclasses.replace(TINY, dtype=torch.float64)), ids)
        self.assertTrue(single.within_tolerance, single)
        self.assertTrue(single.argmax_agrees_every_step, single)
        self.assertLess(double.max_abs_diff, FLOAT64_BOUND, double)
        self.assertTrue(double.argmax_agrees_every_step, double)


if __name__ == "__main__":
    unittest.main()
