"""Offset-aware causal attention: who sees whom, and the fused path against its references."""

from __future__ import annotations

import unittest

import torch
import torch.nn.functional as F

from kv_cache.figures import MASK_EXAMPLE, causal_visible, top_left_visible
from llm_models.attention import causal_attention, causal_mask, one_query_attention, reference_attention

# Same inputs, two float32 kernels: they differ only by summation order.
ATOL = RTOL = 1e-6
HEADS, HEAD_DIM = 4, 8


def qkv(prefix: int, chunk: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, HEADS, chunk, HEAD_DIM, generator=generator)  # (B, H, Tq, D)
    k = torch.randn(2, HEADS, prefix + chunk, HEAD_DIM, generator=generator)  # (B, H, Tk, D)
    v = torch.randn(2, HEADS, prefix + chunk, HEAD_DIM, generator=generator)
    return q, k, v


class CausalMask(unittest.TestCase):
    def test_first_query_of_a_chunk_after_seven_cached_positions_sees_keys_zero_to_seven(self) -> None:
        mask = causal_mask(query_len=5, offset=7)
        self.assertEqual(tuple(mask.shape), (5, 12))
        for i in range(5):
            visible = mask[i].nonzero().flatten().tolist()
            self.assertEqual(visible, list(range(7 + i + 1)), f"query {7 + i}")

    def test_single_query_after_a_prefix_sees_every_key(self) -> None:
        self.assertTrue(causal_mask(query_len=1, offset=30).all())

    def test_mask_differs_from_a_top_left_triangle_whenever_there_is_a_prefix(self) -> None:
        top_left = torch.ones(5, 12, dtype=torch.bool).tril()
        self.assertFalse(torch.equal(causal_mask(5, 7), top_left))
        self.assertTrue(torch.equal(causal_mask(5, 0), torch.ones(5, 5, dtype=torch.bool).tril()))


class DrawnMasks(unittest.TestCase):
    """The page draws its masks from kv_cache.figures; they must be the masks the code uses."""

    def test_the_drawn_offset_mask_is_causal_mask(self) -> None:
        for query_len, offset in (MASK_EXAMPLE, (1, 0), (1, 9), (4, 0), (3, 2)):
            with self.subTest(query_len=query_len, offset=offset):
                mask = causal_mask(query_len, offset)
                pairs = {(r, k) for r, k in mask.nonzero().tolist()}
                self.assertEqual(causal_visible(query_len, offset), pairs)

    def test_the_drawn_wrong_mask_is_the_top_left_triangle(self) -> None:
        query_len, offset = MASK_EXAMPLE
        triangle = torch.ones(query_len, offset + query_len, dtype=torch.bool).tril()
        self.assertEqual(top_left_visible(query_len, offset + query_len),
                         {(r, k) for r, k in triangle.nonzero().tolist()})


