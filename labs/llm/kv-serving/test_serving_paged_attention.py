"""Attention over a paged cache read in place (llm_models.paged): the C loop equals the gather it replaces, for
float32 and bfloat16 caches, rows at mixed positions in scattered blocks, and a loop that read a neighbour's block
or one position too many or too few would be caught; the decode step takes it, and the gather where no compiler is."""

from __future__ import annotations

import unittest
from unittest import mock

import torch

from llm_models import paged
from llm_models.llama.config import LlamaDecoderConfig
from llm_models.serving.model import PagedRows
from llm_models.serving.pool import LayeredPool

LAYERS, KV_HEADS, SIZE, DIM, BLOCKS = 3, 3, 16, 64, 40


def pool_views(dtype: torch.dtype, layer: int = 1, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer ``layer``'s keys and values, (blocks, Hkv, S, D) views of a storage holding every layer's heads side by
    side, as the serving pool lays them out."""
    generator = torch.Generator().manual_seed(seed)
    keys, values = (torch.randn(BLOCKS, LAYERS * KV_HEADS, SIZE, DIM, generator=generator).to(dtype) for _ in range(2))
    return (keys.view(BLOCKS, LAYERS, KV_HEADS, SIZE, DIM)[:, layer],
            values.view(BLOCKS, LAYERS, KV_HEADS, SIZE, DIM)[:, layer])


# Four requests: scattered blocks, a length ending mid-block, one filling its blocks, one at its first position.
TABLES = torch.tensor([[5, 3, 9, 0], [1, 2, 0, 0], [7, 8, 10, 11], [4, 0, 0, 0]])
LENGTHS = torch.tensor([40, 20, 64, 1])


def queries(dtype: torch.dtype, heads: int = 9) -> torch.Tensor:
    return torch.randn(len(LENGTHS), heads, 1, DIM, generator=torch.Generator().manual_seed(1)).to(dtype)


@unittest.skipIf(paged.unavailable(), f"the in-place loop cannot be built here: {paged.unavailable()}")
class InPlace(unittest.TestCase):
    def test_the_loop_equals_the_gather_in_float32_and_bfloat16_caches(self) -> None:
        for dtype in (torch.float32, torch.bfloat16):
            keys, values = pool_views(dtype)
            for heads in (KV_HEADS, 3 * KV_HEADS):  # plain and grouped heads
                q = queries(torch.float32, heads)
                expected = paged.gathered(q, keys, values, TABLES, LENGTHS)
                found = paged.in_place(q, keys, values, TABLES, LENGTHS)
                self.assertLessEqual(float((found - expected).abs().max()), paged.ATOL, (dtype, heads))

    def test_a_neighbours_block_or_one_position_off_parts_from_the_gather_beyond_the_tolerance(self) -> None:
        keys, values = pool_views(torch.float32)
        q = queries(torch.float32)
        expected = paged.gathered(q, keys, values, TABLES, LENGTHS)
        neighbours = TABLES.clone()
        neighbours[0, 1] = TABLES[2, 0]  # request 0's second block swapped for request 2's first
        for label, tables, lengths in (("another's block", neighbours, LENGTHS),
                                       ("one position too many", TABLES, LENGTHS + torch.tensor([1, 0, 0, 0])),
                                       ("one position too few", TABLES, LENGTHS - torch.tensor([0, 1, 0, 0]))):
            wrong = paged.in_place(q, keys, values, tables, lengths)
            self.assertGreater(float((wrong - expected).abs().max()), 100 * paged.ATOL, label)

    def test_positions_past_a_requests_length_are_never_read(self) -> None:
        keys, values = pool_views(torch.float32)
        q = queries(torch.float32)
        expected = paged.in_place(q, keys, values, TABLES, LENGTHS)
        for row, length in enumerate(LENGTHS.tolist()):  # every slot past each length filled with huge values
            for position in range(length, TABLES.shape[1] * SIZE):
                block = TABLES[row, position // SIZE]
                if block not in TABLES[torch.arange(len(LENGTHS)) != row].flatten().tolist():
                    keys[block, :, position % SIZE] = 1e4
                    values[block, :, position % SIZE] = 1e4
        torch.testing.assert_close(paged.in_place(q, keys, values, TABLES, LENGTHS), expected, atol=0, rtol=0)

    def test_wrong_shapes_and_lengths_are_refused_naming_them(self) -> None:
        keys, values = pool_views(torch.float32)
        q = queries(torch.float32)
        with self.assertRaisesRegex(ValueError, "lengths .* must lie in 1 .. 64"):
            paged.in_place(q, keys, values, TABLES, LENGTHS + 30)
        with self.assertRaisesRegex(ValueError, "blocks outside 0 .. 39"):
            paged.in_place(q, keys, values, TABLES + 30, LENGTHS)
        with self.assertRaisesRegex(ValueError, "float32 or bfloat16"):
            paged.in_place(q, keys.half(), values.half(), TABLES, LENGTHS)
        padded = torch.zeros(BLOCKS, KV_HEADS, SIZE, 2 * DIM)[..., :DIM]  # rows DIM apart from each other's ends
        with self.assertRaisesRegex(ValueError, "contiguous"):
            paged.in_place(q, padded, padded, TABLES, LENGTHS)


class DecodeStep(unittest.TestCase):
    def test_the_decode_step_reads_in_place_and_gathers_only_where_no_loop_was_built(self) -> None:
        config = LlamaDecoderConfig(vocab_size=32, width=48, layers=2, heads=6, kv_heads=2, head_dim=8, hidden=64,
                                    max_positions=64)
        pool = LayeredPool(config, 2, 8, 4)
        rows = PagedRows(pool, [1, 2], [5, 0], [[3, 4], [6]])
        self.assertEqual(rows.way, "gathered" if paged.unavailable() else "in place")
        with mock.patch.object(paged, "unavailable", lambda: "no C compiler: set CC, or install gcc"):
            gathering = PagedRows(pool, [1, 2], [5, 0], [[3, 4], [6]])
        self.assertEqual(gathering.way, "gathered")
        q, k = torch.zeros(2, 6, 1, 8), torch.zeros(2, 2, 1, 8)
        with mock.patch.object(paged, "gathered", side_effect=AssertionError("gathered")):
            with self.assertRaisesRegex(AssertionError, "gathered"):
                gathering.attend(0, q, k, k)

    def test_a_steps_tables_are_checked_once_for_every_layer_and_refused_for_another_pool(self) -> None:
        if paged.unavailable():
            self.skipTest(f"the in-place loop is not built here: {paged.unavailable()}")
        config = LlamaDecoderConfig(vocab_size=32, width=48, layers=2, heads=6, kv_heads=2, head_dim=8, hidden=64,
                                    max_positions=64)
        pool = LayeredPool(config, 2, 8, 4)
        with mock.patch.object(paged, "check_tables", wraps=paged.check_tables) as checked:
            rows = PagedRows(pool, [1, 2], [5, 0], [[3, 4], [6]])
            q, k = torch.zeros(2, 6, 1, 8), torch.zeros(2, 2, 1, 8)
            for layer in range(2):
                rows.attend(layer, q, k, k)
        self.assertEqual(checked.call_count, 1)
        other = LayeredPool(config, 2, 12, 4)
        with self.assertRaisesRegex(ValueError, "checked for 2 rows over 8 blocks of 4"):
            paged.in_place_over(q, other.layer_keys(0), other.layer_values(0), rows.step)


if __name__ == "__main__":
    unittest.main()
