"""A prefill of many rows multiplies by a kernel that keeps nothing per number of rows (llm_models.serving.kernels, NOTE at
PREFILL_PACKED_ROWS): oneDNN's packed linear keeps a primitive for every row count it has multiplied, and packed
prefills make nearly every row count new, so a server fed prompts of ever-new lengths grew by gigabytes. Memory
totals depend on the host, so these tests check which kernel runs, not how much memory the process holds."""

from __future__ import annotations

import unittest
import unittest.mock

import torch

from llm_models.llama.kinds import LAYER_KINDS
from llm_models.llama.tiny import TINY, tiny_pair
from llm_models.serving import kernels
from llm_models.serving.kernel_rows import PREFILL_PACKED_ROWS
from llm_models.serving.kernels import ONE, SEVERAL, STATELESS, Weight, candidates, ranking
from llm_models.serving.llama import LlamaServingModel
from llm_models.serving.pool import LayeredPool

BLOCK = 4
# packed prefills whose row counts (the sum of their prompts' lengths) run past the bound, each one new
LENGTHS = [(1,), (5,), (PREFILL_PACKED_ROWS,)] + [(n, 7, 5) for n in range(PREFILL_PACKED_ROWS - 12, 60, 3)]


def weights(model: LlamaServingModel) -> list[Weight]:
    return [getattr(layer, kind) for layer in model.served for kind in LAYER_KINDS] + [model.head]


def prefill_all(model: LlamaServingModel, seed: int = 0) -> list[torch.Tensor]:
    """Each packed prefill of LENGTHS in turn, its blocks released after; each one's logits (N, vocab)."""
    generator = torch.Generator().manual_seed(seed)
    pool = LayeredPool(model.config, model.layers, 64, BLOCK)
    logits = []
    for lengths in LENGTHS:
        prompts = [torch.randint(0, TINY.vocab_size, (n,), generator=generator).tolist() for n in lengths]
        tables = [pool.allocate(-(-n // BLOCK)) for n in lengths]
        logits.append(model.prefill(pool, prompts, tables))
        for table in tables:
            pool.release(table)
    return logits


class PrefillKernel(unittest.TestCase):
    def test_every_pick_leaves_a_blas_kernel_for_long_prefills_reusing_a_copy_it_keeps(self) -> None:
        matrix = torch.randn(40, 24, generator=torch.Generator().manual_seed(1))
        with unittest.mock.patch.object(kernels, "onednn_runs", return_value=True):  # onednn among the picks
            names = list(candidates(torch.float32, SEVERAL))
        for one in names:
            for several in names:
                with self.subTest(one=one, several=several):
                    if "onednn" in (one, several) and not kernels.onednn_runs():
                        self.skipTest("no oneDNN here to pack a copy")
                    weight = Weight(matrix, {ONE: one, SEVERAL: several})
                    self.assertIn(weight.prefill_kernel, STATELESS)
                    blas = [rows for rows in (SEVERAL, ONE) if weight.kernels[rows] in STATELESS]
                    if blas:  # no further copy: the one the table's BLAS pick already holds
                        self.assertIs(weight.prefill_way[1], weight.ways[blas[0]][1])

    def test_prefill_multiplies_as_f_linear_on_both_sides_of_the_bound(self) -> None:
        generator = torch.Generator().manual_seed(2)
        matrix = torch.randn(40, 24, generator=generator)
        for name in candidates(torch.float32, SEVERAL):
            weight = Weight(matrix, {ONE: name, SEVERAL: name})
            for rows in (1, 2, PREFILL_PACKED_ROWS, PREFILL_PACKED_ROWS + 1, 3 * PREFILL_PACKED_ROWS + 5):
                with self.subTest(kernel=name, rows=rows):
                    x = torch.randn(1, rows, 24, generator=generator)
                    # float32 sums of 24 products in another order (test_serving_kernels' tolerance)
                    torch.testing.assert_close(weight.prefill(x), torch.nn.functional.linear(x, matrix),
                                               atol=1e-5, rtol=1e-5)


class PrefillRows(unittest.TestCase):
    """The tiny Llama, each matrix's table pick wrapped to record the row counts it multiplies."""

    def recorded(self, one: str, several: str) -> tuple[LlamaServingModel, list[int]]:
        _, decoder = tiny_pair(seed=3)
        model = LlamaServingModel(decoder, ranking(one, several))
        seen: list[int] = []
        for weight in weights(model):
            for rows, (multiply, prepared) in weight.ways.items():
                def recording(x: torch.Tensor, *tensors: object, multiply=multiply) -> torch.Tensor:
                    seen.append(x.shape[0])
                    return multiply(x, *tensors)
                weight.ways[rows] = (recording, prepared)
        return model, seen

    def test_prefills_above_the_bound_never_reach_the_tables_kernels_and_decode_in_torch_still_does(self) -> None:
        model, seen = self.recorded("in_out", "onednn")
        prefill_all(model)
        counts = {sum(lengths) for lengths in LENGTHS}
        self.assertGreater(len([count for count in counts if count > PREFILL_PACKED_ROWS]), 5)
        self.assertTrue(seen, "the short prefills took the table's kernels")
        self.assertLessEqual(max(seen), PREFILL_PACKED_ROWS)
        seen.clear()
        pool = LayeredPool(model.config, model.layers, 64, BLOCK)
        tables = [pool.allocate(2) for _ in range(3)]
        model.decode(pool, [1, 2, 3], [0, 1, 2], tables)
        if model.decode_why is None:  # the one-call step reads its own packed copy: none of the table's kernels
            self.assertEqual(seen, [])
        model.native, model.decode_why = None, "the test's choice"  # the torch way: the table's kernels, as before
        model.decode(pool, [1, 2, 3], [0, 1, 2], tables)
        self.assertEqual(set(seen), {3})

    def test_long_prefills_give_the_tables_kernels_logits(self) -> None:
        model, _ = self.recorded("in_out", "onednn")
        with unittest.mock.patch.object(kernels, "PREFILL_PACKED_ROWS", 10_000):  # every prefill by the table
            by_table = prefill_all(model)
        for lengths, got, expected in zip(LENGTHS, prefill_all(model), by_table):
            with self.subTest(lengths=lengths):
                # test_serving_kernels' tolerance between kernel picks, float32
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)

    @unittest.skipUnless(kernels.onednn_runs(), "no oneDNN here: the packed op never runs")
    def test_prefills_of_many_distinct_row_counts_never_call_the_packed_op(self) -> None:
        _, decoder = tiny_pair(seed=3)
        model = LlamaServingModel(decoder, ranking("onednn", "onednn"))  # every kind packed, at both counts
        rows_seen: list[int] = []
        packed_op = torch.ops.mkldnn._linear_pointwise

        def recording(x: torch.Tensor, *args: object) -> torch.Tensor:
            rows_seen.append(x.shape[0])
            return packed_op(x, *args)

        with unittest.mock.patch.object(torch.ops.mkldnn, "_linear_pointwise", recording):
            prefill_all(model)
        self.assertTrue(rows_seen, "the short prefills took the packed op")
        self.assertLessEqual(max(rows_seen), PREFILL_PACKED_ROWS)


if __name__ == "__main__":
    unittest.main()
