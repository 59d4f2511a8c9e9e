"""The fast twin of the Llama decoder (decode_bandwidth.fast_llama): with any kernel per matrix kind, eager or with
its layers compiled, it gives the shared decoder's logits step after step (over int8 codes, the logits of the
decoder on their dequantized weights); a twin with a wrong fused matrix is
refused before timing; the kernel table names the fastest kernel it measured for each kind.

A tiny seeded random Llama (llm_models.llama.tiny) carries every check."""

from __future__ import annotations

import unittest

import torch

from decode_bandwidth import llama
from decode_bandwidth.fast_llama import FastLlama, fused_matrices
from decode_bandwidth.llama_modes import (
    KERNEL_CANDIDATES,
    LLAMA_FAST_ATOL,
    LLAMA_FAST_RTOL,
    fastest_kernel,
)
from decode_bandwidth.testing import ONEDNN_WINS, OUT_IN_WINS
from labkit.bench import EquivalenceError
from llm_models.kernels import int8_loop, matvec
from llm_models.kernels.quantize import dequantize, dequantized_state_dict, quantize_rows
from llm_models.llama.kinds import MATRIX_KINDS
from llm_models.llama.model import LlamaDecoder
from llm_models.llama.tiny import tiny_pair
from llm_models.llama.traffic import llama_int8_weight_bytes

STEPS = 5  # decode steps after a prefilled prompt, each compared
PROMPT = 7


def every_kind(kernel: str) -> dict[str, str]:
    return {kind: kernel for kind in MATRIX_KINDS}


