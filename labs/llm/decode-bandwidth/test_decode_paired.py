"""The trained model's comparisons as paired rounds, and the words the page chooses from them."""

from __future__ import annotations

import unittest
from typing import Any

from decode_bandwidth.llama_modes import LLAMA_SLOWED, kept_attempt, most_slowed
from decode_bandwidth_views.common import against
from decode_bandwidth_views.trained import remeasure_sentence


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


class MeasuredAgain(unittest.TestCase):
    """A group whose floor reads ran slowed is the one measured again; the page names it, or says none was."""

    THREADS = {(1, 128): 1, (1, 512): 1, (2, 128): 2}

    def test_a_quiet_section_measures_nothing_again(self) -> None:
        quiet = {(1, 128): [[10.0, 9.8, 9.7]], (1, 512): [[9.9, 9.6, 9.5]], (2, 128): [[20.0, 19.0, 19.5]]}
        self.assertIsNone(most_slowed(quiet, self.THREADS))

    def test_the_most_slowed_group_is_measured_again_against_its_own_thread_count(self) -> None:
        rates = {(1, 128): [[10.0, 9.9, 9.8]], (1, 512): [[8.7, 8.6, 8.8]], (2, 128): [[20.0, 16.0, 16.5]]}
        self.assertEqual(most_slowed(rates, self.THREADS), (2, 128))  # 17.5% under 20, against (1, 512)'s 13%
        rates[(2, 128)].append([19.5, 19.8, 19.9])  # its second attempt ran near the fastest: the next is (1, 512)
        self.assertEqual(kept_attempt(rates[(2, 128)]), 1)
        self.assertEqual(most_slowed(rates, self.THREADS), (1, 512))

    def test_a_slowdown_at_the_threshold_is_not_measured_again(self) -> None:
        at = 10.0 * (1 - LLAMA_SLOWED)
        self.assertIsNone(most_slowed({(1, 128): [[10.0, at, at]]}, {(1, 128): 1}))

    @staticmethod
    def record(*slowdowns: list[float]) -> dict[str, Any]:
        """Groups at 1 thread, contexts 128, 512, ..., each given its attempts' slowdowns, the kept one last."""
        groups = [{"threads": 1, "context": 128 * 4 ** index, "floor_slowdown": tries[-1],
                   "set_aside": [{"floor_slowdown": share} for share in tries[:-1]]}
                  for index, tries in enumerate(slowdowns)]
        return {"llama": {"groups": groups, "remeasure": {"slowed": 0.1, "limit": 3}}}

    def test_the_page_says_none_was_and_how_far_the_furthest_lay(self) -> None:
        text = remeasure_sentence(self.record([0.03], [0.06]))
        self.assertIn("None did here: the furthest under was 1 thread at context 512, at 6%.", text)

    def test_the_page_names_each_group_measured_again_and_what_it_kept(self) -> None:
        text = remeasure_sentence(self.record([0.03], [0.69, 0.04]))
        self.assertIn("That happened for 1 thread at context 512 (69% under; kept: 4%)", text)
        self.assertNotIn("None did", text)
        self.assertNotIn("noise", text)

    def test_a_group_still_slowed_after_every_attempt_is_called_noise(self) -> None:
        text = remeasure_sentence(self.record([0.5, 0.3, 0.2, 0.15], [0.04]))
        self.assertIn("1 thread at context 128 (50%, then 30%, then 20% under; kept: 15%)", text)
        self.assertIn("1 of them stayed above 10% after every attempt", text)


class HugePages(unittest.TestCase):
    @staticmethod
    def record(settled: dict | None) -> dict:
        return {"hardware": {} if settled is None else {"huge_pages": {"trained": settled}}}

    @staticmethod
    def settled(before: float, after: float, unavailable: str | None = None, refused: int = 0) -> dict:
        anonymous = 2**31
        return {"before": {"anonymous_bytes": anonymous, "huge_bytes": int(before * anonymous)},
                "after": {"anonymous_bytes": anonymous, "huge_bytes": int(after * anonymous)},
                "share_before": before, "share_after": after, "collapsed": 3, "refused": refused, "seconds": 0.5,
                "unavailable": unavailable, "asked": 3 + refused, "refused_bytes": refused * 2 * 2**20}

    def test_the_page_counts_the_huge_pages_the_kernel_refused(self) -> None:
        from decode_bandwidth_views.floor import pages_sentence

        text = pages_sentence(self.record(self.settled(0.4, 0.9, refused=5)))
        self.assertIn("no free 2 MiB run for 5 of the 8 huge pages", text)
        self.assertIn("(10.5 MB)", text)
        self.assertNotIn("no free 2 MiB run", pages_sentence(self.record(self.settled(0.4, 0.98))))

    def test_the_page_says_how_much_sat_on_huge_pages_when_the_steps_were_timed(self) -> None:
        from decode_bandwidth_views.floor import pages_sentence

        text = pages_sentence(self.record(self.settled(0.4, 0.98)))
        self.assertIn("40% of it sat there before and 98% after", text)
        self.assertNotIn("could not move", text)
        text = pages_sentence(self.record(self.settled(0.0, 0.0, "madvise(MADV_COLLAPSE) refused every run of huge pages")))
        self.assertIn("0% of it sat there before and 0% after", text)
        self.assertIn("could not move more: madvise(MADV_COLLAPSE) refused", text)
        self.assertIn("was not measured", pages_sentence(self.record(None)))
        self.assertIn("was not measured", pages_sentence(self.record({**self.settled(0, 0), "after": None})))

    def test_the_share_is_derived_per_timed_part(self) -> None:
        from decode_bandwidth.figures.derivation import huge_page_figures
        from labkit.figures import Figures

        figures = Figures()
        settled = {key: value for key, value in self.settled(0.25, 1.0).items() if not key.startswith("share")}
        huge_page_figures({"hardware": {"huge_pages": {"trained": settled, "grid": {**settled, "after": None}}}},
                          figures)
        found = {figure.path: figure.value for figure in figures}
        self.assertEqual(found[("hardware", "huge_pages", "trained", "share_before")], 0.25)
        self.assertEqual(found[("hardware", "huge_pages", "trained", "share_after")], 1.0)
        self.assertIsNone(found[("hardware", "huge_pages", "grid", "share_after")])
        empty = Figures()
        huge_page_figures({"hardware": {}}, empty)
        self.assertEqual(len(empty), 0)  # a record from before the settling: nothing derived, the page says so


if __name__ == "__main__":
    unittest.main()
