"""The shared models package's data: the long evaluation text and the accelerator datasheet figures."""

from __future__ import annotations

import tempfile
import unittest
from dataclasses import replace
from pathlib import Path
from unittest import mock

from llm_models import texts
from llm_models.hardware import H100_SXM


class EvaluationText(unittest.TestCase):
    def test_the_kept_text_reads_and_matches_its_digest(self) -> None:
        text = texts.PYTHON_REFERENCE.read()
        self.assertTrue(text.startswith("Objects, values and types"))
        self.assertGreater(len(text), 50_000)  # thousands of tokens: far longer than any window the labs use

    def test_a_changed_text_is_refused_naming_the_file_and_both_digests(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            changed = Path(folder) / texts.PYTHON_REFERENCE.name
            changed.write_text(texts.PYTHON_REFERENCE.read().replace("object", "obiect", 1))
            with mock.patch.object(texts, "FOLDER", Path(folder)):
                with self.assertRaisesRegex(ValueError, rf"{changed}: sha256 is [0-9a-f]{{64}}, not the "
                                                        rf"{texts.PYTHON_REFERENCE.sha256}"):
                    texts.PYTHON_REFERENCE.read()

    def test_a_missing_text_is_refused_naming_the_file(self) -> None:
        missing = replace(texts.PYTHON_REFERENCE, name="no-such-text.txt")
        with self.assertRaisesRegex(ValueError, r"no-such-text\.txt: cannot read the evaluation text"):
            missing.read()


class DatasheetArithmetic(unittest.TestCase):
    def test_the_ridge_point_is_flops_over_bytes(self) -> None:
        self.assertAlmostEqual(H100_SXM.ridge_flops_per_byte, 989.5e12 / 3.35e12)
        self.assertGreater(H100_SXM.ridge_flops_per_byte, 250)  # the order the decode page contrasts with a CPU's


if __name__ == "__main__":
    unittest.main()
