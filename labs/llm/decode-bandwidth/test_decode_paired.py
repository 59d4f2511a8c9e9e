"""The trained model's comparisons as paired rounds, and the words the page chooses from them."""

from __future__ import annotations

import unittest

from decode_bandwidth_views.common import against


class AgainstWords(unittest.TestCase):
    CONTEXTS = [128, 512, 1024]

    def test_each_state_carries_its_own_contexts_ratios(self) -> None:
        words = against([0.80, 0.77, 0.85], ["below", "below", "within"], self.CONTEXTS, "transformers")
        self.assertEqual(words, "faster than transformers at contexts 128 and 512 (0.77–0.80×), within this run's "
                                "noise of it at context 1,024 (0.85×)")

    def test_the_opposite_case_says_slower(self) -> None:
        self.assertEqual(against([1.2, 1.3, 1.25], ["above"] * 3, self.CONTEXTS, "transformers"),
                         "slower than transformers (1.20–1.30×)")

    def test_a_noisy_case_names_no_direction_however_far_the_median(self) -> None:
        words = against([0.5, 0.6, 0.7], ["within"] * 3, self.CONTEXTS, "transformers")
        self.assertEqual(words, "within this run's noise of transformers (0.50–0.70×)")
        self.assertNotIn("faster", words)


if __name__ == "__main__":
    unittest.main()
