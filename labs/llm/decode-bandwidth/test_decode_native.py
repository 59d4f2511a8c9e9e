"""The whole decode step in one C call (llm_models.llama.native_step): over float32 weights it gives the shared
decoder's logits step after step and writes the same keys and values into the cache; over int8 codes the logits of
the decoder on their dequantized weights; at one thread and two, with its vector paths and without; a step it cannot
take is refused with what was wrong.

A tiny seeded random Llama (llm_models.llama.tiny) carries every check; its sharp attention (initializer 0.2) makes
a position read wrong change the logits."""

from __future__ import annotations

import os
import subprocess
import tempfile
import unittest
import unittest.mock
from pathlib import Path

import torch

from llm_models import native, paged, prebuild
from llm_models.kernels import int8_loop
from llm_models.kernels.quantize import dequantized_state_dict
from llm_models.llama import native_step
from llm_models.llama.model import LlamaDecoder
from llm_models.llama.native_step import NativeStep, pack, packed_shape, unavailable, unpack
from llm_models.llama.tiny import tiny_pair

PROMPT, STEPS = 7, 6
# float32 sums of at most 96 products in another order, through 2 layers: the decoder and the C step agree to a few
# units in the sixth digit on logits of magnitude about 10; 1e-4 leaves room and fails a wrong weight, norm,
# rotation or position (each moves a logit by 0.01 or more on this model).
ATOL = 1e-4


class NativeSteps(unittest.TestCase):
    reference, model = tiny_pair(seed=0)
    round_trip = LlamaDecoder(model.config, dequantized_state_dict(reference.state_dict()))

    def setUp(self) -> None:
        if unavailable() is not None:
            self.skipTest(f"no C compiler here: {unavailable()}")  # a build, not a speed
        self.threads = torch.get_num_threads()
        self.ids = torch.randint(0, self.model.config.vocab_size, (1, PROMPT + STEPS),
                                 generator=torch.Generator().manual_seed(3))

    def tearDown(self) -> None:
        torch.set_num_threads(self.threads)

    def compare(self, weights: str, reference: LlamaDecoder, plain: bool, threads: int,
                caches_agree: bool = True) -> float:
        """The largest logit difference over STEPS steps after a prefilled prompt; the caches must agree too
        (unless ``caches_agree`` is False)."""
        torch.set_num_threads(threads)
        step = NativeStep(self.model, weights, plain=plain)
        ours, theirs = reference.new_cache(1, PROMPT + STEPS), reference.new_cache(1, PROMPT + STEPS)
        worst = 0.0
        with torch.inference_mode():
            reference(self.ids[:, :PROMPT], ours)
            reference(self.ids[:, :PROMPT], theirs)
            for t in range(PROMPT, PROMPT + STEPS):
                expected = reference(self.ids[:, t : t + 1], theirs)
                found = step.step(self.ids[:, t : t + 1], ours)
                self.assertEqual(found.shape, expected.shape)
                worst = max(worst, float((found - expected).abs().max()))
        for mine, other in zip(ours, theirs, strict=True):
            self.assertEqual(mine.length, other.length)
            if not caches_agree:
                continue
            torch.testing.assert_close(mine.keys, other.keys, atol=ATOL, rtol=0)
            torch.testing.assert_close(mine.values, other.values, atol=ATOL, rtol=0)
        return worst

    def test_the_step_gives_the_decoders_logits_at_one_thread_and_two_with_and_without_vector_paths(self) -> None:
        for weights, reference in (("float32", self.model), ("int8", self.round_trip)):
            for plain in (False, True):
                for threads in (1, 2):
                    with self.subTest(weights=weights, plain=plain, threads=threads):
                        self.assertLess(self.compare(weights, reference, plain, threads), ATOL)

    def test_int8_codes_are_not_the_float32_weights(self) -> None:
        # the int8 step against the float32 decoder must miss the tight bound: it reads the codes, not a copy
        self.assertGreater(self.compare("int8", self.model, False, 1, caches_agree=False), ATOL)

    def test_a_wrong_weight_changes_the_logits(self) -> None:
        step = NativeStep(self.model, "float32")
        step._held[0][1].view(-1)[:8] += 0.5  # the first layer's o matrix, in its packed copy
        cache, expected_cache = self.model.new_cache(1, 4), self.model.new_cache(1, 4)
        with torch.inference_mode():
            found = step.step(self.ids[:, :1], cache)
            expected = self.model(self.ids[:, :1], expected_cache)
        self.assertGreater(float((found - expected).abs().max()), 10 * ATOL)

    def test_a_step_it_cannot_take_is_refused_naming_what_was_wrong(self) -> None:
        step = NativeStep(self.model, "float32")
        cache = self.model.new_cache(1, 2)
        token = self.ids[:, :1]
        with self.assertRaisesRegex(ValueError, r"one token id \(1, 1\) long, got \(1, 2\)"):
            step.step(self.ids[:, :2], cache)
        with self.assertRaisesRegex(ValueError, "outside the vocabulary of 128"):
            step.step(torch.tensor([[128]]), cache)
        cache[1].length = 1
        with self.assertRaisesRegex(ValueError, r"lengths \[0, 1\]"):
            step.step(token, cache)
        for store in cache:
            store.length = 2
        with self.assertRaisesRegex(ValueError, "with room"):
            step.step(token, cache)
        with self.assertRaisesRegex(ValueError, "cache of 2 layers, got 1"):
            step.step(token, cache[:1])
        with self.assertRaisesRegex(ValueError, "float32 or int8|one of"):
            NativeStep(self.model, "int4")
        half = LlamaDecoder(self.model.config.__class__(**{**vars(self.model.config), "dtype": torch.bfloat16}),
                            self.reference.state_dict())
        with self.assertRaisesRegex(ValueError, "float32 model on the CPU, the model is torch.bfloat16"):
            NativeStep(half, "float32")


