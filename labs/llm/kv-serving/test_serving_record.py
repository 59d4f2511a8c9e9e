"""The committed serving record against the site's one check: it passes, and each kind of derived figure,
hand-edited in the record's text, is refused in one line naming its JSON path and both values."""

from __future__ import annotations

import copy
import statistics
import unittest
from typing import Any

from kv_serving import figures
from kv_serving_views.model import dtype_sentence
from labkit.figures import check, fill, shown, stored_value
from labkit.manifest import lab_for
from labkit.records import JsonPath, RecordError, load_record, path_text
from labkit.testing import committed_record
from site_hooks.labviews import lab_check

LAB, ROOT = lab_for(figures.__file__)
SOURCE = LAB.record.as_posix()


# One derived figure of each kind: (JSON path, a hand-edited value the derivation contradicts).
EDITS: list[tuple[JsonPath, Any]] = [
    (("config", "benchmark", "block_bytes"), 1),
    (("step_times", 0, "median_ns"), 1),
    (("step_times", 0, "tokens_per_s"), 1.5),
    (("admission", "policies", 0, "summary", "completed"), 10**6),
    (("admission", "policies", 0, "summary", "duration_s"), 1.0),
    (("admission", "policies", 0, "summary", "throughput_tokens_per_s"), 9.0),
    (("admission", "policies", 0, "summary", "ttft_s", "p50"), 1e6),
    (("admission", "policies", 0, "server", "mean_batch"), 1e6),
    (("admission", "mean_request_blocks"), 1e6),
    (("rates", "best_rate"), 1e6),
]


def at(record: Any, path: JsonPath) -> Any:
    for key in path:
        record = record[key]
    return record


class CommittedRecordTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.raw = load_record(ROOT / LAB.record, ROOT / LAB.schema)
        cls.record = committed_record(__file__)  # with its figures, as a record that stored them would be
        cls.derived = {figure.path: figure for figure in figures.derive(cls.raw)}

    def test_the_committed_record_stores_no_figure_and_passes_its_invariants_and_every_derivation(self) -> None:
        stored = [path for path in self.derived if stored_value(self.raw, path)[0]]
        self.assertEqual(stored, [])  # what was measured, nothing that follows from it
        figures.check_invariants(self.record, SOURCE)
        check(self.record, figures.derive(self.record), SOURCE)
        runs = len(self.record["admission"]["policies"]) + len(self.record["cancellation"]["modes"]) \
            + len(self.record["rates"]["points"]) + 1 \
            + len(self.record["trained"]["points"]) + 1 + len(self.record["trained"]["admission"]["policies"])
        # each model's serial run is the + 1
        summaries = {path[:-1] for path in self.derived if "summary" in path and path[-1] == "completed"}
        self.assertEqual(len(summaries), runs)  # every run's summary is derived, not only some

    def refusal(self, path: JsonPath, value: Any) -> str:
        record = copy.deepcopy(self.record)
        parent = at(record, path[:-1])
        parent[path[-1]] = value
        with self.assertRaises(RecordError) as refused:
            lab_check(LAB)(record, SOURCE)
        return str(refused.exception)

    def test_a_hand_edited_figure_of_each_kind_is_refused_naming_its_path_and_both_values(self) -> None:
        for path, value in EDITS:
            with self.subTest(path=path_text(path)):
                figure = self.derived[path]
                self.assertEqual(self.refusal(path, value), f"{SOURCE}: field {path_text(path)} is {shown(value)}, "
                                                            f"but {figure.how} gives {shown(figure.value)}")

    def test_a_verdict_the_runs_contradict_is_refused(self) -> None:
        path = ("targets", "speedup_met")
        figure = self.derived[path]
        self.assertEqual(self.refusal(path, not figure.value),
                         f"{SOURCE}: field $.targets.speedup_met is {not figure.value}, but {figure.how} gives {figure.value}")

    def test_the_trained_admission_runs_the_three_policies_or_two_where_the_counts_are_one(self) -> None:
        record = copy.deepcopy(self.record)
        policies = record["trained"]["admission"]["policies"]
        policies[:] = policies[:2]  # the byte budget and one count
        figures.check_invariants(record, SOURCE)
        policies.reverse()
        with self.assertRaisesRegex(RecordError, r"trained\.admission\.policies.* are \['count_safe', "
                                                 r"'kv_budget_bytes'\]"):
            figures.check_invariants(record, SOURCE)

    def test_the_model_section_says_why_it_ran_in_its_dtype_from_the_probes(self) -> None:
        record = copy.deepcopy(self.record)
        fill(record, figures.derive(record))  # the probes' medians as the benchmark stores them
        choice = record["config"]["benchmark"]["dtype_choice"]
        sentence = dtype_sentence(record)
        for name, probe in choice["probes"].items():
            self.assertIn(f"{statistics.median(probe['durations_ns']) / 1e6:.1f} ms in {name}", sentence)
        self.assertTrue(sentence.startswith(f"It ran in {choice['chosen']} because"))
        told = copy.deepcopy(record)
        told["config"]["benchmark"]["dtype_choice"].update(how="given by --dtype", probes={"float32": choice["probes"]["float32"]})
        self.assertIn("as the benchmark was told", dtype_sentence(told))

    def test_a_trained_model_in_another_dtype_than_the_probes_choice_is_explained_only_then(self) -> None:
        record = copy.deepcopy(self.record)
        fill(record, figures.derive(record))
        clause = "The trained model stays in float32: the one-call C step"
        record["trained"]["model"]["dtype"] = record["config"]["benchmark"]["dtype_choice"]["chosen"]
        self.assertNotIn(clause, dtype_sentence(record))
        record["config"]["benchmark"]["dtype_choice"]["chosen"] = "bfloat16"
        record["trained"]["model"]["dtype"] = "float32"
        self.assertIn(clause, dtype_sentence(record))


if __name__ == "__main__":
    unittest.main()
