"""The side-channel experiment: its rounds on a tiny engine (what each probe finds cached, without salts and with
them), the figures and invariants a record is held to, and the sentence each outcome gets."""

from __future__ import annotations

import unittest
from typing import Any

from kv_prefix.side_channel import CONDITIONS, condition, slices
from kv_prefix.side_channel_figures import check_side_channel, condition_figures
from kv_prefix_views.side_channel import key_result, side_channel_view, verdict
from kv_serving.testing import TINY_BLOCK, TINY_MODEL, SchedulerTestCase
from labkit.records import RecordError
from labkit.waiting import within

LENGTH = 3 * TINY_BLOCK  # three full blocks per prefix


class Slices(unittest.TestCase):
    def test_every_round_gets_a_prefix_and_a_decoy_no_other_round_sent(self) -> None:
        pairs = slices(list(range(100)), 3, length=8)
        parts = [part for pair in pairs for part in pair]
        self.assertEqual([len(part) for part in parts], [9] * 6)  # the prefix and the prober's own token
        self.assertEqual(len({part[0] for part in parts}), 6)

    def test_a_text_too_short_is_refused_with_what_it_needs(self) -> None:
        with self.assertRaisesRegex(ValueError, "need 54 tokens of text .* holds 40"):
            slices(list(range(40)), 3, length=8)


class Rounds(SchedulerTestCase):
    async def test_without_salts_the_guess_finds_the_victims_blocks_and_with_them_nothing(self) -> None:
        text = [(7 * i + 3) % TINY_MODEL.vocab_size for i in range(4 * (LENGTH + 1))]
        pairs = slices(text, 2, length=LENGTH)
        found = {}
        for name, salts in CONDITIONS.items():
            scheduler = self.start(num_blocks=40, prefix_index="hash")
            found[name] = await within(condition(scheduler, pairs, salts), f"the {name} rounds")
        for rounds in found.values():
            self.assertEqual([r["order"] for r in rounds], [["guessed", "decoy"], ["decoy", "guessed"]])
            self.assertEqual([r["decoy_cached_tokens"] for r in rounds], [0, 0])
            self.assertTrue(all(r["guessed_ttft_s"] > 0 and r["decoy_ttft_s"] > 0 for r in rounds))
        self.assertEqual([r["guessed_cached_tokens"] for r in found["shared"]], [LENGTH, LENGTH])
        self.assertEqual([r["guessed_cached_tokens"] for r in found["salted"]], [0, 0])


def rounds(guessed: list[float], decoy: list[float], cached: int = 128) -> list[dict[str, Any]]:
    return [{"order": ["guessed", "decoy"], "guessed_ttft_s": g, "decoy_ttft_s": d, "guessed_cached_tokens": cached,
             "decoy_cached_tokens": 0} for g, d in zip(guessed, decoy)]


class Figures(unittest.TestCase):
    def test_a_guess_found_cached_reads_below_one_and_beats_every_decoy(self) -> None:
        f = condition_figures(rounds([0.17, 0.16, 0.18, 0.17, 0.19], [0.47, 0.5, 0.45, 0.48, 0.46]))
        self.assertEqual((f["side"], f["found"]), ("below", 5))
        self.assertLess(f["guessed_over_decoy"]["high"], 1)

    def test_alike_times_read_within_and_the_opposite_above(self) -> None:
        noisy = condition_figures(rounds([0.47, 0.44, 0.5, 0.46, 0.49], [0.46, 0.48, 0.45, 0.47, 0.5], cached=0))
        self.assertEqual(noisy["side"], "within")
        slower = condition_figures(rounds([0.6, 0.62, 0.59, 0.61, 0.63], [0.47, 0.5, 0.45, 0.48, 0.46], cached=0))
        self.assertEqual((slower["side"], slower["found"]), ("above", 0))

    def test_a_record_whose_salted_guess_found_blocks_is_refused(self) -> None:
        def record(salted_cached: int, shared_cached: int = 128, decoy: int = 0) -> dict[str, Any]:
            shared = rounds([0.2], [0.5], shared_cached)
            shared[0]["decoy_cached_tokens"] = decoy
            return {"side_channel": {"conditions": {
                "shared": {"victim_salt": None, "prober_salt": None, "rounds": shared},
                "salted": {"victim_salt": "a", "prober_salt": "b", "rounds": rounds([0.5], [0.5], salted_cached)}}}}

        check_side_channel(record(0), "test")
        for bad, field in ((record(16), "salted.rounds[0].guessed_cached_tokens"),
                           (record(0, shared_cached=0), "shared.rounds[0].guessed_cached_tokens"),
                           (record(0, decoy=16), "shared.rounds[0].decoy_cached_tokens")):
            with self.subTest(field=field), self.assertRaisesRegex(RecordError, field.replace("[", r"\[")):
                check_side_channel(bad, "test")


class Sentences(unittest.TestCase):
    def test_each_side_gets_its_own_words(self) -> None:
        below = condition_figures(rounds([0.17, 0.16, 0.18, 0.17, 0.19], [0.47, 0.5, 0.45, 0.48, 0.46]))
        within_ = condition_figures(rounds([0.47, 0.44, 0.5, 0.46, 0.49], [0.46, 0.48, 0.45, 0.47, 0.5], cached=0))
        above = condition_figures(rounds([0.6, 0.62, 0.59, 0.61, 0.63], [0.47, 0.5, 0.45, 0.48, 0.46], cached=0))
        self.assertIn("a prober can tell the prefix was sent", verdict(below, 5))
        self.assertIn("the rounds do not part the guess from the decoy", verdict(within_, 5))
        self.assertNotIn("can tell", verdict(within_, 5))
        self.assertIn("later than the decoy", verdict(above, 5))

    def test_the_view_sets_both_caches_side_by_side(self) -> None:
        entry = {"prefix_tokens": 128, "rounds": 5, "probes": ["guessed", "decoy"], "conditions": {
            "shared": {"victim_salt": None, "prober_salt": None,
                       "rounds": rounds([0.17, 0.16, 0.18, 0.17, 0.19], [0.47, 0.5, 0.45, 0.48, 0.46])},
            "salted": {"victim_salt": "a", "prober_salt": "b",
                       "rounds": rounds([0.47, 0.44, 0.5, 0.46, 0.49], [0.46, 0.48, 0.45, 0.47, 0.5], cached=0)}}}
        for condition_entry in entry["conditions"].values():
            condition_entry["figures"] = condition_figures(condition_entry["rounds"])
        block = side_channel_view({"side_channel": entry})
        self.assertEqual([row[0] for row in block.tables[0].rows], ["one cache for every client",
                                                                      "a cache_salt per tenant"])
        self.assertEqual([row[-1] for row in block.tables[0].rows], ["128", "0"])
        self.assertIn("a prober can tell", block.paragraphs[0])
        self.assertIn("a middle half that holds 1", block.paragraphs[0])
        said = key_result({"side_channel": entry})
        self.assertIn("without salts (a prober can tell it was sent)", said)
        self.assertIn("with a cache_salt per tenant (the rounds do not part it from a decoy)", said)


if __name__ == "__main__":
    unittest.main()