class FusedAttentionMatchesReferences(unittest.TestCase):
    def test_fused_attention_equals_explicit_softmax_for_prefix_and_chunk_shapes(self) -> None:
        # (prefix, chunk): plain causal, the article's 7 + 5, one-token decode short and long.
        for prefix, chunk in [(0, 1), (0, 6), (7, 5), (1, 1), (3, 4), (255, 1), (100, 16)]:
            with self.subTest(prefix=prefix, chunk=chunk):
                q, k, v = qkv(prefix, chunk, seed=prefix * 31 + chunk)
                torch.testing.assert_close(
                    causal_attention(q, k, v, prefix),
                    reference_attention(q, k, v, prefix),
                    atol=ATOL,
                    rtol=RTOL,
                )

    def test_grouped_query_attention_equals_the_reference_with_repeated_kv_heads(self) -> None:
        for prefix, chunk in [(0, 6), (7, 5), (40, 1)]:
            with self.subTest(prefix=prefix, chunk=chunk):
                q, k, v = qkv(prefix, chunk, seed=chunk)
                k, v = k[:, :2], v[:, :2]  # 4 query heads share 2 key/value heads
                fused = causal_attention(q, k, v, prefix)
                repeated = reference_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), prefix)
                torch.testing.assert_close(fused, repeated, atol=ATOL, rtol=RTOL)
                self.assertFalse(torch.allclose(fused[:, 0], fused[:, 2], atol=1e-3))  # groups differ

    def test_at_offset_zero_both_equal_pytorch_is_causal(self) -> None:
        q, k, v = qkv(prefix=0, chunk=9, seed=3)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(causal_attention(q, k, v, 0), expected, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(reference_attention(q, k, v, 0), expected, atol=ATOL, rtol=RTOL)

    def test_key_count_that_does_not_match_offset_plus_queries_is_rejected(self) -> None:
        q, k, v = qkv(prefix=7, chunk=5, seed=0)
        with self.assertRaisesRegex(ValueError, r"5 queries at offset 6 need 11 keys, got 12"):
            causal_attention(q, k, v, offset=6)


if __name__ == "__main__":
    unittest.main()


class OneQueryAttention(unittest.TestCase):
    """one_query_attention stands in for the fused kernel with one query per row: it must agree with it."""

    def inputs(self, dtype: torch.dtype, heads: int, kv_heads: int) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(3)
        batch, keys, dim = 5, 37, 16
        q, k, v = (torch.randn(batch, h, n, dim, generator=generator).to(dtype)
                   for h, n in ((heads, 1), (kv_heads, keys), (kv_heads, keys)))
        visible = torch.arange(keys)[None, :] <= torch.tensor([0, 5, 17, 30, 36])[:, None]  # (B, K)
        return q, k, v, visible

    def test_equals_sdpa_with_and_without_a_mask_for_grouped_and_plain_heads_in_three_dtypes(self) -> None:
        # float32 differs by summation order only; the 16-bit results by one rounding of the output
        for dtype, atol in ((torch.float32, 1e-6), (torch.bfloat16, 1e-2), (torch.float16, 2e-3)):
            for heads, kv_heads in ((6, 2), (4, 4), (3, 1)):
                q, k, v, visible = self.inputs(dtype, heads, kv_heads)
                for mask in (visible, None):
                    with self.subTest(dtype=dtype, heads=heads, kv_heads=kv_heads, masked=mask is not None):
                        expected = F.scaled_dot_product_attention(
                            q, k, v, attn_mask=None if mask is None else mask[:, None, None, :],
                            enable_gqa=kv_heads != heads)
                        got = one_query_attention(q, k, v, mask)
                        self.assertEqual((got.shape, got.dtype), (expected.shape, expected.dtype))
                        torch.testing.assert_close(got, expected, atol=atol, rtol=0)

    def test_a_hidden_key_changes_nothing_and_a_visible_one_does(self) -> None:
        q, k, v, visible = self.inputs(torch.float32, 6, 2)
        before = one_query_attention(q, k, v, visible)
        k[0, :, 10], v[0, :, 10] = 1e4, -1e4  # row 0 sees key 0 only
        torch.testing.assert_close(one_query_attention(q, k, v, visible), before, atol=0, rtol=0)
        k[4, :, 10] = 1e4  # row 4 sees keys 0..36
        self.assertFalse(torch.equal(one_query_attention(q, k, v, visible)[4], before[4]))

    def test_causal_attention_takes_it_for_one_bfloat16_query_and_matches_the_reference(self) -> None:
        q, k, v = (t.to(torch.bfloat16) for t in qkv(prefix=9, chunk=1, seed=5))
        got = causal_attention(q, k, v, offset=9)
        torch.testing.assert_close(got, one_query_attention(q, k, v), atol=0, rtol=0)
        expected = reference_attention(*(t.float() for t in (q, k, v)), offset=9)
        torch.testing.assert_close(got.float(), expected, atol=1e-2, rtol=0)
