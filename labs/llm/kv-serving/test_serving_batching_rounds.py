"""Batched against one at a time on the trained server, in paired rounds: each round's throughput ratio, the side of 1
its middle half lies on, the sentence chosen by that side (faster, within noise, slower), and a section whose rounds
do not add up refused naming the field."""

from __future__ import annotations

import argparse
import copy
import unittest
import unittest.mock
from typing import Any

from kv_serving import trained_load
from kv_serving.figures.derivation import batching_figures
from kv_serving.figures.invariants import check_batching_rounds
from kv_serving.loadgen import RequestResult, RunResult
from kv_serving_views.results import trained_item
from kv_serving_views.trained import rounds_sentence, speedup_sentence
from labkit.figures import Figures
from labkit.records import RecordError

ROUNDS, REQUESTS, TOKENS = 5, 4, 8
SERIAL_S = [8.0, 8.4, 7.9, 8.2, 8.1]


def section(batched_s: list[float], tokens: int = REQUESTS * TOKENS) -> dict[str, Any]:
    """Every round's burst wrote ``tokens`` on both sides; the serial side took SERIAL_S, the batched ``batched_s``."""
    return {"rounds": ROUNDS, "requests": REQUESTS, "max_tokens": TOKENS, "order_policy": "alternating",
            "batched": {"seconds": list(batched_s), "tokens": [tokens] * ROUNDS},
            "serial": {"seconds": list(SERIAL_S), "tokens": [tokens] * ROUNDS}}


def derived(rounds: dict[str, Any]) -> dict[str, Any]:
    """The section with its paired figures, derived by the lab's own derivation (trained_figures' rounds part)."""
    figures = Figures()
    trained = {"batching_rounds": rounds}
    batching_figures(trained, figures)
    out = copy.deepcopy(rounds)
    for figure in figures:
        out[figure.path[-1]] = figure.value
    return out


FASTER = [s / 3.0 for s in SERIAL_S]  # batched 3x every round
NOISY = [s * r for s, r in zip(SERIAL_S, (0.95, 1.06, 0.98, 1.04, 1.01), strict=True)]  # the middle half holds 1
SLOWER = [s * 1.25 for s in SERIAL_S]


class Derived(unittest.TestCase):
    def test_each_round_divides_its_own_throughputs(self) -> None:
        rounds = derived(section(FASTER))
        self.assertAlmostEqual(rounds["paired"]["median"], 3.0, places=9)
        self.assertEqual((rounds["paired"]["rounds"], rounds["side"]), (ROUNDS, "above"))
        self.assertEqual(derived(section(NOISY))["side"], "within")
        self.assertEqual(derived(section(SLOWER))["side"], "below")

    def test_fewer_tokens_in_the_same_time_is_less_throughput(self) -> None:
        rounds = section(list(SERIAL_S))
        rounds["batched"]["tokens"] = [REQUESTS * TOKENS // 2] * ROUNDS
        self.assertAlmostEqual(derived(rounds)["paired"]["median"], 0.5, places=9)


class Sentence(unittest.TestCase):
    def test_faster_is_said_only_where_the_middle_half_lies_above_one(self) -> None:
        text = rounds_sentence(derived(section(FASTER)))
        self.assertIn("In 5 paired rounds, each sending the same 4 prompts at once (up to 8 tokens each)", text)
        self.assertIn("batching wrote 3.00× (middle half 3.00–3.00) the output tokens per second", text)
        self.assertNotIn("noise", text)

    def test_noise_and_the_opposite_case_are_named(self) -> None:
        self.assertIn("within its rounds' noise of no gain", rounds_sentence(derived(section(NOISY))))
        slower = rounds_sentence(derived(section(SLOWER)))
        self.assertIn("batching wrote fewer output tokens per second than one at a time", slower)
        self.assertIn("bought nothing", slower)

    def test_the_page_leads_with_the_rounds_and_keeps_the_single_runs(self) -> None:
        trained = {"speedup_over_serial": 3.9, "serial": {"rate": 64.0}, "batching_rounds": derived(section(FASTER))}
        text = speedup_sentence(trained)
        self.assertTrue(text.startswith("In 5 paired rounds"))
        self.assertIn("In single runs, at 64 arrivals per second, the sweep's batched run wrote 3.90×", text)
        self.assertIn("In 5 paired rounds", trained_item({"trained": trained}))
        del trained["batching_rounds"]
        self.assertTrue(speedup_sentence(trained).startswith("At 64 arrivals per second"))
        self.assertNotIn("paired", trained_item({"trained": trained}))


class Rounds(unittest.TestCase):
    """The rounds themselves, against a stand-in for the load generator (no server): the side that goes first
    alternates, every round sends the same burst, and no request asks for more tokens than the sweep's."""

    def test_the_order_alternates_and_the_burst_never_outgrows_the_sweeps_requests(self) -> None:
        sent: list[tuple[str, list[Any]]] = []

        async def fake_load(url: str, items: list[Any], model: str, **_: Any) -> RunResult:
            sent.append((url, items))
            done = [RequestResult(i.index, len(i.prompt), i.max_tokens, "completed", 200, i.max_tokens) for i in items]
            return RunResult(done, 1.0 if url == "batched" else 2.0, [])

        args = argparse.Namespace(quick=False, trained_max_tokens=5)
        ids = [[1, 2, 3]] * 10
        with unittest.mock.patch.object(trained_load, "run_load", fake_load):
            rounds = trained_load.batching_rounds(args, "batched", "serial", ids)
        alternating = ["batched", "serial", "serial", "batched"] * (trained_load.BATCHING_ROUNDS // 2)
        self.assertEqual([url for url, _ in sent], alternating)
        self.assertEqual({len(items) for _, items in sent}, {trained_load.BATCHING_REQUESTS})
        self.assertEqual({i.max_tokens for _, items in sent for i in items}, {5})  # 16 asked, the sweep's 5 kept
        self.assertEqual((rounds["max_tokens"], rounds["batched"]["seconds"]), (5, [1.0] * trained_load.BATCHING_ROUNDS))


class Refused(unittest.TestCase):
    def test_a_consistent_section_passes(self) -> None:
        check_batching_rounds({"batching_rounds": section(FASTER)}, "record")

    def test_rounds_and_tokens_that_do_not_add_up_are_refused_naming_the_field(self) -> None:
        for edit, field in (
                (lambda r: r["batched"]["seconds"].pop(), r"batching_rounds\.batched\.seconds"),
                (lambda r: r["serial"]["tokens"].append(1), r"batching_rounds\.serial\.tokens"),
                (lambda r: r["batched"]["tokens"].__setitem__(2, REQUESTS * TOKENS + 1),
                 r"batching_rounds\.batched\.tokens\[2\]")):
            rounds = section(FASTER)
            edit(rounds)
            with self.subTest(field=field), self.assertRaisesRegex(RecordError, field):
                check_batching_rounds({"batching_rounds": rounds}, "record")


if __name__ == "__main__":
    unittest.main()