class Packing(unittest.TestCase):
    def test_pack_pads_rows_to_whole_blocks_and_unpack_gives_the_matrix_back(self) -> None:
        matrix = torch.arange(6 * 16, dtype=torch.float32).view(6, 16)
        packed = pack(matrix)
        self.assertEqual(tuple(packed.shape), (2, 2, 4, 8))  # 2 blocks of 4 rows, 2 runs of 8 columns
        self.assertTrue(torch.equal(packed[0, 1, 2], matrix[2, 8:16]))  # block 0, run 1, row 2
        self.assertTrue(torch.equal(packed[1, 0, 2:], torch.zeros(2, 8)))  # the padding rows
        self.assertTrue(torch.equal(unpack(packed, 6), matrix))
        codes = torch.randint(-127, 128, (5, 8), dtype=torch.int8)
        self.assertTrue(torch.equal(unpack(pack(codes), 5), codes))

    def test_packing_into_a_given_place_writes_the_same_layout_there(self) -> None:
        matrix = torch.randn(6, 16, generator=torch.Generator().manual_seed(2))
        place = torch.full(packed_shape(6, 16), float("nan"))  # the padding rows must be written too
        self.assertIs(pack(matrix, out=place), place)
        self.assertTrue(torch.equal(place, pack(matrix)))


class Prebuild(unittest.TestCase):
    def test_make_venv_builds_every_c_file_of_the_shared_package(self) -> None:
        built = {*native_step.SOURCES, *int8_loop.SOURCES, *paged.SOURCES}
        self.assertEqual(built, set(Path(native.__file__).parent.rglob("*.c")))
        self.assertEqual(set(prebuild.LIBRARIES), {"step", "step, plain", "attend_rows", "int8_rows", "attend_blocks"})

    def test_without_a_cache_folder_it_builds_nothing_and_says_why(self) -> None:
        with unittest.mock.patch.dict(os.environ, {native.CACHE_ENV: "off"}), \
                unittest.mock.patch("builtins.print") as said:
            self.assertEqual(prebuild.main(), 0)
        self.assertIn("=off", said.call_args.args[0])


