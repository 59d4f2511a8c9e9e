"""The committed record as the site build reads it: every derived figure checked against its derivation,
a hand-edited one refused in one line naming its JSON path and both values. Torch-free, as the build is."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any

from labkit.figures import shown
from labkit.manifest import load_lab
from labkit.records import JsonPath, RecordError, path_text
from labkit.testing import committed_record
from labkit.waiting import run
from site_hooks.errors import SiteBuildError
from site_hooks.labviews import lab_check
from site_hooks.orchestrate import read_record

ROOT = Path(__file__).resolve().parents[3]
LAB = load_lab(Path(__file__).with_name("lab.toml"), ROOT)
SOURCE = LAB.record.as_posix()

# One figure of each kind the lab's derive covers, with the words its refusal gives for where it comes from.
EDITS: list[tuple[JsonPath, str]] = [
    (("hardware", "bandwidth", "1", "kernels", "dot", "best_ns"), "the fastest of its passes"),
    (("hardware", "bandwidth", "1", "kernels", "matvec", "bytes_per_s"), "its bytes / its fastest pass"),
    (("hardware", "bandwidth", "2", "bytes_per_s"), "the fastest read kernel's rate"),
    (("hardware", "matmul", "float32/1", "flops"), "2 x size^3"),
    (("hardware", "matmul", "bfloat16/1", "flops_per_s"), "its flops / its fastest pass"),
    (("groups", 0, "bytes", "kv_read"), "the model config"),
    (("groups", 2, "bytes", "total"), "the model config"),
    (("groups", 4, "floor_ns_per_step"), "its bytes / the read bandwidth beside it"),
    (("groups", 3, "floor_bytes_per_s"), "the fastest read kernel's pass beside it"),
    (("hardware", "bandwidth", "1", "beside", "drift"), "(fastest - slowest) / fastest of the floor reads through the run"),
    (("hardware", "bandwidth", "2", "beside", "median_over_best"), "the run's best rate / the median floor read"),
    (("groups", 5, "compute_floor_ns_per_step"), "its flops / the measured matmul rate"),
    (("cells", 0, "min_ns_per_step"), "its raw durations"),
    (("cells", 3, "median_ns_per_step"), "its raw durations"),
    (("cells", 7, "max_ns_per_step"), "its raw durations"),
    (("cells", 9, "floor_ns_per_step"), "its group's bytes / the read bandwidth beside it"),
    (("cells", 11, "step_over_floor"), "its median / its group's floor"),
    (("kv_crossover", "batch_x_context"), "the model config"),
    (("kv_crossover", "kv_bytes_per_position"), "the model config"),
    (("profile", "modes", "ours-prealloc", "rows", 0, "bytes"), "the model config"),
    (("profile", "modes", "hf-dynamic", "rows", 5, "floor_ns"), "its bytes / the measured read bandwidth"),
    (("profile", "modes", "ours-prealloc", "rows", 3, "ratio_to_floor"), "its time / its floor"),
    (("profile", "modes", "hf-dynamic", "total_ns_per_step"), "the sum of its rows"),
    (("client", "modes", "ours", "ttft_ns"), "its token times"),
    (("client", "modes", "transformers", "itl_p90_ns"), "its token times"),
    (("client", "modes", "ours", "tokens_per_s"), "its token times"),
    (("llama", "groups", 1, "bytes", "kv_read"), "the Llama config, float32 weights"),
    (("llama", "groups", 0, "floor_ns_per_step"), "its float32 bytes / the median read rate of its rounds"),
    (("llama", "groups", 1, "round_floor", "drift"), "(fastest - slowest) / fastest of its rounds' read rates"),
    (("llama", "groups", 1, "floor_slowdown"), "1 - its rounds' median read rate / the fastest round read at its "
     "thread count"),
    (("llama", "groups", 5, "int8_over_floor"), "the median over rounds of ours-int8's step / the round's int8 floor"),
    (("hardware", "step_sized", "threads", "1", "step_bytes_per_s"), "the median of its rounds' fastest step-sized reads"),
    (("hardware", "step_sized", "weight_bytes"), "the trained model's float32 weights"),
    (("llama", "groups", 1, "int8_bytes", "weights"), "the Llama config, int8 weights"),
    (("llama", "groups", 2, "int8_floor_ns_per_step"), "its int8 bytes / the median read rate of its rounds"),
    (("llama", "groups", 0, "int8_over_best_float32"), "the median over rounds of ours-int8's step / the best "
     "float32 mode's"),
    (("llama", "cells", 35, "over_first_threads"), "its median / the same mode's at the first thread count"),
    (("llama", "groups", 3, "served_over_best"), "the median over rounds of the served step / the best float32 mode's"),
    (("llama", "quality", "figures", "int8", "kl_mean"), "mean of the per-position KL"),
    (("llama", "quality", "figures", "int8", "perplexity"), "exp(mean NLL)"),
    (("llama", "groups", 2, "compute_floor_ns_per_step"), "its flops / the measured matmul rate"),
    (("llama", "groups", 2, "ours_over_transformers"), "the median over rounds of ours-prealloc's step / transformers'"),
    (("llama", "cells", 0, "median_ns_per_step"), "its raw durations"),
    (("llama", "cells", 1, "floor_ns_per_step"), "its group's bytes / the median read rate of its rounds"),
    (("llama", "cells", 3, "step_over_floor"), "the median over rounds of its step / the round's floor"),
    (("llama", "contrast", "llama", "kv_bytes_per_position"), "the two models' configs"),
    (("llama", "contrast", "gpt2", "head_share"), "the two models' configs"),
]


def at(record: Any, path: JsonPath) -> tuple[Any, Any]:
    """The object holding the field at ``path``, and the field's key."""
    for key in path[:-1]:
        record = record[key]
    return record, path[-1]


