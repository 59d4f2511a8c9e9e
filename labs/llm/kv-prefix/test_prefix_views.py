"""The page's views: every view renders from the committed record, its pictures come from the engine's own indexes,
and each comparative sentence follows the data: fed the opposite case and a case inside the noise, it says so."""

from __future__ import annotations

import copy
import sys
import unittest
from pathlib import Path
from typing import Any

from kv_prefix.figures import check_invariants, derive, predicted_hits
from labkit.figures import fill
from labkit.records import RecordError
from labkit.summary import halves_below
from labkit.testing import committed_record

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the views package sits beside the tests, as the site build finds it

from kv_prefix_views import VIEWS, headline  # noqa: E402
from kv_prefix_views.common import ttft_sentence  # noqa: E402
from kv_prefix_views.pictures import PROMPTS, tables  # noqa: E402
from kv_serving.prefix.indexes import HashIndex, RadixIndex  # noqa: E402
from site_hooks.blocks import render_block  # noqa: E402


def rederived(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every figure derived again from its (edited) raw data, as the build reads it."""
    fill(record, derive(record))
    return record


def with_ttfts(record: dict[str, Any], workload: str, key: str, ttfts: list[float]) -> dict[str, Any]:
    """A copy in which run ``key``'s requests took these times to first token (repeated over its requests)."""
    record = copy.deepcopy(record)
    for index, request in enumerate(record["workloads"][workload]["runs"][key]["requests"]):
        request["ttft_s"] = ttfts[index % len(ttfts)]
    return rederived(record)


class Views(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.record = committed_record(__file__)

    def test_every_view_renders_from_the_committed_record(self) -> None:
        for name, view in VIEWS.items():
            with self.subTest(view=name):
                html = render_block(view(self.record))
                self.assertGreater(len(html), 100)
        self.assertEqual(len(headline(self.record)), 1)

    def test_cached_ttft_is_called_lower_only_where_the_middle_halves_part(self) -> None:
        off = [r["ttft_s"] for r in self.record["workloads"]["shared_system"]["runs"]["off-fcfs-holds"]["requests"]]
        cases = {"cut": [t / 10 for t in off], "raised": [t * 10 for t in off], "cannot tell": off}
        for word, ttfts in cases.items():
            with self.subTest(case=word):
                record = with_ttfts(self.record, "shared_system", "hash-fcfs-holds", ttfts)
                self.assertIn(word, ttft_sentence(record, "shared_system"))

    def test_halves_below_reads_the_middle_halves(self) -> None:
        self.assertIs(halves_below([1, 1, 1, 1], [2, 2, 2, 2]), True)
        self.assertIs(halves_below([2, 2, 2, 2], [1, 1, 1, 1]), False)
        self.assertIsNone(halves_below([1, 2, 3, 4], [2, 3, 4, 5]))  # quartiles 1.75-3.25 and 2.75-4.25 overlap

    def test_the_eviction_answer_says_what_eviction_cost(self) -> None:
        runs = self.record["workloads"]["shared_system"]["runs"]

        def evicting(found: list[int]) -> str:
            """The answer where the small pool's requests found these tokens cached (by request)."""
            record = copy.deepcopy(self.record)
            run = record["workloads"]["shared_system"]["runs"]["hash-fcfs-evicts"]
            for request, cached in zip(run["requests"], found):
                run["server"]["prefill_tokens"] += request["cached_tokens"] - cached
                request["cached_tokens"] = cached
            return render_block(VIEWS["answer-eviction"](rederived(record)))

        large = {(r["session"], r["turn"]): r["cached_tokens"] for r in runs["hash-fcfs-holds"]["requests"]}
        same = evicting([large[(r["session"], r["turn"])] for r in runs["hash-fcfs-evicts"]["requests"]])
        fewer = evicting([0] * len(runs["hash-fcfs-evicts"]["requests"]))
        self.assertIn("no evicted block was ever asked for again", same)
        self.assertIn("were gone", fewer)
        self.assertNotIn("no evicted block", fewer)

    def test_the_indexes_paragraph_names_every_run_where_they_part(self) -> None:
        record = copy.deepcopy(self.record)
        record["workloads"]["few_shot"]["runs"]["radix-fcfs-holds"]["requests"][-1]["cached_tokens"] = 0
        said = render_block(VIEWS["indexes"](rederived(record)))
        self.assertIn("even where the pool held every block", said)
        self.assertIn("few-shot prompts, examples reordered, first come, in the pool that holds the working set", said)

    def test_warm_against_cold_is_said_once_where_both_indexes_agree_and_per_index_where_not(self) -> None:
        record = copy.deepcopy(self.record)
        record["equivalence"]["radix"] = dict(record["equivalence"]["hash"])
        self.assertIn("under either index", render_block(VIEWS["equivalence"](record)))
        record["equivalence"]["radix"]["max_abs_difference"] = 1e-4
        said = render_block(VIEWS["equivalence"](record))
        self.assertIn("under the hash chain", said)
        self.assertIn("under the radix tree", said)

    def test_outputs_that_differ_from_the_uncached_run_are_named(self) -> None:
        record = copy.deepcopy(self.record)
        record["workloads"]["multi_turn"]["runs"]["radix-fcfs-holds"]["requests"][0]["output"][0] += 1
        said = render_block(VIEWS["key-results"](rederived(record)))
        self.assertIn("Some requests generated other tokens", said)
        self.assertIn("radix-fcfs-holds", said)


class Figures(unittest.TestCase):
    def test_the_prefix_rule_counts_whole_shared_blocks_with_earlier_requests(self) -> None:
        workload = {"sessions": [{"prompt": [1] * 10, "follow_ups": [], "note": {}},
                                 {"prompt": [1] * 9 + [2], "follow_ups": [], "note": {}},
                                 {"prompt": [3] * 10, "follow_ups": [], "note": {}}],
                    "end_of_turn": [0]}
        run = {"requests": [{"session": i, "turn": 0, "sent_s": float(i), "output": [5, 6]} for i in range(3)]}
        # block 4: the second shares 9 tokens with the first (two whole blocks), the third nothing
        self.assertEqual(predicted_hits(workload, run, 4), 8)

    def test_a_record_whose_counters_disagree_with_its_requests_is_refused(self) -> None:
        record = copy.deepcopy(committed_record(__file__))
        record["workloads"]["shared_system"]["runs"]["hash-fcfs-holds"]["server"]["prefill_tokens"] += 1
        with self.assertRaisesRegex(RecordError, "prefill_tokens"):
            check_invariants(record, "test record")


class Pictures(unittest.TestCase):
    def test_the_pictures_prompts_are_admitted_as_the_engine_admits_them(self) -> None:
        for index in (HashIndex(4), RadixIndex(4)):
            with self.subTest(index=index.name):
                admitted = tables(index)
                self.assertEqual(list(admitted), list(PROMPTS))
                self.assertEqual([found for _, found in admitted.values()], [0, 2, 0])  # B finds A's first two
                self.assertEqual(admitted["B"][0][:2], admitted["A"][0][:2])
                self.assertFalse(set(admitted["C"][0]) & set(admitted["A"][0]))


if __name__ == "__main__":
    unittest.main()
