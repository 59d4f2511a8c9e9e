"""The page's own views on a quick record: key results worded from the record, the concept diagrams drawn from
the lab's formulas, the check-yourself answers quoting the record, the batch-1 verdicts following the medians."""

from __future__ import annotations

import copy
import unittest
from typing import Any, ClassVar

import decode_bandwidth_views
import labkit.testing
from decode_bandwidth import benchmark, figures
from decode_bandwidth.figures import formulas
from decode_bandwidth.grid import group_key, headline_key
from decode_bandwidth.llama_modes import LLAMA_SERVED
from decode_bandwidth.testing import ONEDNN_WINS
from decode_bandwidth.traffic import step_bytes
from decode_bandwidth_views import trained
from decode_bandwidth_views.common import ratio_range
from decode_bandwidth_views.trained import ladder_sentences
from labkit import summary
from labkit.figures import fill
from labkit.summary import MIN_PARTED
from llm_models.kv_bytes import BYTES_PER_ELEMENT
from site_hooks.blocks import render_block


def rederived(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every derived figure recomputed from its (edited) raw data, as the benchmark stores them."""
    fill(record, figures.derive(record))
    return record


def steps_at(cell: dict[str, Any], ns: float) -> None:
    """Every timed repetition of a cell at ``ns``: its median becomes ``ns``, and with at least
    MIN_PARTED repetitions its range says the cell is that steady."""
    cell["durations_ns"] = [ns] * max(len(cell["durations_ns"]), MIN_PARTED)


class QuickRecordViews(labkit.testing.QuickBenchmarkRun):
    main = staticmethod(benchmark.main)
    schema = benchmark.ROOT / benchmark.LAB.schema
    # oneDNN wins the kernel table whatever this CPU: the compiled layers take their fallback (testing.ONEDNN_WINS)
    main_kwargs: ClassVar[dict[str, Any]] = {"kernel_ns": ONEDNN_WINS}

    def page(self, view: str, record: dict[str, Any]) -> str:
        """The HTML one of the lab's views puts into the page."""
        return render_block(decode_bandwidth_views.VIEWS[view](record))

    def test_each_dtypes_matmul_is_named_at_the_width_it_ran(self) -> None:
        """A page once called every square matmul 1,024-wide while the bfloat16 one was 512."""
        record = copy.deepcopy(self.record)
        for key, entry in record["hardware"]["matmul"].items():
            entry["size"] = {"float32": 1024, "bfloat16": 512}.get(key.split("/")[0], 256)
        html = self.page("floor", record)
        for key in record["hardware"]["matmul"]:
            dtype, threads = key.split("/")
            width = {"float32": "1,024", "bfloat16": "512"}.get(dtype, "256")
            self.assertIn(f"{dtype} ({width}-wide) at {threads} thread", html)

    def test_the_c_loops_build_time_is_called_a_fresh_build_only_where_the_caches_were_cold(self) -> None:
        record = copy.deepcopy(self.record)
        if "int8-c" not in record["llama"]["kernels"]["descriptions"]:
            self.skipTest("the C loops were not built here")  # a compiler, not a speed
        record["compiled"]["cold_cache"] = True
        self.assertIn("were compiled and loaded in", self.page("trained-kernels", record))
        record["compiled"]["cold_cache"] = False
        self.assertIn("were compiled, or loaded from the build cache, in", self.page("trained-kernels", record))

    def test_the_key_results_follow_the_record(self) -> None:
        record = copy.deepcopy(self.record)
        bench = record["config"]["benchmark"]
        items = decode_bandwidth_views.VIEWS["key-results"](record).items
        self.assertEqual(len(items), 5)
        self.assertNotIn("atol", " ".join(items))  # tolerances are the appendix's
        for entry in record["hardware"]["matmul"].values():  # matrix arithmetic fast enough to bound no step
            entry["durations_ns"] = [1] * len(entry["durations_ns"])
        for group in (*record["groups"], *record["llama"]["groups"]):  # each group's floor read at the run's best
            kernels = record["hardware"]["bandwidth"][str(group["threads"])]["kernels"]
            group["floor_ns"] = {name: min(kernel["durations_ns"]) for name, kernel in kernels.items()}
        record = rederived(record)
        for cell in record["cells"]:  # this lab's steps near their memory floor, transformers' at 0.6 of it
            share = {"ours-prealloc": 1.2, "ours-concat": 1.3, "ours-compiled": 1.25}.get(cell["mode"], 0.6)
            steps_at(cell, cell["floor_ns_per_step"] * share)
        items = decode_bandwidth_views.VIEWS["key-results"](rederived(record)).items
        self.assertTrue(items[2].startswith("Batch 1, bandwidth-bound at every context"), items[2])
        self.assertIn("1.20× the floor", items[2])
        self.assertIn("was slower than transformers' GPT-2", items[2])
        self.assertIn(f"{len(bench['batches']) * len(bench['contexts'])} cells, "
                      f"{len(bench['batches']) * len(bench['contexts'])} are bandwidth-bound", items[3])
        for cell in record["cells"]:
            if cell["mode"] == "hf-dynamic":
                steps_at(cell, cell["median_ns_per_step"] * 10)
        self.assertIn("was faster than transformers' GPT-2", decode_bandwidth_views.VIEWS["key-results"](rederived(record)).items[2])
        for group in record["llama"]["groups"]:  # the trained model's bullet words its verdict from the record
            group.update(best_over_transformers=1.5, sides={**group["sides"], "best_over_transformers": "above"})
        self.assertIn("slower than transformers' Llama on the same weights (1.50×) in step time",
                      decode_bandwidth_views.VIEWS["key-results"](record).items[4])

    def test_faster_or_slower_than_transformers_is_said_only_where_the_repetitions_part(self) -> None:
        from decode_bandwidth_views.results import versus_item
        from decode_bandwidth_views.trained import trained_item

        def timed(ours: list[int], theirs: list[int]) -> tuple[str, str]:
            record = copy.deepcopy(self.record)
            headline = headline_key(record)
            for cell in record["cells"]:
                if (cell["dtype"], cell["threads"], cell["batch"]) == (*headline, 1):
                    cell["durations_ns"] = list(theirs if cell["mode"] == "hf-dynamic" else ours)
            for cell in record["llama"]["cells"]:
                cell["durations_ns"] = list(theirs if cell["mode"] == "hf-dynamic" else ours)
            record = rederived(record)
            return versus_item(record), trained_item(record)

        repeats = max(len(self.record["cells"][0]["durations_ns"]), MIN_PARTED)
        gpt2, llama = timed([100] * repeats, [200] * repeats)
        self.assertIn("was faster than transformers' GPT-2", gpt2)
        self.assertIn("faster than transformers' Llama", llama)
        gpt2, llama = timed([300] * repeats, [200] * repeats)
        self.assertIn("was slower than transformers' GPT-2", gpt2)
        self.assertIn("slower than transformers' Llama", llama)
        noisy_ours = [(100, 200, 250)[i % 3] for i in range(repeats)]  # overlaps 200; its ratios' middle half holds 1
        gpt2, llama = timed(noisy_ours, [200] * repeats)
        self.assertIn("was within this run's noise of transformers' GPT-2", gpt2)
        self.assertIn("within this run's noise of transformers' Llama", llama)
        self.assertNotIn("faster than", llama)

    def test_the_served_step_is_set_beside_the_best_only_as_far_as_its_rounds_part(self) -> None:
        """Slower, faster and within the noise, each from the served mode's per-round ratios to the best mode."""
        repeats = max(len(self.record["llama"]["cells"][0]["durations_ns"]), MIN_PARTED)

        def served_at(served: list[int]) -> str:
            record = copy.deepcopy(self.record)
            for cell in record["llama"]["cells"]:
                cell["durations_ns"] = list(served) if cell["mode"] == LLAMA_SERVED else [200] * repeats
            return self.page("trained-served", rederived(record))

        self.assertIn("slower than this lab&#39;s best float32 step (1.50×)", served_at([300] * repeats))
        self.assertIn("faster than this lab&#39;s best float32 step (0.50×)", served_at([100] * repeats))
        noisy = served_at([(100, 200, 250)[i % 3] for i in range(repeats)])  # its ratios' middle half holds 1
        self.assertIn("within this run&#39;s noise of this lab&#39;s best float32 step", noisy)
        self.assertNotIn("faster", noisy)
        self.assertNotIn("slower", noisy)

    def test_contexts_that_part_are_named_apart_from_those_within_the_noise(self) -> None:
        from decode_bandwidth_views.common import against
        self.assertEqual(against([0.95, 0.8, 0.77], ["within", "below", "below"], [128, 512, 1024], "transformers"),
                         "within this run's noise of transformers at context 128 (0.95×), faster than it at contexts "
                         "512 and 1,024 (0.77–0.80×)")
        self.assertEqual(against([0.8, 1.3], ["below", "above"], [128, 512], "transformers"),
                         "faster than transformers at context 128 (0.80×), slower than it at context 512 (1.30×)")
        self.assertEqual(against([0.8, 0.7], ["below", "below"], [128, 512], "transformers"),
                         "faster than transformers (0.70–0.80×)")

    def test_batch_one_names_each_regime_with_its_contexts_never_one_for_all(self) -> None:
        from decode_bandwidth_views.results import regimes_by_context
        same = [{"regime": "memory", "context": c} for c in (128, 512)]
        mixed = [*same, {"regime": "overhead", "context": 1024}]
        self.assertEqual(regimes_by_context(same), "bandwidth-bound at every context")
        self.assertEqual(regimes_by_context(mixed), "bandwidth-bound at contexts 128 and 512; overhead-bound at context 1,024")

    def test_the_step_bytes_diagram_draws_the_labs_byte_formula(self) -> None:
        from decode_bandwidth_views import pictures
        record, model = self.record, self.record["config"]["model"]
        bench = record["config"]["benchmark"]
        groups = pictures.headline_groups(record)
        self.assertEqual(list(groups), [(b, c) for b in bench["batches"] for c in bench["contexts"]])
        drawn = [key for keys, _, _ in pictures.SEGMENTS for key in keys]
        for (batch, context), group in groups.items():  # the bars draw what the benchmark stored and the build checked
            needed = step_bytes(model, BYTES_PER_ELEMENT[bench["dtype"]], batch, context)
            self.assertEqual(group["bytes"], needed)
            self.assertEqual(sum(group["bytes"][key] for key in drawn), needed["total"])
        html = self.page("step-bytes", record)
        self.assertIn('id="lab-diagram-step-bytes-title"', html)
        self.assertEqual(html.count("B 1 × T"), len(record["config"]["benchmark"]["contexts"]))

    def test_the_regime_grid_names_each_cell_by_the_labs_rule(self) -> None:
        from decode_bandwidth_views import pictures
        self.assertEqual(formulas.regime([100] * 5, 60, 10), "memory")
        self.assertEqual(formulas.regime([100] * 5, 10, 60), "compute")
        self.assertEqual(formulas.regime([100] * 5, 40, 30), "overhead")
        record = copy.deepcopy(self.record)
        cells = {(c["batch"], c["context"], c["mode"]): c for c in formulas.cell_table(record).values()
                 if (c["dtype"], c["threads"]) == headline_key(record)}
        for who in pictures.COMPARED:
            for (batch, context), cell in pictures.cell_regimes(record, who).items():
                group = pictures.headline_groups(record)[(batch, context)]
                raw = cells[(batch, context, cell["mode"])]["durations_ns"]
                best = group["bytes"]["total"] / record["hardware"]["bandwidth"][str(headline_key(record)[1])][
                    "bytes_per_s"] * 1e9  # the same bytes at the run's best read
                self.assertEqual(cell["regime"], formulas.regime(raw, group["floor_ns_per_step"],
                                                                 group["compute_floor_ns_per_step"], best))
        for entry in record["hardware"]["matmul"].values():  # matrix arithmetic so slow its floor bounds every step
            entry["durations_ns"] = [duration * 10**6 for duration in entry["durations_ns"]]
        html = self.page("regimes", rederived(record))
        self.assertIn(">compute<", html)
        self.assertNotIn(">overhead<", html)
        self.assertIn("compute floor", html)

    def test_a_cell_whose_repetitions_straddle_the_overhead_line_is_named_no_regime(self) -> None:
        from decode_bandwidth_views import pictures
        from decode_bandwidth_views.results import regimes_by_context
        # floor 60: a step under 120 is bandwidth-bound, over 120 overhead-bound (OVERHEAD_SHARE 0.5)
        self.assertEqual(formulas.regime([100, 104, 110, 112, 118], 60, 10), "memory")  # clear of the line
        self.assertEqual(formulas.regime([130, 135, 140, 150, 160], 60, 10), "overhead")  # clear the other way
        self.assertEqual(formulas.regime([74, 100, 119, 125, 159], 60, 10), "unresolved")  # quartiles 100 and 125
        self.assertEqual(formulas.regime([100, 104, 110, 112, 300], 60, 10), "memory")  # one outlier moves nothing
        noisy = [{"regime": "memory", "context": 128}, {"regime": "unresolved", "context": 512}]
        self.assertIn("unresolved (it straddles the overhead line) at context 512", regimes_by_context(noisy))
        # clear of the line at its group's floor (60: under 120), across it at the run's best read (50: over 100)
        self.assertEqual(formulas.regime([104, 108, 110, 112, 116], 60, 10), "memory")
        self.assertEqual(formulas.regime([104, 108, 110, 112, 116], 60, 10, 50), "unresolved")
        self.assertEqual(formulas.regime([104, 108, 110, 112, 116], 60, 10, 58), "memory")
        record = copy.deepcopy(self.record)
        headline = headline_key(record)
        for cell in record["cells"]:  # every headline cell straddles its own overhead line
            if (cell["dtype"], cell["threads"]) == headline:
                higher = cell["median_ns_per_step"] / cell["step_over_higher_floor"]  # the floor that names it
                cell["durations_ns"] = [int(higher * share) for share in (1.0, 1.9, 2.0, 2.1, 3.0)]
        html = self.page("regimes", rederived(record))
        self.assertIn(">unclear<", html)
        self.assertNotIn(">overhead<", html)
        self.assertIn("reads unclear", html)
        self.assertGreater(rederived(record)["headline_regimes"]["unresolved"], 0)
        self.assertIn("unclear", pictures.REGIME_SHORT["unresolved"])

    def test_the_roofline_places_every_headline_cell_and_a_cell_at_its_floor_on_the_slope(self) -> None:
        from decode_bandwidth_views import pictures
        record = copy.deepcopy(self.record)
        headline = headline_key(record)
        # NOTE: the slope is the run's best read, not the floor read beside each group, which prices that group
        bandwidth = record["hardware"]["bandwidth"][str(headline[1])]["bytes_per_s"]
        groups = {group_key(g): g for g in record["groups"]}
        for cell in record["cells"]:  # every headline cell exactly at the floor the run's best read sets
            if (cell["dtype"], cell["threads"]) == headline:
                at_best = groups[group_key(cell)]["bytes"]["total"] / bandwidth * 1e9
                cell["durations_ns"] = [round(at_best)] * len(cell["durations_ns"])
        record = rederived(record)
        placed = [c for c in record["cells"] if (c["dtype"], c["threads"]) == headline]
        for cell in placed:  # on the slope: the flops per second its intensity allows at the read bandwidth
            group = groups[group_key(cell)]
            self.assertAlmostEqual(cell["flops_per_s"] / (bandwidth * group["flops_per_byte"]), 1.0, places=3)
        svg = pictures.roofline_canvas(record).svg()
        self.assertEqual(svg.count('rx="4"'), len(placed))
        self.assertIn("GB/s", svg)
        self.assertIn("matmul", svg)
        for cell in placed:
            if cell["mode"] == "hf-dynamic":
                steps_at(cell, cell["median_ns_per_step"] * 4)  # four times the best floor: a quarter of the flops/s
        slower = rederived(record)
        for cell in slower["cells"]:
            if (cell["dtype"], cell["threads"]) == headline and cell["mode"] == "hf-dynamic":
                group = groups[group_key(cell)]
                self.assertAlmostEqual(cell["flops_per_s"] / (bandwidth * group["flops_per_byte"]), 0.25, places=3)

    def test_the_answers_quote_the_record(self) -> None:
        record = self.record
        crossover = record["kv_crossover"]
        self.assertIn(f"{crossover['batch_x_context']:,.0f} positions", self.page("answer-crossover", record))
        profile = record["profile"]
        self.assertIn(f"At batch {profile['batch']}, context {profile['context']:,}", self.page("answer-gap", record))
        bench = record["config"]["benchmark"]
        self.assertIn(f"At batch {bench['batches'][-1]}, context {bench['contexts'][-1]:,}", self.page("answer-bound", record))

    def test_batch_one_is_said_against_transformers_and_the_floor_as_measured(self) -> None:
        record = copy.deepcopy(self.record)
        bench = record["config"]["benchmark"]
        for cell in record["cells"]:
            if (cell["dtype"], cell["threads"], cell["batch"]) == (bench["dtype"], bench["threads"], 1):
                scale = 1.25 if cell["mode"].startswith("ours") else 2.5  # ours at 1.25x its floor, transformers 2.5x
                steps_at(cell, cell["floor_ns_per_step"] * scale)
        block = decode_bandwidth_views.VIEWS["batch-one"](rederived(record))
        self.assertIn("took 0.50× hf-dynamic's step and 1.25× the measured memory floor", block.paragraphs[0])
        self.assertEqual(len(block.tables[0].rows), len(bench["contexts"]))
        self.assertEqual({row[-1] for row in block.tables[0].rows}, {"2.50×"})
        html = render_block(block)
        self.assertIn("What limits them", html)
        for planned in ("target", "Missed", "aims for"):
            self.assertNotIn(planned, html)

    def test_the_kernel_table_bolds_each_kinds_fastest_kernel_and_the_chart_names_the_winners(self) -> None:
        record = copy.deepcopy(self.record)
        rows = record["layout"]["rows"]
        for index, row in enumerate(rows):  # the compiled loop fastest for the first kind only, oneDNN for the rest
            row.update(in_out_ns=400.0, out_in_ns=300.0, onednn_ns=200.0, compiled_ns=100.0 if index == 0 else 250.0)
        html = render_block(decode_bandwidth_views.VIEWS["layout"](rederived(record)))
        self.assertEqual(html.count("<strong>"), len(rows))
        chart = decode_bandwidth_views.VIEWS["kernels"](record)
        self.assertEqual(len(chart.charts), 1)
        self.assertIn("generated loop", chart.charts[0].svg)
        notes = " ".join(chart.notes)
        self.assertIn(f"ours-compiled's generated loop for {rows[0]['kind']};", notes)
        self.assertIn("oneDNN linear, packed for " + rows[1]["kind"], notes)
        for row in rows:
            del row["onednn_ns"]
        self.assertIn("Not measured in this run: oneDNN linear, packed",
                      " ".join(decode_bandwidth_views.VIEWS["kernels"](rederived(record)).notes))

    def test_the_compiled_table_compares_both_modes_at_every_batch_1_group(self) -> None:
        record = copy.deepcopy(self.record)
        for cell in record["cells"]:
            if cell["batch"] == 1 and cell["mode"] in ("ours-prealloc", "ours-compiled"):
                steps_at(cell, 2e6 if cell["mode"] == "ours-prealloc" else 1.5e6)
        block = decode_bandwidth_views.VIEWS["compiled"](rederived(record))
        ones = [g for g in record["groups"] if g["batch"] == 1]
        self.assertEqual(len(block.tables[0].rows), len(ones))
        # the faster of the two in bold, whichever it is: ours-compiled here, ours-prealloc where it is slower
        self.assertTrue(all(type(row[4]).__name__ == "Strong" and type(row[2]).__name__ != "Strong"
                            for row in block.tables[0].rows))
        other = copy.deepcopy(record)
        for cell in other["cells"]:
            if cell["batch"] == 1 and cell["mode"] == "ours-compiled":
                steps_at(cell, 3e6)
        slower = decode_bandwidth_views.VIEWS["compiled"](rederived(other)).tables[0].rows
        self.assertTrue(all(type(row[2]).__name__ == "Strong" and type(row[4]).__name__ != "Strong" for row in slower))
        notes = " ".join(block.notes)
        self.assertIn("ours-compiled took 0.75× the step time of ours-prealloc", notes)
        for key in record["compiled"]["compile_s"]:
            self.assertIn(f"in {key.split('/')[0]} at", notes)
        summary = " ".join(decode_bandwidth_views.VIEWS["compiled-summary"](record).paragraphs)
        self.assertIn("ours-compiled took 0.75× of ours-prealloc's step in float32 at 1 thread", summary)
        self.assertFalse(record["compiled"]["cold_cache"])  # --quick reuses inductor's cache, and says so
        self.assertIn("reusing what earlier runs left in inductor's cache", summary)
        record["compiled"]["cold_cache"] = True
        summary = " ".join(decode_bandwidth_views.VIEWS["compiled-summary"](record).paragraphs)
        self.assertIn("before anything is timed, from an empty cache: ", summary)

    def test_batch_scaling_is_shown_per_dtype_from_the_stored_layout_times(self) -> None:
        record = copy.deepcopy(self.record)
        (dtype, later), = record["layout_batches_other_dtypes"].items()
        for layout, scale in ((record["layout"], 1.0), (record["layout_batches"][-1], 3.0),
                              (record["layout_other_dtypes"][dtype], 1.0), (later[-1], 1.25)):
            for row in layout["rows"]:
                row["in_out_ns"] = row["out_in_ns"] = 1000.0 * scale
        block = decode_bandwidth_views.VIEWS["batches"](rederived(record))
        scaling = block.tables[-1]
        self.assertEqual([row[0] for row in scaling.rows], ["float32", dtype])
        self.assertEqual([row[-1] for row in scaling.rows], ["3.00×", "1.25×"])
        self.assertIn(f"took 3.00× their batch-1 time in float32 and 1.25× their batch-1 time in {dtype}",
                      " ".join(block.notes))

    def test_the_trained_ladder_is_said_against_its_floor_and_transformers_never_against_a_target(self) -> None:
        record = copy.deepcopy(self.record)
        llama = record["llama"]
        for cell in llama["cells"]:  # the compiled twin at 1.2x its floor, transformers at 3x, int8 at 2x its own
            factor = {"ours-fused-compiled": 1.2, "hf-dynamic": 3.0, "ours-int8": 2.0}.get(cell["mode"], 2.5)
            steps_at(cell, cell["floor_ns_per_step"] * factor)
        sentences = ladder_sentences(rederived(record))
        self.assertIn("(ours-fused-compiled) took 1.20× its floor and 0.40× transformers' step time.", sentences[0])
        first = [g for g in llama["groups"] if g["threads"] == llama["threads"][0]]
        shares = [g["int8_floor_over_float32_floor"] for g in first]
        self.assertIn(f"where that floor is {ratio_range(shares)} the float32 one", sentences[1])
        self.assertIn(f"ours-int8 took {ratio_range([2.0 * share / 1.2 for share in shares])}", sentences[1])
        last = llama["contexts"][-1]
        for cell in llama["cells"]:  # at the longest context alone, 1.8x its floor: still the fastest
            if (cell["mode"], cell["context"]) == ("ours-fused-compiled", last):
                steps_at(cell, cell["floor_ns_per_step"] * 1.8)
        html = self.page("trained-verdict", rederived(record))
        self.assertIn("1.20–1.80× its floor and 0.40–0.60× transformers", html)
        for planned in ("aims for", "target", "at most"):
            self.assertNotIn(planned, html)
        ladder = self.page("trained-ladder", record)
        for mode in formulas.LLAMA_LADDER:
            self.assertIn(mode, ladder)
        self.assertIn("1.80×", ladder)

    def test_a_cell_of_too_few_repetitions_never_parts_from_another(self) -> None:
        self.assertFalse(summary.parted([1.0], [2.0]))  # one repetition each: no range to tell noise by
        self.assertFalse(summary.parted([1.0, 1.1], [2.0, 2.1]))
        self.assertTrue(summary.parted([1.0, 1.1, 1.2], [2.0, 2.1, 2.2]))
        self.assertFalse(summary.parted([1.0, 1.1, 2.5], [2.0, 2.1, 2.2]))

    def test_what_each_rung_removed_is_said_only_where_its_repetitions_part_from_the_rung_before(self) -> None:
        record = copy.deepcopy(self.record)
        llama = record["llama"]
        repeats = max(len(llama["cells"][0]["durations_ns"]), MIN_PARTED)
        steps = {"hf-dynamic": [50e6] * repeats, "ours-prealloc": [40e6] * repeats,  # 10 ms off, clearly
                 "ours-fused": [39e6 + 3e6 * (i % 2) for i in range(repeats)],  # overlaps 40 ms: noise
                 "ours-fused-compiled": [45e6] * repeats,  # slower than the rung before, clearly
                 "ours-native": [30e6] * repeats, "ours-int8": [20e6] * repeats,
                 LLAMA_SERVED: [41e6] * repeats}  # beside the ladder, not on it
        for cell in llama["cells"]:
            cell["durations_ns"] = [int(ns) for ns in steps[cell["mode"]]]
        rows = {row[0]: row[-1] for row in trained.trained_ladder_view(rederived(record)).tables[0].rows}
        self.assertEqual(rows["hf-dynamic"], "–")
        self.assertEqual(rows["ours-prealloc"], "10.00 ms")
        self.assertEqual(rows["ours-fused"], "within noise")
        self.assertTrue(rows["ours-fused-compiled"].startswith("added "))
        self.assertEqual(rows["ours-native"], "15.00 ms")
        self.assertEqual(rows["ours-int8"], "10.00 ms")

    def test_the_second_thread_sentence_names_the_modes_it_sped_up_and_those_it_did_not(self) -> None:
        record = copy.deepcopy(self.record)
        llama = record["llama"]
        first, second = llama["threads"][:2]
        for cell in llama["cells"]:  # every mode at 2 threads takes 0.8x its 1-thread step
            steps_at(cell, 1e6 * (0.8 if cell["threads"] == second else 1.0))
        sped = trained.threads_sentence(rederived(record))
        self.assertIn("got faster at every context", sped)
        self.assertIn("ours-int8 0.80× of the one-thread step", sped)
        self.assertNotIn("did not", sped)
        for cell in llama["cells"]:  # but ours-int8 at 1.3x at 2 threads: held
            if (cell["mode"], cell["threads"]) == ("ours-int8", second):
                steps_at(cell, 1.3e6)
        held = trained.threads_sentence(rederived(record))
        self.assertIn("ours-int8 did not at every context (ours-int8 1.30×)", held)
        self.assertIn("so bandwidth was not what held them", held)
        self.assertIn("did not at every context", self.page("trained-verdict", record))

    def test_the_departure_is_said_from_the_two_greedy_answers(self) -> None:
        record = copy.deepcopy(self.record)
        quality = record["llama"]["quality"]
        answers = quality["greedy"]["ids"]
        answers["int8"] = list(answers["float32"])
        same = trained.departure_sentence(rederived(record)["llama"]["quality"])
        self.assertIn(f"chose the same {len(answers['float32'])} tokens: no departure", same)
        answers["int8"][3] = answers["float32"][3] + 1
        parted = trained.departure_sentence(rederived(record)["llama"]["quality"])
        self.assertIn(f"the same first 3 of {quality['greedy']['new_tokens']} tokens, then parted", parted)
        html = self.page("trained-quality", record)
        self.assertIn("then parted", html)
        self.assertIn("Top-1 agreement", html)

    def test_the_greedy_answers_are_shown_escaped_and_a_random_model_says_it_has_none(self) -> None:
        record = copy.deepcopy(self.record)
        self.assertIn("has no tokenizer", self.page("trained-answers", record))  # the quick run's tiny Llama
        quality = record["llama"]["quality"]
        quality["answers"] = {"float32": "keys <b>and</b> values", "int8": "keys & values"}
        quality["prompt"] = "Why a cache?"
        html = self.page("trained-answers", record)
        self.assertIn("keys &lt;b&gt;and&lt;/b&gt; values", html)
        self.assertIn("keys &amp; values", html)
        self.assertNotIn("<b>and</b>", html)


class BelowTheFloor(unittest.TestCase):
    """A group whose best step came out below its floor (its rounds' floor reads slowed) is named with its drift; a
    run where every group sits at or above its floor says nothing of it."""

    @staticmethod
    def group(median: float, drift: float) -> dict[str, Any]:
        return {"paired": {"best_over_floor": {"median": median, "low": median - 0.1, "high": median + 0.1}},
                "round_floor": {"drift": drift}}

    def test_only_a_group_below_its_floor_is_named_with_its_floors_drift(self) -> None:
        groups = {(1, 128): self.group(1.16, 0.05), (1, 512): self.group(0.59, 0.87), (2, 512): self.group(1.26, 0.1)}
        text = trained.below_floor_sentence(groups)
        self.assertIn("On 1 thread at context 512 (0.59× (0.49–0.69), the floor's reads 87% apart", text)
        self.assertNotIn("context 128", text)
        self.assertIn("The other groups' rounds did not see it.", text)
        groups[(1, 512)] = self.group(1.0, 0.87)  # at its floor, not below
        self.assertIsNone(trained.below_floor_sentence(groups))


if __name__ == "__main__":
    unittest.main()
