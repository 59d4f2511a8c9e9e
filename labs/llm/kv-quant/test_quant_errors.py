"""The error chain on the first lab's random-weight block: element -> scores -> attention output -> logits."""

from __future__ import annotations

import unittest

from kv_quant.errors import ErrorChain, error_chain
from kv_quant.testing import FORMATS, TINY, random_ids
from llm_models.cache_formats import CacheFormat
from llm_models.toy.model import DecoderBlock

PROMPT, LENGTH = 48, 72  # 48 positions prefilled, 24 decoded one at a time (KIVI flushes a group at 64)


class ErrorChainOnRandomWeights(unittest.TestCase):
    chains: dict[str, ErrorChain]

    @classmethod
    def setUpClass(cls) -> None:
        model, ids = DecoderBlock(TINY), random_ids(1, LENGTH, seed=0)
        cls.chains = {fmt.label: error_chain(fmt, model, ids, PROMPT) for fmt in FORMATS}

    def test_the_float32_format_differs_from_the_plain_cache_by_nothing_at_any_link(self) -> None:
        chain = self.chains["float32"]
        self.assertEqual((chain.keys, chain.values, chain.scores, chain.attention_output, chain.logits),
                         (0.0, 0.0, 0.0, 0.0, 0.0))
        self.assertEqual(chain.top1_agreement, 1.0)

    def test_logits_error_rises_as_bits_fall(self) -> None:
        for family in (("bfloat16", "int8", "int4-g32", "kivi-2b-g16-r16"), ("kivi-4b-g16-r16", "kivi-2b-g16-r16"),
                       ("q8_0", "q4_0")):
            with self.subTest(family=family):
                errors = [self.chains[label].logits for label in family]
                self.assertEqual(errors, sorted(errors))

    def test_every_quantized_format_changes_every_link_yet_stays_within_5_percent_of_the_logits(self) -> None:
        for fmt in FORMATS:
            if fmt.name == "float32":
                continue
            chain = self.chains[fmt.label]
            with self.subTest(fmt=fmt.label):
                # keys feed the scores; values only the output: a side left in float32 stays exact
                changed = [chain.attention_output, chain.logits]
                changed += [chain.keys, chain.scores] if fmt.quantizes("keys") else [chain.values]
                self.assertGreater(min(changed), 0.0)
                if not fmt.quantizes("keys"):
                    self.assertEqual((chain.keys, chain.scores), (0.0, 0.0))
                if not fmt.quantizes("values"):
                    self.assertEqual(chain.values, 0.0)
                self.assertLess(chain.logits, 0.05 * chain.logits_magnitude)

    def test_a_prefix_that_leaves_nothing_to_decode_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, r"1 <= prefix < 8, got 8"):
            error_chain(CacheFormat("int8"), DecoderBlock(TINY), random_ids(1, 8, seed=0), 8)


if __name__ == "__main__":
    unittest.main()