class BuildCache(unittest.TestCase):
    """llm_models.native keeps each build in a cache folder under a key of its inputs: the next process loads it, an
    edited C file builds anew, a cached file that does not load is rebuilt, and "off", a CPU that cannot be named or
    a failed build keep nothing."""

    SOURCE = "int answer(void) { return %d; }\n"

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.root = Path(folder.name)
        (self.root / "src").mkdir()
        self.source = self.root / "src" / "answer.c"
        self.source.write_text(self.SOURCE % 42)
        self.cache = self.root / "cache"
        patcher = unittest.mock.patch.dict(os.environ, {native.CACHE_ENV: str(self.cache)})
        patcher.start()
        self.addCleanup(patcher.stop)
        # the key's CPU part fixed, so that the test reads the same on a host without /proc/cpuinfo
        named = unittest.mock.patch.object(native, "cpu_identity", return_value="x86_64\nflags : avx2")
        named.start()
        self.addCleanup(named.stop)
        if unavailable() is not None:  # after the patch: no build of this check lands outside the test's folder
            self.skipTest(f"no C compiler here: {unavailable()}")

    def build(self) -> native.Build:
        return native.build.__wrapped__((self.source,))  # past the per-process cache: as a new process would

    def kept(self) -> list[Path]:
        return sorted(self.cache.glob("*.so"))

    def test_a_second_build_loads_the_kept_library_and_an_edited_source_builds_anew(self) -> None:
        self.assertEqual(self.build().require("answer").answer(), 42)
        first = self.kept()
        self.assertEqual(len(first), 1)
        with unittest.mock.patch.object(native.subprocess, "run", wraps=subprocess.run) as ran:
            self.assertEqual(self.build().require("answer").answer(), 42)
        self.assertEqual([call.args[0][1] for call in ran.call_args_list], ["--version"])  # no compile
        self.source.write_text(self.SOURCE % 7)
        self.assertEqual(self.build().require("answer").answer(), 7)
        self.assertEqual(len(self.kept()), 2)
        self.assertEqual(sorted(p.name for p in self.cache.iterdir()), [p.name for p in self.kept()])  # no temp left

    def test_a_kept_file_that_does_not_load_is_rebuilt_and_off_keeps_nothing(self) -> None:
        self.build()
        [kept] = self.kept()
        # a new file in its place, as every writer of the folder puts one there (llm_models.native.publish): the
        # kept library is mapped into this process, and writing into it where it lies would pull its pages away
        damaged = kept.with_suffix(".damaged")
        damaged.write_bytes(b"not a library")
        os.replace(damaged, kept)
        self.assertEqual(self.build().require("answer").answer(), 42)
        self.assertNotEqual(kept.read_bytes(), b"not a library")
        with unittest.mock.patch.dict(os.environ, {native.CACHE_ENV: "off"}):
            self.source.write_text(self.SOURCE % 5)
            self.assertEqual(self.build().require("answer").answer(), 5)
        self.assertEqual(len(self.kept()), 1)

    def test_an_unnamed_cpu_and_a_failed_build_leave_nothing_in_the_folder(self) -> None:
        with unittest.mock.patch.object(native, "cpu_identity", return_value=None):
            self.assertEqual(self.build().require("answer").answer(), 42)
        self.assertEqual(list(self.cache.glob("*")), [])
        self.source.write_text("int answer(void) { return }\n")
        failed = self.build()
        self.assertIsNone(failed.library)
        self.assertIn("could not build answer.c", failed.reason)
        self.assertEqual(list(self.cache.glob("*")), [])  # nor a temporary file


if __name__ == "__main__":
    unittest.main()

