"""The served Llama's kernel table (llm_models.serving.kernels): every kernel multiplies like F.linear at any number of rows,
the least time wins per kind and row count, and the model decodes the same whichever wins."""

from __future__ import annotations

import unittest
import unittest.mock

import torch

from llm_models.llama.tiny import TINY, tiny_pair
from llm_models.serving import kernels
from llm_models.serving.kernels import ONE, ROWS, SEVERAL, Weight, candidates, kernel_table, ranking
from llm_models.serving.llama import LlamaServingModel
from llm_models.serving.model import greedy_together
from llm_models.serving.pool import LayeredPool

SHAPES = ((1, 1, 24), (3, 1, 24), (1, 17, 24), (19, 24))  # a decode step's rows, a packed prefill's
# float32 sums of 24 products in another order; bfloat16 keeps 8 significant bits, so a product of entries ~N(0, 1)
# summed over 24 terms may round differently by a few hundredths
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 5e-2}


class WeightTest(unittest.TestCase):
    def test_every_kernel_multiplies_any_number_of_rows_as_f_linear_does_in_both_dtypes(self) -> None:
        generator = torch.Generator().manual_seed(8)
        for dtype in (torch.float32, torch.bfloat16):
            matrix = torch.randn(40, 24, generator=generator).to(dtype)
            for name in candidates(dtype, SEVERAL):
                weight = Weight(matrix, {ONE: name, SEVERAL: name})
                for shape in SHAPES:
                    with self.subTest(dtype=dtype, kernel=name, shape=shape):
                        x = torch.randn(*shape, generator=generator).to(dtype)
                        torch.testing.assert_close(weight(x), torch.nn.functional.linear(x, matrix),
                                                   atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])

    def test_one_row_takes_the_one_row_kernel_and_several_rows_the_other(self) -> None:
        matrix = torch.randn(8, 4, generator=torch.Generator().manual_seed(9))
        weight = Weight(matrix, {ONE: "in_out", SEVERAL: "out_in"})
        with unittest.mock.patch("torch.mm", side_effect=AssertionError("in_out")):
            weight(torch.ones(3, 1, 4))  # several rows: F.linear over the matrix itself
            with self.assertRaisesRegex(AssertionError, "in_out"):
                weight(torch.ones(1, 1, 4))

    def test_out_in_keeps_the_matrix_itself_and_one_kernel_for_both_counts_keeps_one_copy(self) -> None:
        matrix = torch.randn(8, 4, generator=torch.Generator().manual_seed(10))
        plain = Weight(matrix, {ONE: "out_in", SEVERAL: "out_in"})
        self.assertEqual(plain.ways[ONE][1][0].data_ptr(), matrix.data_ptr())
        transposed = Weight(matrix, {ONE: "in_out", SEVERAL: "in_out"})
        self.assertIs(transposed.ways[ONE][1], transposed.ways[SEVERAL][1])
        self.assertEqual(tuple(transposed.ways[ONE][1][0].shape), (4, 8))

    def test_without_onednn_only_the_blas_kernels_are_candidates(self) -> None:
        with unittest.mock.patch.object(kernels, "onednn_runs", return_value=False):
            self.assertEqual(sorted(candidates(torch.float32, ONE)), ["in_out", "out_in"])
        self.assertNotIn("onednn", candidates(torch.bfloat16, SEVERAL))


class TableTest(unittest.TestCase):
    MATRICES = {"qkv": [torch.randn(12, 8) for _ in range(2)], "head": [torch.randn(30, 8)]}

    def test_the_least_time_wins_per_kind_and_row_count_the_first_on_a_tie(self) -> None:
        supplied = {"qkv": {ONE: {"out_in": 5.0, "in_out": 3.0, "onednn": 4.0},
                            SEVERAL: {"out_in": 2.0, "in_out": 2.0, "onednn": 9.0}},
                    "head": {ONE: {"out_in": 1.0, "in_out": 3.0, "onednn": 4.0},
                             SEVERAL: {"out_in": 7.0, "in_out": 8.0, "onednn": 1.0}}}
        with unittest.mock.patch.object(kernels, "onednn_runs", return_value=True):
            table = kernel_table(self.MATRICES, supplied)
        self.assertEqual(table.chosen, {"qkv": {ONE: "in_out", SEVERAL: "out_in"},
                                        "head": {ONE: "out_in", SEVERAL: "onednn"}})
        record = table.as_record()
        self.assertEqual(record["timings"], "supplied")
        self.assertEqual(record["chosen"]["head"], {"1": "out_in", "8": "onednn"})
        self.assertEqual([(row["kind"], row["rows"], row["shape_out_in"]) for row in record["rows"]],
                         [("qkv", 1, [12, 8]), ("qkv", 8, [12, 8]), ("head", 1, [30, 8]), ("head", 8, [30, 8])])

    def test_a_timed_table_times_every_candidate_at_each_row_count(self) -> None:
        table = kernel_table(self.MATRICES)
        self.assertEqual(table.timings, "timed")
        for row in table.rows:
            self.assertEqual(sorted(row["ns"]), sorted(candidates(torch.float32, row["rows"])))
            self.assertTrue(all(ns > 0 for ns in row["ns"].values()))
        self.assertEqual(sorted({row["rows"] for row in table.rows}), list(ROWS))


