"""The page's views: every view renders from the committed record, its pictures come from the engine's own indexes,
and each comparative sentence follows the data: fed the opposite case and a case inside the noise, it says so."""

from __future__ import annotations

import copy
import re
import sys
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kv_prefix.figures import check_invariants, derive, per_request, predicted_hits
from labkit.figures import fill
from labkit.records import RecordError
from labkit.summary import halves_below
from labkit.testing import committed_record

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the views package sits beside the tests, as the site build finds it

from kv_prefix_views import VIEWS, headline  # noqa: E402
from kv_prefix_views.common import NAMES, times, ttft_sentence  # noqa: E402
from kv_prefix_views.pictures import PROMPTS, tables  # noqa: E402
from llm_models.serving.prefix.indexes import HashIndex, RadixIndex  # noqa: E402
from site_hooks.blocks import render_block  # noqa: E402


def rederived(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every figure derived again from its (edited) raw data, as the build reads it."""
    fill(record, derive(record))
    return record


CACHED_HOLDS = [f"{caching}-{order}-holds" for caching in ("hash", "radix") for order in ("fcfs", "longest-prefix")]


def same_work(record: dict[str, Any], workload: str) -> dict[str, Any]:
    """A copy in which every cached run in the pool that holds the working set found, request by request, what the
    hash chain found first come: four runs that did the same work."""
    record = copy.deepcopy(record)
    runs = record["workloads"][workload]["runs"]
    found = {(r["session"], r["turn"]): r["cached_tokens"] for r in runs["hash-fcfs-holds"]["requests"]}
    for key in CACHED_HOLDS:
        for request in runs[key]["requests"]:
            request["cached_tokens"] = found[(request["session"], request["turn"])]
    return record


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

    def test_the_ttft_verdict_reads_every_cached_run_that_did_the_same_work(self) -> None:
        off = [r["ttft_s"] for r in self.record["workloads"]["few_shot"]["runs"]["off-fcfs-holds"]["requests"]]

        def said(factors: list[float]) -> str:
            """The sentence where the four cached runs' requests took the uncached run's TTFTs times these."""
            record = same_work(self.record, "few_shot")
            for key, factor in zip(CACHED_HOLDS, factors):
                for request, ttft in zip(record["workloads"]["few_shot"]["runs"][key]["requests"], off):
                    request["ttft_s"] = ttft * factor
            return ttft_sentence(rederived(record), "few_shot")

        cut, raised, same = said([0.1] * 4), said([10] * 4), said([1] * 4)
        self.assertIn("caching cut the time to first token: in all 4 cached runs that did the same work", cut)
        self.assertIn("lay wholly below the uncached run's", cut)
        self.assertIn("caching raised the time to first token", raised)
        self.assertIn("lay wholly above", raised)
        self.assertIn("cannot tell", same)
        self.assertNotIn("cut", same)
        self.assertIn("request by request, the hash chain's first-come run took 1.00× (middle half 1.00–1.00) of "
                      "each request's uncached time, a middle half that holds 1", same)
        nearly = said([0.9] * 4)  # every request a tenth faster: hidden in the spread across requests, not by request
        self.assertIn("cannot tell", nearly)
        self.assertIn("took 0.90× (middle half 0.90–0.90) of each request's uncached time, wholly below 1", nearly)
        mixed = said([0.1, 0.1, 0.1, 1])
        self.assertIn("in 3 of the 4 cached runs that did the same work", mixed)
        self.assertIn("in 1 they overlapped", mixed)
        self.assertNotIn("caching cut", mixed)
        three_ways = said([0.1, 0.1, 1, 10])
        self.assertIn("in 2 of the 4", three_ways)
        self.assertIn("in 1 they overlapped and in 1 they lay wholly above", three_ways)

    def test_a_cached_run_that_did_other_work_is_not_counted(self) -> None:
        record = same_work(self.record, "few_shot")
        alike = rederived(copy.deepcopy(record))["workloads"]["few_shot"]["figures"]["same_work_holds"]
        self.assertEqual(alike["runs"], 4)
        request = record["workloads"]["few_shot"]["runs"]["radix-longest-prefix-holds"]["requests"][-1]
        request["cached_tokens"] = 0 if request["cached_tokens"] else 16
        self.assertEqual(rederived(record)["workloads"]["few_shot"]["figures"]["same_work_holds"]["runs"], 3)
        said = ttft_sentence(record, "few_shot")
        self.assertRegex(said, r"(in all|of the) 3 cached runs")
        self.assertNotIn("4 cached runs", said)

    def test_times_side_by_side_share_one_unit_and_precision(self) -> None:
        self.assertEqual(times([1.0, 7.0]), ["1.00 s", "7.00 s"])
        self.assertEqual(times([0.929, 8.33]), ["0.93 s", "8.33 s"])
        self.assertEqual(times([0.25]), ["250 ms"])
        self.assertEqual(times([0.0379, 0.0012]), ["37.9 ms", "1.2 ms"])
        for name in ("shared-system", "multi-turn", "few-shot-runs", "order", "order-price"):
            with self.subTest(view=name):
                cells = [cell for row in VIEWS[name](self.record).tables[0].rows for cell in row[2:]]
                shown = re.findall(r"(\d+(?:\.(\d+))?) (s|ms|µs)\b", " ".join(str(cell) for cell in cells))
                self.assertGreater(len(shown), 3)
                self.assertEqual(len({(len(decimals), unit) for _, decimals, unit in shown}), 1, shown)

    def test_the_queue_sentence_weighs_the_uncached_prefill_against_the_arrivals(self) -> None:
        span = self.record["workloads"]["shared_system"]["figures"]["queue"]["arrival_span_s"]

        def said(prefill_s: float) -> str:
            record = copy.deepcopy(self.record)
            record["workloads"]["shared_system"]["runs"]["off-fcfs-holds"]["server"]["prefill_seconds"] = prefill_s
            for entry in record["workloads"]["shared_system"]["runs"].values():  # a record without admission times
                for request in entry["requests"]:
                    request.pop("waited_s", None)
            del record["workloads"]["shared_system"]["figures"]  # and without the figures they gave
            return render_block(VIEWS["queue"](rederived(record)))

        long, some, short = said(span * 10), said(span * 1.5), said(span / 2)
        self.assertIn("still to do", long)
        self.assertIn("much of the cut", long)
        self.assertIn("part of the cut", some)
        self.assertIn("fitted within the span", short)
        self.assertNotIn("still to do", short)
        for text in (long, some, short):
            self.assertIn("cannot say how the cut splits", text)

    def test_with_admission_times_the_wait_and_the_own_prefill_are_said_apart(self) -> None:
        record = copy.deepcopy(self.record)
        for key, (waited, ttft) in (("off-fcfs-holds", (6.0, 7.0)), ("hash-fcfs-holds", (0.75, 1.0))):
            for request in record["workloads"]["shared_system"]["runs"][key]["requests"]:
                request["waited_s"], request["ttft_s"] = waited, ttft
        text = render_block(VIEWS["queue"](rederived(record)))
        self.assertIn("uncached, a request waited 6.00 s in the queue, then 1.00 s to its first token; with the "
                      "cache, 0.75 s, then 0.25 s", text)
        self.assertIn("Most of the cut in the median came before admission, in the queue", text)
        self.assertNotIn("cannot say", text)
        self.assertNotIn("much of the cut", text)  # the split, not the arrival arithmetic, says where the cut came
        for key, (waited, ttft) in (("off-fcfs-holds", (1.0, 7.0)), ("hash-fcfs-holds", (0.75, 1.0))):
            for request in record["workloads"]["shared_system"]["runs"][key]["requests"]:
                request["waited_s"], request["ttft_s"] = waited, ttft
        text = render_block(VIEWS["queue"](rederived(record)))
        self.assertIn("Most of the cut in the median came after admission", text)

    def test_the_indexes_are_said_to_part_under_eviction_only_where_the_record_says_so(self) -> None:
        def evicting(edit: Callable[[dict[str, Any]], None]) -> str:
            record = copy.deepcopy(self.record)
            edit(record)
            return render_block(VIEWS["indexes"](rederived(record)))

        def alike(record: dict[str, Any]) -> None:
            """Every radix run under eviction made to evict and find what the hash chain's did."""
            for workload in record["workloads"].values():
                for order in ("fcfs", "longest-prefix"):
                    hashed, tree = (workload["runs"][f"{c}-{order}-evicts"] for c in ("hash", "radix"))
                    tree["prefix"]["evictions"] = hashed["prefix"]["evictions"]
                    found = {(r["session"], r["turn"]): r["cached_tokens"] for r in hashed["requests"]}
                    for request in tree["requests"]:
                        request["cached_tokens"] = found[(request["session"], request["turn"])]

        def one_apart(record: dict[str, Any]) -> None:
            alike(record)
            record["workloads"]["multi_turn"]["runs"]["radix-fcfs-evicts"]["prefix"]["evictions"] += 5

        same, apart = evicting(alike), evicting(one_apart)
        self.assertIn("coincided here", same)
        self.assertNotIn("parted in 1", same)
        self.assertIn("parted in 1 setting of the 6 settings", apart)
        self.assertIn("multi-turn chats, first come", apart)
        self.assertNotIn("coincided", apart)

    def test_the_order_price_is_worded_from_the_requests_it_ranks_last(self) -> None:
        def row(factor: float) -> tuple[Any, ...]:
            """The few-shot hash-chain row where the head-only requests took their first-come TTFT times this
            under longest prefix first."""
            record = copy.deepcopy(self.record)
            runs = record["workloads"]["few_shot"]["runs"]
            head = self.record["workloads"]["few_shot"]["figures"]["shared_head_whole_block_tokens"]
            ranked_last = {(r["session"], r["turn"]) for r in runs["hash-longest-prefix-evicts"]["requests"]
                           if r["cached_tokens"] <= head}
            for request in runs["hash-fcfs-evicts"]["requests"]:  # one first-come time for all of them: no spread
                if (request["session"], request["turn"]) in ranked_last:
                    request["ttft_s"] = 1.0
            for request in runs["hash-longest-prefix-evicts"]["requests"]:
                if request["cached_tokens"] <= head:
                    request["ttft_s"] = factor
            rows = VIEWS["order-price"](rederived(record)).tables[0].rows
            return next(r for r in rows if r[0] == NAMES["few_shot"] and r[1] == "hash chain")

        self.assertIn("(higher in this run)", row(10)[3])
        self.assertIn(" → ", row(10)[4])  # the most delayed of them, no verdict
        self.assertIn("(lower in this run)", row(0.1)[3])
        self.assertEqual(row(0.1)[4], "none waited longer")
        self.assertIn("(within the spread)", row(1)[3])

        def unranked(factor: float) -> tuple[tuple[Any, ...], str]:
            """The multi-turn radix-tree row, and the notes, where no request found anything cached under longest
            prefix first and each took its first-come TTFT times this."""
            record = copy.deepcopy(self.record)
            runs = record["workloads"]["multi_turn"]["runs"]
            for request in runs["radix-fcfs-evicts"]["requests"]:  # one first-come time for all: no spread
                request["ttft_s"] = 1.0
            for request in runs["radix-longest-prefix-evicts"]["requests"]:
                request["cached_tokens"] = 0
                request["ttft_s"] = factor
            block = VIEWS["order-price"](rederived(record))
            found = next(r for r in block.tables[0].rows if r[0] == NAMES["multi_turn"] and r[1] == "radix tree")
            return found, " ".join(block.notes)

        (apart, apart_notes), (alike, alike_notes) = unranked(10), unranked(1)
        self.assertIn("nothing to rank", apart[6])
        self.assertIn("(higher in this run)", apart[3])
        self.assertIn("multi-turn chats, radix tree", apart_notes)  # a difference with nothing ranked: the runs' own
        self.assertIn("(within the spread)", alike[3])
        self.assertNotIn("multi-turn chats, radix tree", alike_notes)

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

    def test_a_cached_runs_ttft_is_set_over_the_same_requests_in_the_uncached_run_whatever_their_order(self) -> None:
        def request(session: int, turn: int, ttft: float) -> dict[str, Any]:
            return {"session": session, "turn": turn, "ttft_s": ttft}
        off = {"requests": [request(0, 0, 1.0), request(1, 0, 2.0), request(0, 1, 4.0), request(1, 1, 8.0)]}
        # the cached run finished its requests in another order: each is paired with its own, not its neighbour
        run = {"requests": [request(1, 1, 4.0), request(0, 0, 0.5), request(0, 1, 2.0), request(1, 0, 1.0)]}
        self.assertEqual(per_request(run, off), {"median": 0.5, "low": 0.5, "high": 0.5, "rounds": 4})
        slower = {"requests": [request(0, 0, 2.0), request(1, 0, 2.0), request(0, 1, 4.0), request(1, 1, 16.0)]}
        ratio = per_request(slower, off)
        self.assertEqual((ratio["median"], ratio["rounds"]), (1.5, 4))
        self.assertLessEqual(ratio["low"], 1.0)
        self.assertGreaterEqual(ratio["high"], 2.0)

    def test_the_runs_table_gives_each_cached_run_its_per_request_ratio_and_the_uncached_none(self) -> None:
        record = copy.deepcopy(committed_record(__file__))
        runs = record["workloads"]["shared_system"]["runs"]
        for r in runs["hash-fcfs-holds"]["requests"]:  # every request's time halved against the uncached run's
            r["ttft_s"] = next(o["ttft_s"] for o in runs["off-fcfs-holds"]["requests"]
                               if (o["session"], o["turn"]) == (r["session"], r["turn"])) / 2
        table = VIEWS["shared-system"](rederived(record)).tables[0]
        column = table.headings.index("÷ off")
        rows = {(row[0], row[1]): row[column] for row in table.rows}
        self.assertEqual(rows[("hash, fcfs", "holds")], "0.50 (0.50–0.50)")
        self.assertEqual(rows[("off", "holds")], "—")

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
