"""The benchmark's record: a quick run on SmolLM2-135M writes a schema-valid record the site accepts, and the
site refuses a hand-edited derived figure (by its JSON path, with both values) and a broken invariant."""

from __future__ import annotations

import copy
import re
import unittest
from typing import Any

import labkit.testing
from kv_window import benchmark
from kv_window.figures import MAIN, REFERENCE, check_invariants, derive, policy_label
from labkit import figures
from labkit.records import RecordError, path_text


def check_record(record: dict[str, Any]) -> None:
    """The site's check of this lab's record: its invariants, then every derived figure."""
    figures.check_record(record, "quick.json", check_invariants, derive)


def edited(record: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    copied = copy.deepcopy(record)
    parent = copied
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return copied


class QuickRun(labkit.testing.QuickBenchmarkRun):
    main = staticmethod(benchmark.main)
    schema = benchmark.ROOT / benchmark.LAB.schema

    def test_quick_run_measures_every_policy_on_the_shared_text(self) -> None:
        record = self.record
        self.assertEqual([entry["policy"]["name"] for entry in record["policies"].values()], [REFERENCE, *MAIN])
        self.assertEqual(record["text"]["name"], "python-language-reference.txt")
        self.assertEqual(len(record["rules"]), 3)
        self.assertTrue(record["config"]["quick"])
        check_record(record)

    def test_a_hand_edited_derived_figure_is_refused_by_its_path_with_both_values(self) -> None:
        record = self.record
        window = policy_label(record["policies"], "window")
        stored = record["policies"][window]["median_step_ns"]
        with self.assertRaisesRegex(RecordError, rf"\$\.policies\.{window}\.median_step_ns is {stored * 2:.12g}, "
                                                 rf"but .* gives {stored:.12g}"):
            check_record(edited(record, ("policies", window, "median_step_ns"), stored * 2))
        # (the figure as derive adds it, the key edited inside it, the edited value): the refusal names the figure
        for figure, inside, value in ((("policies", window, "after_eviction"), ("perplexity", "estimate"), 1.0),
                                      (("policies", window, "against_full"), ("verdict",), "level"),
                                      (("policies", window, "recompute_resolution"), ("resolves",),
                                       not record["policies"][window]["recompute_resolution"]["resolves"]),
                                      (("memory", "same_bytes_steps"), ("verdict",), "below"),
                                      (("memory", "full_over_window"), (), 1.0),
                                      (("packing", "tokens"), ("padded",), 1),
                                      (("drift", "trained", "at_most_shifts"), ("bfloat16",), -1.0),
                                      (("wall_time_met",), (), not record["wall_time_met"])):
            path = figure + inside
            with self.subTest(path=path), self.assertRaisesRegex(RecordError, re.escape(path_text(figure))
                                                                 + " is "):
                check_record(edited(record, path, value))

    def test_kept_bytes_other_than_the_formula_are_refused_as_a_broken_invariant(self) -> None:
        record = self.record
        window = policy_label(record["policies"], "window")
        tokens, stored = record["policies"][window]["kept_bytes"][-1]
        with self.assertRaisesRegex(RecordError, rf"kept_bytes\[\d+\] is \[{tokens}, {stored + 1}\], but {window} "
                                                 rf"after {tokens} tokens keeps {stored} bytes"):
            check_record(edited(record, ("policies", window, "kept_bytes", -1), [tokens, stored + 1]))

    def test_a_bounded_cache_that_differs_from_the_full_one_before_its_first_eviction_is_refused(self) -> None:
        record = self.record
        sinks = policy_label(record["policies"], "sinks")
        kl = list(record["policies"][sinks]["kl"])
        kl[0] = 0.5
        with self.assertRaisesRegex(RecordError, r"reaches 0\.5 before position \d+"):
            check_record(edited(record, ("policies", sinks, "kl"), kl))


if __name__ == "__main__":
    unittest.main()