class ServedLlamaTest(unittest.TestCase):
    """The tiny Llama decodes the same batch to the same logits whichever kernels the table picks."""

    def test_every_pick_decodes_a_mixed_batch_to_the_same_logits(self) -> None:
        _, decoder = tiny_pair(seed=5)
        generator = torch.Generator().manual_seed(6)
        batch = [torch.randint(0, TINY.vocab_size, (n,), generator=generator).tolist() for n in (3, 17, 1)]
        results = {}
        for one, several in (("out_in", "out_in"), ("in_out", "onednn"), ("onednn", "in_out")):
            model = LlamaServingModel(decoder, ranking(one, several))
            pool = LayeredPool(model.config, model.layers, 40, 4)
            tokens, logits = greedy_together(model, pool, batch, 6)
            results[(one, several)] = (tokens, logits)
            self.assertEqual(model.kernels.timings, "supplied")
        reference_tokens, reference_logits = results[("out_in", "out_in")]
        for picks, (tokens, logits) in results.items():
            with self.subTest(picks=picks):
                self.assertEqual(tokens, reference_tokens)
                for got, expected in zip(logits, reference_logits):
                    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


class ChosenKernelsUsed(unittest.TestCase):
    def test_each_kind_multiplies_by_its_own_pick_at_one_row_and_at_several(self) -> None:
        _, decoder = tiny_pair(seed=5)
        picks = {"qkv": ("in_out", "out_in"), "o": ("out_in", "in_out"), "gate_up": ("in_out", "in_out"),
                 "down": ("out_in", "out_in"), "head": ("in_out", "out_in")}
        timings = {kind: {ONE: {"out_in": 2.0, "in_out": 3.0, "onednn": 9.0, one: 1.0},
                          SEVERAL: {"out_in": 2.0, "in_out": 3.0, "onednn": 9.0, several: 1.0}}
                   for kind, (one, several) in picks.items()}
        model = LlamaServingModel(decoder, timings)
        for layer in model.served:
            for kind in ("qkv", "o", "gate_up", "down"):
                with self.subTest(kind=kind):
                    self.assertEqual(getattr(layer, kind).kernels, dict(zip(ROWS, picks[kind])))
        self.assertEqual(model.head.kernels, dict(zip(ROWS, picks["head"])))

    def test_timings_round_trip_through_json_and_bad_ones_are_named(self) -> None:
        timings = ranking("in_out", "onednn")
        self.assertEqual(kernels.parse_timings(kernels.dump_timings(timings)), timings)
        for text, named in (("[1]", "an object of kinds"), ('{"qkvv": {}}', "'qkvv'"),
                            ('{"qkv": {"3": {}}}', "qkv.3"), ('{"qkv": {"1": {"out_in": -1}}}', "qkv.1.out_in"),
                            ("{", "not JSON")):
            with self.subTest(text=text), self.assertRaisesRegex(ValueError, named):
                kernels.parse_timings(text)
        with self.assertRaisesRegex(ValueError, "no ns for"):
            kernel_table({"qkv": [torch.randn(4, 4)]}, {"qkv": {ONE: {"out_in": 1.0}}})


class Norm(unittest.TestCase):
    def test_the_fused_float32_norm_is_the_formula_and_bfloat16_normalises_in_float32(self) -> None:
        from llm_models.llama.model import rms_norm

        def formula(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
            x32 = x.float()  # x / sqrt(mean(x^2) + eps) * weight, in float32, cast back before the weight
            return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

        generator = torch.Generator().manual_seed(11)
        x, weight = torch.randn(3, 5, 576, generator=generator) * 4, torch.rand(576, generator=generator)
        # float32 sums of 576 squares in another order: a few units in the seventh digit
        torch.testing.assert_close(rms_norm(x, weight, 1e-5), formula(x, weight, 1e-5), atol=1e-6, rtol=1e-6)
        self.assertGreater(float((rms_norm(x, weight, 1e-5) - formula(x, weight * 1.001, 1e-5)).abs().max()), 1e-4)
        half = x.to(torch.bfloat16)
        torch.testing.assert_close(rms_norm(half, weight.to(torch.bfloat16), 1e-5),
                                   formula(half, weight.to(torch.bfloat16), 1e-5), atol=0, rtol=0)
