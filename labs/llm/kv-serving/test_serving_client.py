"""What a client sees per token, beside the step that makes it: each context's per-round ratio of the client's median
gap to the in-process step's median, the side of 1 its middle half lies on, the page's sentence chosen by those
sides (longer, within noise, shorter, mixed), and a record whose rounds do not add up refused naming the field."""

from __future__ import annotations

import copy
import unittest
from typing import Any

from kv_serving.figures.derivation import client_figures
from kv_serving.figures.invariants import check_client_steps
from kv_serving_views import client as view
from labkit.figures import Figures
from labkit.records import RecordError
from site_hooks.blocks import render_block

MS = 1_000_000
ROUNDS, TOKENS = 5, 5


def row(context: int, step_ms: list[float], gap_ms: list[float], weights: str = "float32") -> dict[str, Any]:
    """One context's rounds: round r's in-process steps all take step_ms[r], its client gaps all gap_ms[r]."""
    return {"weights": weights, "context": context, "prompt_tokens": context - 1,
            "in_process_ns": [[int(ms * MS)] * (TOKENS - 1) for ms in step_ms],
            "client_gaps_ns": [[int(ms * MS)] * (TOKENS - 1) for ms in gap_ms],
            "client_ttft_ns": [int(400 * MS)] * len(step_ms)}


def derived(raw: dict[str, Any]) -> dict[str, Any]:
    figures = Figures()
    client_figures(raw, (), figures)
    return {**raw, **{figure.path[0]: figure.value for figure in figures}}


STEPS = [40.0, 42.0, 41.0, 39.0, 40.5]
SLOWER = [ms * 1.2 for ms in STEPS]  # every round 1.20x: the client waited longer
NOISY = [ms * r for ms, r in zip(STEPS, (0.95, 1.06, 0.98, 1.04, 1.01), strict=True)]  # middle half holds 1
FASTER = [ms * 0.9 for ms in STEPS]


class Derived(unittest.TestCase):
    def test_each_round_pairs_the_clients_median_gap_with_that_rounds_step(self) -> None:
        found = derived(row(128, STEPS, SLOWER))
        self.assertAlmostEqual(found["paired"]["median"], 1.2)
        self.assertEqual(found["side"], "above")
        self.assertEqual(derived(row(128, STEPS, NOISY))["side"], "within")
        self.assertEqual(derived(row(128, STEPS, FASTER))["side"], "below")
        self.assertEqual(found["in_process_median_ns"], 40.5 * MS)


class Sentence(unittest.TestCase):
    def sentence(self, *gaps: list[float]) -> str:
        return view.verdict([derived(row(context, STEPS, gap)) for context, gap in zip((128, 1024), gaps, strict=True)])

    def test_longer_is_said_only_where_every_context_parts_above_one(self) -> None:
        text = self.sentence(SLOWER, SLOWER)
        self.assertIn("waited longer between tokens than the step itself", text)
        self.assertIn("1.20× (1.20–1.20)", text)
        self.assertIn("adds 8.10–8.10 ms per token", text)  # 1.2 x 40.5 - 40.5

    def test_noise_is_said_as_noise_and_the_opposite_case_as_a_bound(self) -> None:
        self.assertIn("within its rounds' noise of the step itself", self.sentence(NOISY, NOISY))
        self.assertNotIn("longer", self.sentence(NOISY, NOISY))
        self.assertIn("came out shorter", self.sentence(FASTER, FASTER))

    def test_mixed_contexts_are_said_one_by_one(self) -> None:
        text = self.sentence(SLOWER, NOISY)
        self.assertIn("at 128 positions 1.20× (1.20–1.20), the client waited longer", text)
        self.assertIn("at 1,024 positions", text)
        self.assertIn("within its rounds' noise", text)


class View(unittest.TestCase):
    def test_the_table_shows_each_context_and_a_record_without_the_section_says_so(self) -> None:
        record = {"config": {"benchmark": {"dtype_choice": {"chosen": "bfloat16"}}},
                  "trained": {"model": {"dtype": "float32"}, "client_steps": {"rounds": ROUNDS, "tokens": TOKENS, "threads": 1,
                                               "rows": [derived(row(128, STEPS, SLOWER))]}}}
        text = render_block(view.client_view(record))
        self.assertIn("48.60", text)  # the client's median gap, ms
        self.assertIn("This run&#39;s medians, float32", text)  # the trained model's dtype, not the probe's
        self.assertIn("the client waited longer", text)
        self.assertIn("prefilled its whole prompt", text)  # a record whose servers cached no prefix
        record["trained"]["client_steps"]["prefix_caching"] = "hash"
        cached = render_block(view.client_view(record))
        self.assertIn("prefilled only the prompt&#39;s last partial block", cached)
        self.assertNotIn("prefilled its whole prompt", cached)
        del record["trained"]["client_steps"]
        self.assertIn("holds no client-side timing", render_block(view.client_verdict_view(record)))

    def test_each_weight_format_gets_its_own_sentence(self) -> None:
        rows = [derived(row(128, STEPS, SLOWER)), derived(row(128, STEPS, NOISY, "int8"))]
        record = {"trained": {"client_steps": {"rows": rows}}}
        text = render_block(view.client_verdict_view(record))
        self.assertIn("float32 weights: At every context (128 positions) a client waited longer", text)
        self.assertIn("int8 weights: At every context (128 positions) the client&#39;s interval between tokens "
                      "was within", text)
        self.assertNotIn("**", text)  # a paragraph is HTML: markdown's bold would show as asterisks


class Refused(unittest.TestCase):
    trained = {"solo_steps": [{"context": 128}, {"context": 1024}],
               "client_steps": {"rounds": ROUNDS, "tokens": TOKENS, "server": {"float32": "serial", "int8": "int8"},
                                "rows": [row(128, STEPS, SLOWER), row(1024, STEPS, SLOWER),
                                         row(128, STEPS, SLOWER, "int8"), row(1024, STEPS, SLOWER, "int8")]}}

    def test_a_consistent_section_passes(self) -> None:
        check_client_steps(copy.deepcopy(self.trained), "record")

    def test_rounds_steps_gaps_and_contexts_that_do_not_add_up_are_refused_naming_the_field(self) -> None:
        for edit, field in (
                (lambda t: t["client_steps"]["rows"][0]["client_ttft_ns"].pop(), r"rows\[0\]\.client_ttft_ns"),
                (lambda t: t["client_steps"]["rows"][1]["in_process_ns"][2].pop(), r"rows\[1\]\.in_process_ns\[2\]"),
                (lambda t: t["client_steps"]["rows"][0]["client_gaps_ns"][0].extend([MS] * 3),
                 r"rows\[0\]\.client_gaps_ns\[0\]"),
                (lambda t: t["client_steps"]["rows"].pop(), r"client_steps\.rows.*\[128\] with int8 weights"),
                (lambda t: t["client_steps"]["server"].pop("int8"), r"client_steps\.rows.*int8 weights, which no server"),
                (lambda t: t["client_steps"]["rows"][0].update(prompt_tokens=128), r"rows\[0\]\.prompt_tokens")):
            trained = copy.deepcopy(self.trained)
            edit(trained)
            with self.subTest(field=field), self.assertRaisesRegex(RecordError, field):
                check_client_steps(trained, "record")


if __name__ == "__main__":
    unittest.main()
