"""Paired rounds (labkit.summary.paired, side_of_one): a ratio within each round cancels the drift a whole run has,
and its middle half is the noise a 'faster' must clear."""

from __future__ import annotations

import unittest

from labkit.summary import paired, paired_ratios, side_of_one


class PairedRounds(unittest.TestCase):
    def test_a_drift_that_moves_both_sides_of_a_round_leaves_the_ratio_alone(self) -> None:
        drift = [1.0, 1.5, 2.0, 1.2, 1.8]  # the machine slowed everything by up to 2x from round to round
        a = [80 * d for d in drift]
        b = [100 * d for d in drift]
        ratio = paired(a, b)
        self.assertAlmostEqual(ratio["median"], 0.8)
        self.assertAlmostEqual(ratio["low"], 0.8)
        self.assertAlmostEqual(ratio["high"], 0.8)
        self.assertEqual(ratio["rounds"], 5)
        self.assertEqual(side_of_one(ratio), "below")
        # the same durations read as two cells overlap completely: 80 x 2.0 is slower than 100 x 1.0
        self.assertGreater(max(a), min(b))

    def test_the_opposite_case_is_above(self) -> None:
        self.assertEqual(side_of_one(paired([120, 130, 125, 122, 128], [100, 101, 99, 100, 102])), "above")

    def test_a_noisy_ratio_whose_middle_half_holds_one_is_within(self) -> None:
        ratio = paired([90, 110, 95, 105, 100], [100, 100, 100, 100, 100])
        self.assertLess(ratio["low"], 1)
        self.assertGreater(ratio["high"], 1)
        self.assertEqual(side_of_one(ratio), "within")

    def test_too_few_rounds_never_name_a_side(self) -> None:
        self.assertEqual(side_of_one(paired([50, 50], [100, 100])), "within")

    def test_the_quartiles_are_the_percentile_rules(self) -> None:
        ratio = paired([1, 2, 3, 4, 5], [1, 1, 1, 1, 1])
        self.assertEqual((ratio["low"], ratio["median"], ratio["high"]), (2.0, 3.0, 4.0))

    def test_rounds_must_pair_up(self) -> None:
        with self.assertRaisesRegex(ValueError, "one value per round on both sides, got 2 and 3"):
            paired_ratios([1, 2], [1, 2, 3])
        with self.assertRaisesRegex(ValueError, "no rounds"):
            paired_ratios([], [])


if __name__ == "__main__":
    unittest.main()
