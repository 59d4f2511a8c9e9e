"""ours-compiled: the eager decoder's numbers, its one-row multiplies through inductor, everything else unchanged."""

from __future__ import annotations

import os
import unittest

import torch
import torch.nn.functional as F

from decode_bandwidth.cache import PreallocatedCache
from decode_bandwidth.compiled import CACHE_VARIABLE, CompiledDecoder, cold_inductor_cache
from decode_bandwidth.equivalence import one_row_at_a_time
from decode_bandwidth.testing import TOLERANCE, tiny_model, token_ids
from llm_models.kernels.row_dot import row_dot


class CountingKernel:
    """Wraps the compiled kernel and counts its calls, so a test sees which path a step took."""

    def __init__(self, kernel: object) -> None:
        self.kernel, self.calls = kernel, 0

    def __call__(self, *args: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.kernel(*args)  # type: ignore[operator]


class CompiledDecoderTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.model = tiny_model(seed=7)  # biases and norms off their defaults: a twin that dropped them would differ
        cls.twin = CompiledDecoder.of(cls.model)
        cls.ids = token_ids(cls.model.config, batch=2, length=10, seed=8)

    def counted(self) -> CountingKernel:
        counter = CountingKernel(self.twin.kernel)
        self.twin.kernel = counter
        for layer in self.twin.layers:
            layer.kernel = counter
        self.addCleanup(self.restore, counter.kernel)
        return counter

    def restore(self, kernel: object) -> None:
        self.twin.kernel = kernel  # type: ignore[assignment]
        for layer in self.twin.layers:
            layer.kernel = kernel  # type: ignore[assignment]

    def test_row_dot_is_the_linear_map_it_replaces(self) -> None:
        generator = torch.Generator().manual_seed(0)
        x, weight, bias = (torch.randn(shape, generator=generator) for shape in ((1, 24), (40, 24), (40,)))
        torch.testing.assert_close(row_dot(x, weight, bias), F.linear(x, weight, bias), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(row_dot(x, weight, None), F.linear(x, weight), atol=1e-6, rtol=1e-6)
        compiled = self.twin.kernel
        torch.testing.assert_close(compiled(x, weight, bias), F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)

    def test_the_twin_holds_the_eager_models_numbers_in_both_layouts(self) -> None:
        ours, theirs = self.model.state_dict(), self.twin.state_dict()
        self.assertEqual(sorted(ours), sorted(theirs))
        for name, tensor in ours.items():
            self.assertTrue(torch.equal(tensor, theirs[name]), name)
        layer = self.twin.layers[1]
        self.assertTrue(torch.equal(layer.one_row["qkv"][0], self.model.layers[1].qkv_weight.t()))
        self.assertTrue(torch.equal(layer.one_row["mlp fc"][0], self.model.layers[1].fc_weight.t()))
        self.assertTrue(torch.equal(self.twin.head_one_row, self.model.tied_head.t()))

    def test_the_kernel_is_torch_compile_of_row_dot_not_the_eager_function(self) -> None:
        self.assertIsNot(self.twin.kernel, row_dot)
        self.assertIs(getattr(self.twin.kernel, "_torchdynamo_orig_callable", None), row_dot)
        self.assertTrue(torch._dynamo.config.fail_on_recompile_limit_hit)

    def test_a_one_row_step_runs_every_matrix_through_the_compiled_kernel(self) -> None:
        config = self.model.config
        counter = self.counted()
        with torch.inference_mode():
            cache = PreallocatedCache(config, 1, 10)
            self.twin(self.ids[:1, :6], cache)  # prefill: six rows, the eager path
            self.assertEqual(counter.calls, 0)
            self.twin(self.ids[:1, 6:7], cache)  # one row: four matrices per layer and the head
        self.assertEqual(counter.calls, 4 * config.layers + 1)

    def test_a_step_of_two_rows_is_the_eager_step_exactly(self) -> None:
        counter = self.counted()
        with torch.inference_mode():
            ours = self.model(self.ids[:, :7], PreallocatedCache(self.model.config, 2, 10))[0]
            twins = self.twin(self.ids[:, :7], PreallocatedCache(self.model.config, 2, 10))[0]
        self.assertEqual(counter.calls, 0)
        self.assertTrue(torch.equal(ours, twins))

    def test_one_row_at_a_time_matches_one_full_pass_at_every_step(self) -> None:
        with torch.inference_mode():
            full = self.model(self.ids)[0]  # (B, T, vocab)
            stepped = one_row_at_a_time(self.twin, self.ids, prefix=4)
        self.assertEqual(stepped.shape, full.shape)
        torch.testing.assert_close(stepped, full, **TOLERANCE)


class ColdCache(unittest.TestCase):
    def test_the_benchmark_compiles_into_an_empty_cache_it_removes_and_restores_the_setting(self) -> None:
        before = os.environ.get(CACHE_VARIABLE)
        with cold_inductor_cache() as folder:
            self.assertEqual(os.environ[CACHE_VARIABLE], folder)
            self.assertEqual(os.listdir(folder), [])
        self.assertFalse(os.path.exists(folder))
        self.assertEqual(os.environ.get(CACHE_VARIABLE), before)


if __name__ == "__main__":
    unittest.main()