class CommittedRecord(unittest.TestCase):
    def refusal(self, record: dict[str, Any]) -> str:
        """The build's one-line refusal of ``record`` in place of the committed one."""
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            shutil.copytree(ROOT / "results", root / "results", ignore=shutil.ignore_patterns("*-results.json", "machines"))
            (root / LAB.record).write_text(json.dumps(record, indent=1))
            with self.assertRaises(SiteBuildError) as refused:
                read_record(LAB, root)
        message = str(refused.exception)
        self.assertNotIn("\n", message)
        return message

    def test_the_committed_record_passes_its_invariants_and_every_derived_figure(self) -> None:
        self.assertIsNotNone(read_record(LAB, ROOT))

    def test_a_hand_edited_figure_is_refused_naming_its_path_and_both_values(self) -> None:
        committed = committed_record(__file__)  # with its figures, as a record that stored them would be
        check = lab_check(LAB)
        for index, (path, how) in enumerate(EDITS):
            with self.subTest(path=path_text(path)):
                record = json.loads(json.dumps(committed))
                parent, key = at(record, path)
                original = parent[key]
                # ints tripled, fractions (a drift can be at most 1) halved, other floats half as large again
                parent[key] = (original * 3 + 1 if isinstance(original, int) else original / 2 if 0 < original <= 1
                               else original * 1.5)
                expected = f"{SOURCE}: field {path_text(path)} is {shown(parent[key])}, but {how} gives {shown(original)}"
                # NOTE: the build reads a record by validating its schema, then running this check; an edited number
                # stays valid by schema, and validating the record takes most of a read (0.3 s), so each edit meets
                # the check directly and every eighth also the build's whole read.
                if index % 8 == 0:
                    self.assertEqual(self.refusal(record), expected)
                with self.assertRaises(RecordError) as refused:
                    check(json.loads(json.dumps(record)), SOURCE)
                self.assertEqual(str(refused.exception), expected)

    def test_an_invariant_is_refused_before_any_figure_is_derived(self) -> None:
        record = committed_record(__file__)
        record["equivalence"]["modes"]["hf-static"]["max_abs_diff"] = 0.5
        record["cells"][0]["median_ns_per_step"] = 1  # a figure the check would refuse next
        self.assertIn(f"{SOURCE}: field $.equivalence.modes.hf-static.max_abs_diff is 0.5, beyond atol + rtol x "
                      "max|reference|", self.refusal(record))

    def test_a_group_keeping_an_attempt_whose_reads_ran_slower_is_refused(self) -> None:
        record = committed_record(__file__)
        group = record["llama"]["groups"][0]
        attempt = {key: json.loads(json.dumps(group[key])) for key in ("order", "floor_ns", "round_floor")}
        attempt["durations_ns"] = {cell["mode"]: cell["durations_ns"] for cell in record["llama"]["cells"]
                                   if (cell["threads"], cell["context"]) == (group["threads"], group["context"])}
        attempt["round_floor"]["durations_ns"] = [ns // 2 for ns in attempt["round_floor"]["durations_ns"]]
        group["set_aside"] = [attempt]
        self.assertIn(f"{SOURCE}: field $.llama.groups[0].round_floor is an attempt whose reads' median ran slower "
                      "than set_aside 0's", self.refusal(record))
        attempt["round_floor"]["durations_ns"] = [ns * 4 for ns in attempt["round_floor"]["durations_ns"]]
        record["llama"]["remeasure"]["limit"] = 0
        set_aside = sum(len(g.get("set_aside", [])) for g in record["llama"]["groups"])  # the run's own, and this one
        self.assertIn(f"{SOURCE}: field $.llama.groups set aside {set_aside} attempts; the section measures again at "
                      "most 0 times", self.refusal(record))

    def test_the_figures_and_views_import_no_torch(self) -> None:
        code = ("import sys, decode_bandwidth.figures, decode_bandwidth_views; "
                "sys.exit('torch' in sys.modules)")
        finished = run([sys.executable, "-c", code], "the torch-free import check", cwd=Path(__file__).parent)
        self.assertEqual(finished.returncode, 0)


if __name__ == "__main__":
    unittest.main()


class FloorsBesideGroups(unittest.TestCase):
    def test_each_group_is_priced_by_the_floor_read_beside_it(self) -> None:
        from decode_bandwidth.figures import derive

        record = json.loads((ROOT / LAB.record).read_text())
        before = {figure.path: figure.value for figure in derive(record)}
        record["groups"][0]["floor_ns"] = {name: 2 * ns for name, ns in record["groups"][0]["floor_ns"].items()}
        after = {figure.path: figure.value for figure in derive(record)}
        self.assertAlmostEqual(after[("groups", 0, "floor_ns_per_step")], 2 * before[("groups", 0, "floor_ns_per_step")])
        self.assertEqual(after[("groups", 1, "floor_ns_per_step")], before[("groups", 1, "floor_ns_per_step")])
        first = next(i for i, cell in enumerate(record["cells"]) if all(
            cell[k] == record["groups"][0][k] for k in ("dtype", "threads", "batch", "context")))
        self.assertAlmostEqual(after[("cells", first, "step_over_floor")], before[("cells", first, "step_over_floor")] / 2)