class SameLogits(unittest.TestCase):
    reference, model = tiny_pair(seed=0)

    def assert_steps_match(self, twin: FastLlama, decoder: LlamaDecoder | None = None,
                           atol: float = LLAMA_FAST_ATOL) -> None:
        """Prefill one prompt into two caches with ``decoder`` (the shared decoder on the twin's weights), then
        step both and compare every step."""
        model = self.model if decoder is None else decoder
        generator = torch.Generator().manual_seed(5)
        prompt = torch.randint(0, self.model.config.vocab_size, (1, PROMPT), generator=generator)
        ours, theirs = model.new_cache(1, PROMPT + STEPS), model.new_cache(1, PROMPT + STEPS)
        with torch.inference_mode():
            token = model(prompt, ours)[:, -1:].argmax(-1)
            model(prompt, theirs)
            for _ in range(STEPS):
                expected, found = model(token, ours), twin.step(token, theirs)
                torch.testing.assert_close(found, expected, atol=atol, rtol=LLAMA_FAST_RTOL)
                token = expected[:, -1:].argmax(-1)
        self.assertEqual({store.length for store in theirs}, {PROMPT + STEPS})

    def test_every_float32_kernel_gives_the_shared_decoders_logits_step_after_step(self) -> None:
        runs, _ = matvec.available(KERNEL_CANDIDATES["float32"])
        self.assertIn("compiled", runs)  # torch's own: always available
        for kernel in runs:
            with self.subTest(kernel=kernel):
                self.assert_steps_match(FastLlama(self.model, every_kind(kernel), compiled=False))

    def test_a_twin_holds_a_copy_only_of_what_its_kernels_prepared_anew(self) -> None:
        def storages(twin: FastLlama) -> set[int]:
            return {tensor.untyped_storage().data_ptr() for layer in twin.layers for prepared in (*layer, twin.head)
                    for tensor in prepared if isinstance(tensor, torch.Tensor)}

        decoders = {parameter.untyped_storage().data_ptr() for parameter in self.model.parameters()}
        # out_in reads the decoder's matrices as they are: no second copy of them
        self.assertLessEqual(storages(FastLlama(self.model, every_kind("out_in"), compiled=False)), decoders)
        # in_out transposes each matrix: the copies, all in one buffer of the twin's own
        copied = storages(FastLlama(self.model, every_kind("in_out"), compiled=False))
        self.assertEqual(len(copied), 1)
        self.assertFalse(copied & decoders)

    def test_the_twin_with_compiled_layers_and_mixed_kernels_gives_the_same_logits(self) -> None:
        kernels = dict(zip(MATRIX_KINDS, ("compiled", "out_in", "in_out", "compiled", "out_in"), strict=True))
        self.assert_steps_match(FastLlama(self.model, kernels, compiled=True))

    def test_every_int8_kernel_gives_the_logits_of_the_decoder_on_its_dequantized_weights(self) -> None:
        dequantized = LlamaDecoder(self.model.config, dequantized_state_dict(self.reference.state_dict()))
        runs, _ = matvec.available(matvec.INT8)  # every int8 kernel, the benchmark's candidates and inductor's loop
        self.assertIn("int8-c", runs)  # the C loop builds with the compiler inductor needs anyway
        for kernel in runs:
            with self.subTest(kernel=kernel):
                twin = FastLlama(self.model, every_kind(kernel), compiled=False)
                self.assertEqual(twin.weights, "int8")
                self.assert_steps_match(twin, dequantized)
                with self.assertRaises(AssertionError):  # the float32 decoder is not what the int8 twin computes
                    self.assert_steps_match(twin, self.model, atol=1e-6)

    def test_the_c_loop_splits_rows_over_two_threads_and_gives_the_same_product(self) -> None:
        generator = torch.Generator().manual_seed(2)
        before = torch.get_num_threads()
        # odd sizes leave rows outside a four-row block and columns outside a 16-lane step; fewer rows than a
        # block; a real layer's width
        for rows, cols in ((37, 53), (3, 16), (2, 7), (64, 576)):
            codes, scale = quantize_rows(torch.randn(rows, cols, generator=generator))
            x = torch.randn(1, cols, generator=generator)
            expected = x @ dequantize(codes, scale).t()
            try:
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    with self.subTest(rows=rows, cols=cols, threads=threads):
                        torch.testing.assert_close(int8_loop.int8_rows(x, codes, scale, None), expected, atol=1e-5,
                                                   rtol=1e-5)
            finally:
                torch.set_num_threads(before)
        codes, scale = quantize_rows(torch.randn(37, 53, generator=generator))
        x = torch.randn(1, 53, generator=generator)
        expected = x @ dequantize(codes, scale).t()
        wide = torch.zeros(37, 2)  # a scale that is a strided view, and codes stored transposed
        wide[:, 0] = scale
        transposed = codes.t().contiguous().t()
        torch.testing.assert_close(int8_loop.int8_rows(x, transposed, wide[:, 0], None), expected, atol=1e-5, rtol=1e-5)
        with self.assertRaises(ValueError) as refused:
            int8_loop.int8_rows(x, codes, scale.double(), None)
        self.assertIn("float32 scales", str(refused.exception))
        with self.assertRaises(ValueError) as refused:
            int8_loop.int8_rows(torch.randn(1, 52), codes, scale, None)
        self.assertIn("(37, 53)", str(refused.exception))

    def test_a_twin_cannot_compile_its_layers_around_an_eager_only_kernel(self) -> None:
        for kernel in ("int8-c", "onednn"):
            with self.subTest(kernel=kernel), self.assertRaises(ValueError) as refused:
                FastLlama(self.model, every_kind(kernel), compiled=True)
            self.assertIn(kernel, str(refused.exception))

    def test_the_int8_step_bytes_are_the_bytes_of_the_twins_codes_scales_and_norms(self) -> None:
        twin = FastLlama(self.model, every_kind("int8-c"), compiled=False)
        held = [tensor for layer in twin.layers for prepared in layer for tensor in prepared if tensor is not None]
        held += [tensor for tensor in twin.head if tensor is not None]
        held += [norm for pair in twin.norms for norm in pair] + [self.model.norm_final]
        found = sum(tensor.numel() * tensor.element_size() for tensor in held)
        self.assertEqual(llama_int8_weight_bytes(self.model.config.as_record()), found)

    def test_a_twin_whose_fused_gate_and_up_are_swapped_is_refused_before_timing(self) -> None:
        broken = FastLlama(self.model, every_kind("out_in"), compiled=False)
        for index, (qkv, o, gate_up, down) in enumerate(broken.layers):
            gate, up = gate_up[0].chunk(2)
            broken.layers[index] = (qkv, o, (torch.cat([up, gate]), gate_up[1]), down)
        runners = llama.step_runners(self.model, self.reference, 9, torch.Generator().manual_seed(3),
                                     {"ours-fused": broken})
        with torch.inference_mode(), self.assertRaises(EquivalenceError) as refused:
            llama.check_step(*runners, 9)
        self.assertIn("ours-fused differs from ours-prealloc at context 9", str(refused.exception))

    def test_a_twin_needs_one_kernel_per_kind_in_one_weight_format(self) -> None:
        with self.assertRaises(ValueError):
            FastLlama(self.model, {"qkv": "out_in"}, compiled=False)
        with self.assertRaises(ValueError):
            FastLlama(self.model, {**every_kind("out_in"), "head": "int8-compiled"}, compiled=False)


class KernelTable(unittest.TestCase):
    def test_the_table_covers_every_kind_and_chooses_each_kinds_fastest_kernel_per_weight_format(self) -> None:
        _, model = tiny_pair(seed=1)
        table = llama.kernel_table(model, threads=1)
        self.assertEqual([row["kind"] for row in table["rows"]], list(MATRIX_KINDS))
        self.assertEqual(sorted(table["chosen"]), ["float32", "float32-compiled", "int8"])
        self.assertFalse(table["traceable"]["onednn"])
        for row in table["rows"]:
            for name, chosen in table["chosen"].items():
                weights, compiled = name.removesuffix("-compiled"), name.endswith("-compiled")
                times = {kernel: entry["ns"] for kernel, entry in row["kernels"].items()
                         if table["formats"][kernel] == weights and (table["traceable"][kernel] or not compiled)}
                self.assertEqual(chosen[row["kind"]], min(times, key=times.__getitem__))
        shapes = {kind: matrices[0].shape for kind, matrices in fused_matrices(model).items()}
        config = model.config
        self.assertEqual(tuple(shapes["qkv"]), ((config.heads + 2 * config.kv_heads) * config.head_dim, config.width))

    def test_each_outcome_of_the_kernel_table_is_chosen_from_the_timings_it_is_given(self) -> None:
        _, model = tiny_pair(seed=1)
        runs, _ = matvec.available([name for names in KERNEL_CANDIDATES.values() for name in names])
        if not {"onednn", "int8pack", "int8-c"} <= set(runs):
            self.skipTest(f"this PyTorch or machine lacks a candidate kernel: only {runs} run")  # a build, not a speed
        for timings, expected in ((ONEDNN_WINS, ("onednn", "in_out", "int8pack")),
                                  (OUT_IN_WINS, ("out_in", "out_in", "int8-c"))):
            with self.subTest(first=expected[0]):
                table = llama.kernel_table(model, threads=1, supplied_ns=timings)
                self.assertEqual(table["timings"], "supplied")
                for kernel_set, name in zip(("float32", "float32-compiled", "int8"), expected):
                    self.assertEqual(set(table["chosen"][kernel_set].values()), {name}, kernel_set)

    def test_the_fastest_kernel_is_the_least_time_and_the_first_listed_on_a_tie(self) -> None:
        row = {"kernels": {"a": {"ns": 3.0}, "b": {"ns": 1.0}, "c": {"ns": 1.0}}}
        self.assertEqual(fastest_kernel(row), "b")
        row["kernels"]["a"]["ns"] = 0.5
        self.assertEqual(fastest_kernel(row), "a")
        self.assertEqual(fastest_kernel(row, ["a", "c"]), "a")
        row["kernels"]["a"]["ns"] = 3.0
        self.assertEqual(fastest_kernel(row, ["a", "c"]), "c")


if __name__ == "__main__":
    unittest.main()
