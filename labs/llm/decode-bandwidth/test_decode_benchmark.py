"""The benchmark's record: complete, self-consistent, refused when tampered with, safe on bad input."""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import math
import unittest
from typing import Any, ClassVar
from unittest import mock

import torch

import decode_bandwidth_views
import labkit.testing
from decode_bandwidth import benchmark, figures, workloads
from decode_bandwidth.cache import PreallocatedCache
from decode_bandwidth.compiled import CompiledDecoder
from decode_bandwidth.figures import formulas
from decode_bandwidth.grid import MODES as GRID_MODES
from decode_bandwidth.grid import OURS, grid
from decode_bandwidth.hf import hf_model
from decode_bandwidth.llama_modes import KERNEL_SETS, LLAMA_WEIGHTS
from decode_bandwidth.model import Decoder
from decode_bandwidth.testing import ONEDNN_WINS, tiny_model
from labkit import harness
from labkit.figures import check_record, fill
from labkit.records import RecordError, path_text
from labkit.summary import percentile
from llm_models.kv_bytes import BYTES_PER_ELEMENT
from llm_models.llama.kinds import MATRIX_KINDS
from site_hooks.blocks import render_block

SCHEMA = benchmark.ROOT / benchmark.LAB.schema
MODES = ["ours-concat", "ours-prealloc", "ours-compiled", "hf-dynamic", "hf-static"]  # the spec: what a record must time


class PositionResetDecoder(Decoder):
    def positions(self, offset: int, length: int, device: torch.device) -> torch.Tensor:
        return torch.arange(length, device=device)


class QuickRun(labkit.testing.QuickBenchmarkRun):
    main = staticmethod(benchmark.main)
    schema = SCHEMA
    # oneDNN wins the kernel table whatever this CPU: the compiled layers take their fallback (testing.ONEDNN_WINS)
    main_kwargs: ClassVar[dict[str, Any]] = {"kernel_ns": ONEDNN_WINS}

    def page(self, view: str, record: dict[str, Any]) -> str:
        """The HTML one of the lab's views puts into the page."""
        return render_block(decode_bandwidth_views.VIEWS[view](record))

    def rederived(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record with every derived figure recomputed from its (edited) raw data, as the benchmark stores them."""
        fill(record, figures.derive(record))
        return record

    def check(self, record: dict[str, Any]) -> None:
        """The site's check of this lab's record: its invariants, then every derived figure."""
        check_record(record, "record.json", figures.check_invariants, figures.derive)

    def assert_refused(self, field: str, tamper: Any, reason: str = "") -> None:
        record = copy.deepcopy(self.record)
        tamper(record)
        with self.assertRaises(RecordError) as caught:
            self.check(record)
        self.assertIn(field, str(caught.exception))
        self.assertIn(reason, str(caught.exception))

    def test_every_cell_of_the_grid_holds_the_fields_a_reader_needs(self) -> None:
        record = self.record
        bench = record["config"]["benchmark"]
        groups = grid(bench)
        self.assertEqual(len(record["cells"]), len(GRID_MODES) * len(groups))
        for cell in record["cells"]:
            for field in ("mode", "batch", "context", "dtype", "threads", "median_ns_per_step", "floor_ns_per_step"):
                self.assertIn(field, cell)
            self.assertEqual(len(cell["durations_ns"]), bench["repeats"])
        self.assertIn(("bfloat16", 1, 1, bench["contexts"][0]), groups)
        self.assertIn(("float32", 2, 1, bench["contexts"][0]), groups)

    def test_the_record_says_the_timed_caches_hold_random_contents(self) -> None:
        self.assertIn("random keys and values", self.record["config"]["benchmark"]["cache_contents"])

    def test_every_mode_matched_one_full_pass_before_timing(self) -> None:
        modes = self.record["equivalence"]["modes"]
        self.assertEqual(sorted(modes), sorted(["hf-full", *MODES]))
        self.assertTrue(all(entry["within_tolerance"] for entry in modes.values()))

    def test_the_record_passes_its_own_consistency_check(self) -> None:
        self.check(self.record)

    def test_check_record_refuses_a_median_its_durations_do_not_give(self) -> None:
        self.assert_refused("cells[3].median_ns_per_step",
                            lambda r: r["cells"][3].update(median_ns_per_step=r["cells"][3]["median_ns_per_step"] / 2))

    def test_check_record_refuses_a_hand_edited_ratio_share_or_regime_naming_its_path(self) -> None:
        """The figures the views word instead of computing: each, edited, is refused at its own path."""
        edits = [("groups", 0, "best_over_hf_dynamic"), ("groups", 1, "compiled_over_prealloc"),
                 ("groups", 2, "kv_over_weights"), ("cells", 4, "step_over_higher_floor"), ("cells", 5, "spread"),
                 ("layout", "stored_step_ns"), ("layout", "rows", 0, "fastest_over_floor"),
                 ("profile", "modes", "ours-prealloc", "matrices_share"), ("equivalence", "modes", "hf-static", "bound"),
                 ("client", "ours_over_transformers"), ("variants", "threads", "bandwidth_ratio"),
                 ("llama", "contrast", "ratios", "weight_bytes"), ("kv_crossover", "full_context_sequences"),
                 ("activations", "logits", "share_of_weights")]
        for path in edits:
            with self.subTest(path=path):
                def tamper(record: dict[str, Any], path: tuple[Any, ...] = path) -> None:
                    parent = record
                    for key in path[:-1]:
                        parent = parent[key]
                    parent[path[-1]] *= 1.5
                self.assert_refused(f"field {path_text(path)} is ", tamper)
        flipped = {"memory": "overhead", "compute": "memory", "overhead": "memory"}
        self.assert_refused("cells[0].regime", lambda r: r["cells"][0].update(regime=flipped[r["cells"][0]["regime"]]),
                            "its quartiles against its group's two floors")
        self.assert_refused("groups[0].best_ours", lambda r: r["groups"][0].update(
            best_ours="ours-concat" if r["groups"][0]["best_ours"] != "ours-concat" else "ours-prealloc"))

    def test_only_a_quick_record_may_read_its_floor_from_a_buffer_the_cache_holds(self) -> None:
        """The quick run's floor reads a small buffer and says so; the same buffer in a full record is refused."""
        self.assertIs(self.record["config"]["benchmark"]["quick"], True)
        self.check(copy.deepcopy(self.record))  # accepted, whatever this machine's cache

        def as_full_run_on_a_large_cache(record: dict[str, Any]) -> None:
            record["config"]["benchmark"]["quick"] = False
            record["hardware"]["last_level_cache_bytes"] = record["hardware"]["buffer_bytes"]
        self.assert_refused("hardware.buffer_bytes", as_full_run_on_a_large_cache, "under 4 x the last-level cache")

    def test_check_record_refuses_a_floor_the_bandwidth_does_not_give(self) -> None:
        def tamper(record: dict[str, Any]) -> None:
            for entry in record["hardware"]["bandwidth"].values():
                entry["bytes_per_s"] *= 2
        self.assert_refused("hardware.bandwidth", tamper)

    def test_check_record_refuses_bytes_the_config_does_not_give(self) -> None:
        self.assert_refused("groups[0].bytes", lambda r: r["groups"][0]["bytes"].update(kv_read=1))

    def test_check_record_refuses_a_missing_cell_and_a_changed_latency(self) -> None:
        self.assert_refused("cells", lambda r: r["cells"].pop())
        self.assert_refused("client.modes.ours.ttft_ns", lambda r: r["client"]["modes"]["ours"].update(ttft_ns=1.0))

    def test_check_record_refuses_a_mode_outside_the_tolerance(self) -> None:
        self.assert_refused("equivalence.modes.hf-static.within_tolerance",
                            lambda r: r["equivalence"]["modes"]["hf-static"].update(within_tolerance=False))

    def test_check_record_refuses_a_tolerance_the_code_does_not_set(self) -> None:
        self.assert_refused("tolerance", lambda r: r["tolerance"].update(atol=1e-2))

    def test_check_record_refuses_too_few_bandwidth_passes_and_a_best_that_is_not_the_fastest(self) -> None:
        def few(record: dict[str, Any]) -> None:
            entry = record["hardware"]["bandwidth"]["1"]
            entry["passes"] = 9
            for kernel in entry["kernels"].values():
                kernel["durations_ns"] = kernel["durations_ns"][:9]
        self.assert_refused('hardware.bandwidth["1"].passes', few)

        def slow_best(record: dict[str, Any]) -> None:
            kernel = record["hardware"]["bandwidth"]["1"]["kernels"]["sum"]
            kernel["best_ns"] = max(kernel["durations_ns"])
        self.assert_refused('hardware.bandwidth["1"].kernels.sum.best_ns', slow_best)

        def slower_kernel_named(record: dict[str, Any]) -> None:
            entry = record["hardware"]["bandwidth"]["1"]
            slowest = min(entry["kernels"], key=lambda name: entry["kernels"][name]["bytes_per_s"])
            entry["best_kernel"] = slowest
        self.assert_refused('hardware.bandwidth["1"].best_kernel', slower_kernel_named)

    # NOTE: a step is held to the run's best read (the bound), not to the floor read beside its group (the price),
    # which a single pass can set lower or higher: these steps are made faster than the bound itself.
    def test_check_record_refuses_a_step_faster_than_its_floor(self) -> None:
        def beaten(record: dict[str, Any]) -> None:
            cell = record["cells"][0]
            group = next(g for g in record["groups"] if all(g[k] == cell[k] for k in ("dtype", "threads", "batch", "context")))
            bound = group["bytes"]["total"] / record["hardware"]["bandwidth"][str(cell["threads"])]["bytes_per_s"] * 1e9
            cell["durations_ns"] = [int(bound * 0.9)] + cell["durations_ns"][1:]
        self.assert_refused("cells[0].durations_ns", beaten, "under its memory floor")

    def test_check_record_refuses_a_llama_step_faster_than_its_floor(self) -> None:
        def beaten(record: dict[str, Any]) -> None:
            cell = record["llama"]["cells"][1]
            group = next(g for g in record["llama"]["groups"] if (g["threads"], g["context"]) == (cell["threads"], cell["context"]))
            weights = "bytes" if LLAMA_WEIGHTS[cell["mode"]] == "float32" else "int8_bytes"
            bound = group[weights]["total"] / record["hardware"]["bandwidth"][str(cell["threads"])]["bytes_per_s"] * 1e9
            cell["durations_ns"] = [int(bound * 0.9)] + cell["durations_ns"][1:]
        self.assert_refused("llama.cells[1].durations_ns", beaten, "under its memory floor")

    def test_check_record_refuses_a_llama_step_that_disagreed_with_transformers(self) -> None:
        def missed(record: dict[str, Any]) -> None:
            record["llama"]["equivalence"][0]["max_abs_diff"] = 0.5
        self.assert_refused("llama.equivalence[0].max_abs_diff", missed, "never timed")
        self.assert_refused("llama.tolerance", lambda r: r["llama"]["tolerance"].update(atol=1e-2))
        self.assert_refused("llama.equivalence", lambda r: r["llama"]["equivalence"].pop())

    def test_check_record_refuses_a_fast_llama_mode_that_disagreed_or_a_kernel_the_table_did_not_pick(self) -> None:
        def missed(record: dict[str, Any]) -> None:
            record["llama"]["equivalence"][0]["fast"]["ours-fused-compiled"]["max_abs_diff"] = 0.5
        self.assert_refused("llama.equivalence[0].fast.ours-fused-compiled.max_abs_diff", missed, "never timed")
        self.assert_refused("llama.equivalence[0].fast",
                            lambda r: r["llama"]["equivalence"][0]["fast"].pop("ours-fused"))

        for chosen in KERNEL_SETS:
            def slower_kernel(record: dict[str, Any], chosen: str = chosen) -> None:
                row = record["llama"]["kernels"]["rows"][0]
                row["kernels"][record["llama"]["kernels"]["chosen"][chosen][row["kind"]]]["ns"] = 1e12
            # the first set found to name it is refused (the float32 sets often share their choice)
            self.assert_refused("llama.kernels.chosen.", slower_kernel, f".{MATRIX_KINDS[0]} is ")

    def test_check_record_refuses_an_int8_quality_entry_that_cannot_be_true(self) -> None:
        def self_divergent(record: dict[str, Any]) -> None:
            record["llama"]["quality"]["scores"]["float32"]["kl"][0] = 0.1
        self.assert_refused("llama.quality.scores.float32", self_divergent, "differs from itself")

        def short(record: dict[str, Any]) -> None:
            record["llama"]["quality"]["scores"]["int8"]["nll"].pop()
        self.assert_refused("llama.quality.scores.int8.nll", short, "one per position")

        def beyond(record: dict[str, Any]) -> None:
            record["llama"]["quality"]["scores"]["int8"]["top1_misses"] = [record["llama"]["quality"]["positions"]]
        self.assert_refused("llama.quality.scores.int8.top1_misses", beyond, "ascending positions")

    def test_check_record_refuses_llama_groups_out_of_rotation_or_short_of_repetitions(self) -> None:
        self.assert_refused("llama.groups[0].order", lambda r: r["llama"]["groups"][0]["order"].reverse())
        self.assert_refused("llama.cells[2].durations_ns", lambda r: r["llama"]["cells"][2]["durations_ns"].pop())
        self.assert_refused("llama.cells", lambda r: r["llama"]["cells"].pop())

    def test_check_record_refuses_a_llama_verdict_its_medians_do_not_give(self) -> None:
        def swapped(record: dict[str, Any]) -> None:
            group = record["llama"]["groups"][0]
            group["faster"] = "hf-dynamic" if group["faster"] == "ours-prealloc" else "ours-prealloc"
        self.assert_refused("llama.groups[0].faster", swapped, "its two cells' medians")

    def test_the_trained_views_show_the_recorded_llama_figures(self) -> None:
        record = self.record
        section = record["llama"]
        table = self.page("trained", record)
        for cell in section["cells"]:
            self.assertIn(f"{cell['step_over_floor']:.2f}×", table)
        for group in section["groups"]:
            self.assertIn(f"{group['best_over_transformers']:.2f}×", table)
        self.assertIn("<svg", self.page("trained-bytes", record))
        contrast = self.page("trained-contrast", record)
        self.assertIn(f"{section['model']['vocab_size']:,} × {section['model']['width']}", contrast)
        kernels = self.page("trained-kernels", record)
        for row in section["kernels"]["rows"]:
            for chosen in section["kernels"]["chosen"].values():
                self.assertIn(chosen[row["kind"]], kernels)
        self.assertIn(section["weights"]["name"], self.page("key-results", record))

    def test_check_record_refuses_a_layout_measured_in_a_dtype_the_run_did_not_time(self) -> None:
        def tamper(record: dict[str, Any]) -> None:
            layout = record["layout_other_dtypes"].pop("bfloat16")
            record["layout_other_dtypes"]["float16"] = {**layout, "dtype": "float16"}
        self.assert_refused("layout_other_dtypes.float16", tamper)

    def test_check_record_refuses_fault_counts_that_do_not_match_the_repetitions(self) -> None:
        self.assert_refused("cells[2].minor_faults", lambda r: r["cells"][2]["minor_faults"].pop())

    def test_check_record_refuses_a_batch_layout_the_grid_did_not_ask_for(self) -> None:
        self.assert_refused("layout_batches", lambda r: r["layout_batches"].clear())
        self.assert_refused("layout", lambda r: r["layout"].update(batch=2))

    def test_the_batches_view_sets_each_batchs_multiplies_against_batch_one(self) -> None:
        record = copy.deepcopy(self.record)
        first, *larger = [record["layout"], *record["layout_batches"]]
        self.assertTrue(larger, "the quick grid has a batch above 1")
        for row in larger[-1]["rows"]:  # the largest batch: every multiply three times its batch-1 time
            batch_one = next(r for r in first["rows"] if r["kind"] == row["kind"])
            row["in_out_ns"], row["out_in_ns"] = 3 * batch_one["in_out_ns"], 3 * batch_one["out_in_ns"]
        html = self.page("batches", self.rederived(record))
        self.assertIn(f"to batch {larger[-1]['batch']} the weight multiplies went from", html)
        self.assertIn("(3.00×) for the same bytes", html)

    def test_the_profile_view_blames_page_faults_only_when_the_profiled_step_took_more(self) -> None:
        record = copy.deepcopy(self.record)
        profile = record["profile"]
        cells = formulas.cell_table(record)
        for mode in ("ours-prealloc", "hf-dynamic"):
            timed = cells[(profile["dtype"], profile["threads"], profile["batch"], profile["context"], mode)]
            timed["minor_faults"] = [10] * len(timed["minor_faults"])
            profile["modes"][mode]["minor_faults"] = [10] * len(profile["modes"][mode]["minor_faults"])
        profile["modes"]["hf-dynamic"]["minor_faults"] = [5000] * len(profile["modes"]["hf-dynamic"]["minor_faults"])
        html = self.page("profile", self.rederived(record))
        self.assertIn("hf-dynamic step took 5,000 minor page faults", html)
        self.assertIn("freshly mapped", html)
        profile["modes"]["hf-dynamic"]["minor_faults"] = [10] * len(profile["modes"]["hf-dynamic"]["minor_faults"])
        self.assertNotIn("freshly mapped", self.page("profile", self.rederived(record)))

    def test_the_noise_sentence_counts_the_cells_whose_repetitions_spread_widely(self) -> None:
        record = copy.deepcopy(self.record)
        for cell in record["cells"]:  # every repetition of a cell alike, but one cell's last twice as long
            cell["durations_ns"] = [cell["median_ns_per_step"]] * len(cell["durations_ns"])
        record["cells"][0]["durations_ns"][-1] *= 2
        html = self.page("comparison", self.rederived(record))
        self.assertIn(f"1 of {len(record['cells'])} cells spread more than 25%", html)

    def test_the_floor_view_names_the_cells_where_arithmetic_is_the_higher_floor(self) -> None:
        record = copy.deepcopy(self.record)
        for group in record["groups"]:
            group["compute_floor_ns_per_step"] = group["floor_ns_per_step"] * (2 if group["batch"] > 1 else 0.5)
        html = self.page("floor", record)
        self.assertIn("The arithmetic floor is the higher of the two at batch", html)
        self.assertIn("At batch 1 the memory floor is the higher in every cell", html)
        for group in record["groups"]:
            group["compute_floor_ns_per_step"] = group["floor_ns_per_step"] / 2
        self.assertIn("every step here is bound by the bytes", self.page("floor", record))

    def test_the_equivalence_sentence_follows_the_records_flags(self) -> None:
        html = self.page("decode-equivalence", self.record)
        self.assertIn("6 of 6 modes", html)
        self.assertIn("agreed with the reference at every position for all 6", html)
        record = copy.deepcopy(self.record)
        record["equivalence"]["modes"]["hf-static"]["argmax_agrees_every_step"] = False
        html = self.page("decode-equivalence", record)
        self.assertIn("for 5 of 6; hf-static chose another token", html)
        self.assertNotIn("for all 6", html)

    def test_the_wall_time_is_the_records_and_no_target_is_named(self) -> None:
        record = copy.deepcopy(self.record)
        for seconds, said in ((120.4, "took 120 s."), (301.0, "took 301 s.")):
            record["wall_time_s"] = seconds
            html = self.page("batch-one", record)
            self.assertIn(said, html)
            self.assertNotIn("target", html)

    def test_the_floor_view_sizes_the_activations_from_the_config(self) -> None:
        record = self.record
        model, bench = record["config"]["model"], record["config"]["benchmark"]
        batch = max(bench["batches"])
        logits = batch * model["vocab_size"] * BYTES_PER_ELEMENT[bench["dtype"]]
        html = self.page("floor", record)
        self.assertIn(f"{logits:,} bytes", html)
        self.assertIn("Activations are not counted", html)

    def test_the_profile_view_compares_each_total_with_its_timed_median(self) -> None:
        record = copy.deepcopy(self.record)
        profile = record["profile"]
        key = (profile["dtype"], profile["threads"], profile["batch"], profile["context"])
        cells = formulas.cell_table(record)
        for mode, scale in (("ours-prealloc", 1.5), ("hf-dynamic", 0.5)):  # every profiled row scaled alike
            entry = profile["modes"][mode]
            factor = cells[(*key, mode)]["median_ns_per_step"] * scale / entry["total_ns_per_step"]
            for row in entry["rows"]:
                row["ns_per_step"] *= factor
        html = self.page("profile", self.rederived(record))
        self.assertIn("(1.50×) more than its timed median", html)
        self.assertIn("shares of a profiled step", html)
        self.assertIn("less than its timed median", html)

    def test_the_bfloat16_sentences_follow_the_lead_and_the_layout_measurement(self) -> None:
        record = copy.deepcopy(self.record)
        bench = record["config"]["benchmark"]
        for cell in record["cells"]:
            if cell["threads"] == bench["threads"] and cell["batch"] == 1 and cell["mode"] != "hf-dynamic":
                hf = formulas.cell_table(record)[(cell["dtype"], cell["threads"], 1, cell["context"], "hf-dynamic")]
                scale = 0.7 if cell["dtype"] == "float32" else 0.9  # ours loses part of its lead in bfloat16
                cell["durations_ns"] = [hf["median_ns_per_step"] * scale] * len(cell["durations_ns"])
        html = self.page("variants", self.rederived(record))
        contexts = len(bench["contexts"])
        self.assertIn("0.70× hf-dynamic&#39;s step in float32 and 0.90× in bfloat16", html)
        self.assertIn(f"shrinks in bfloat16 at every one of the {contexts} cells", html)
        self.assertIn("taken in both dtypes", html)
        del record["layout_other_dtypes"]
        record["layout_batches_other_dtypes"] = {}
        html = self.page("variants", self.rederived(record))
        self.assertIn("ran in float32 only", html)

    def test_the_two_thread_sentence_states_the_measured_bandwidth_gain(self) -> None:
        record = self.record
        bandwidth = record["hardware"]["bandwidth"]
        gain = bandwidth["2"]["bytes_per_s"] / bandwidth["1"]["bytes_per_s"]
        html = self.page("variants", record)
        self.assertIn(f"{bandwidth['2']['bytes_per_s'] / 1e9:.1f} GB/s against", html)
        self.assertIn(f"{'+' if gain >= 1 else '−'}{abs(gain - 1) * 100:.0f}%", html)

    def test_every_view_renders_and_shows_the_recorded_figures(self) -> None:
        record = self.record
        pages = {name: self.page(name, record) for name in decode_bandwidth_views.VIEWS}
        self.assertIn("<svg", pages["roofline"])
        first = record["cells"][0]
        self.assertIn(f"{first['median_ns_per_step'] / 1e6:.3f}", pages["comparison"])
        ours = record["client"]["modes"]["ours"]
        self.assertIn(f"{ours['tokens_per_s']:.1f}", pages["client"])
        self.assertIn(f"{record['kv_crossover']['batch_x_context']:,.0f}", pages["floor"])

    def test_views_escape_text_from_the_record(self) -> None:
        record = copy.deepcopy(self.record)
        record["config"]["benchmark"]["cache_contents"] = "<script>alert(1)</script>"
        html = self.page("comparison", record)
        self.assertNotIn("<script>", html)
        self.assertIn("&lt;script&gt;", html)

    def test_headline_ratios_are_finite_and_recomputed_from_the_cells(self) -> None:
        record = self.record
        ratios = decode_bandwidth_views.headline(record)
        self.assertTrue(2 <= len(ratios) <= 5)
        self.assertTrue(all(math.isfinite(value) and value > 0 for _, value in ratios))
        cells = formulas.cell_table(record)
        long = record["config"]["benchmark"]["contexts"][-1]
        best = min(cells[("float32", 1, 1, long, m)]["median_ns_per_step"] for m in OURS)  # whichever won
        self.assertAlmostEqual(ratios[0][1], best / cells[("float32", 1, 1, long, "hf-dynamic")]["median_ns_per_step"])

    def test_client_figures_follow_the_token_times(self) -> None:
        runs = [[100, 250, 330, 600], [90, 200, 260, 500]]
        self.assertEqual(percentile([1, 2, 3, 4], 0.5), 2.5)
        summary = formulas.client_summary(runs, 4)
        self.assertEqual(summary["ttft_ns"], 95.0)  # median of the first stamps
        self.assertEqual(summary["itl_p50_ns"], 130.0)  # gaps 150, 80, 270, 110, 60, 240 pooled
        self.assertAlmostEqual(summary["tokens_per_s"], 4 / 550 * 1e9)  # median run ends at 550 ns


class TheClockTimesOnlyTheStep(unittest.TestCase):
    def test_each_modes_step_leaves_the_rewind_to_its_reset(self) -> None:
        model = tiny_model()
        reference = hf_model(model)
        context = 12
        real_hf, real_ours = workloads.rewind, PreallocatedCache.rewind
        with mock.patch.object(workloads, "rewind", side_effect=real_hf) as hf_rewind, \
                mock.patch.object(PreallocatedCache, "rewind", autospec=True, side_effect=real_ours) as ours_rewind, \
                torch.inference_mode():
            runners = workloads.step_runners(model, CompiledDecoder.of(model), reference, 1, context,
                                             torch.Generator().manual_seed(0))
            for mode, (step, reset) in runners.items():
                with self.subTest(mode=mode):
                    hf_rewind.reset_mock()
                    ours_rewind.reset_mock()
                    step()
                    self.assertEqual((hf_rewind.call_count, ours_rewind.call_count), (0, 0))
                    reset()
                    calls = hf_rewind.call_args_list + ours_rewind.call_args_list
                    self.assertEqual(len(calls), 0 if mode == "ours-concat" else 1)
                    self.assertTrue(all(call.args[-1] == context - 1 for call in calls))
            self.assertEqual(sorted(runners), sorted(MODES))

    def test_time_group_runs_every_reset_after_the_clock_stops(self) -> None:
        events: list[str] = []
        runners = {mode: (lambda m=mode: events.append(f"step {m}"), lambda m=mode: events.append(f"reset {m}"))
                   for mode in MODES}

        def clock(work: Any) -> int:
            events.append("start")
            work()
            events.append("stop")
            return 1

        args = argparse.Namespace(repeats=2, warmup=1)
        with mock.patch.object(benchmark.bench, "time_ns", side_effect=clock), \
                contextlib.redirect_stderr(io.StringIO()):
            progress = harness.Progress(2)
            try:
                benchmark.time_group(runners, args, progress, "test")
            finally:
                progress.close()
        inside = False
        for event in events:
            inside = {"start": True, "stop": False}.get(event, inside)
            if event.startswith("reset"):
                self.assertFalse(inside, events)
        self.assertEqual(events.count("start"), len(MODES) * 3)
        self.assertEqual(sum(e.startswith("reset") for e in events), len(MODES) * 3)
        self.assertIn("untimed", benchmark.TIMER)


# Small settings spelled out (not --quick, whose preset would override the one under test): if a check
# ever failed to refuse, the run would still be short.
SMALL = ["--compile-cache", "reuse", "--preset", "tiny", "--batches", "1", "--contexts", "16", "--variant-threads", "0", "--variant-dtype", "none",
         "--repeats", "1", "--equivalence-prefix", "4", "--equivalence-steps", "1", "--prompt", "4",
         "--new-tokens", "2", "--client-runs", "1", "--profile-steps", "1", "--llama-preset", "tiny"]


class RecordSurvivesFailures(labkit.testing.ExistingRecordTest):
    def refused(self, *argv: str) -> str:
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertRaises(SystemExit) as caught:
            benchmark.main(["--output", str(self.path), *SMALL, *argv])
        self.assertEqual(caught.exception.code, 2)
        self.assertEqual(self.path.read_bytes(), self.PREVIOUS)
        lines = stderr.getvalue().strip().splitlines()
        self.assertEqual(len(lines), 1, lines)
        return lines[0]

    def test_bad_input_fails_in_one_line_naming_the_value_before_any_measurement(self) -> None:
        cases = {
            ("--preset", "gpt5"): "'gpt5' is unknown",
            ("--preset", "gpt2-small", "--contexts", "128", "1025"): "1025 positions, beyond the 1024",
            ("--batches", "0"): "got 0",
            ("--threads", "0"): "got 0",
            ("--device", "tpu"): "'tpu'",
            ("--dtype", "int8"): "'int8' is not one of",
            ("--llama-preset", "llama9"): "--llama-preset 'llama9' is unknown",
            ("--preset", "gpt2-small", "--contexts", "128"): "128 positions, beyond the 64 of --llama-preset tiny",
        }
        for argv, fragment in cases.items():
            with self.subTest(argv=argv):
                line = self.refused(*argv)
                self.assertIn("error:", line)
                self.assertIn(fragment, line)

    def test_an_unavailable_cuda_device_is_refused_before_any_measurement(self) -> None:
        with mock.patch.object(torch.cuda, "is_available", return_value=False):
            self.assertIn("no CUDA device", self.refused("--device", "cuda"))

    def test_a_dtype_the_device_cannot_run_is_refused(self) -> None:
        with mock.patch.object(torch.Tensor, "softmax", side_effect=RuntimeError("not implemented for 'BFloat16'")):
            self.assertIn("cannot run on cpu", self.refused("--dtype", "bfloat16"))

    def test_a_decoder_that_disagrees_with_transformers_stops_the_run_and_writes_nothing(self) -> None:
        stderr = io.StringIO()
        with mock.patch.object(benchmark, "Decoder", PositionResetDecoder), contextlib.redirect_stderr(stderr):
            code = benchmark.main(["--quick", "--output", str(self.path)])
        self.assertEqual(code, 2)
        self.assertIn("differs from one full pass", stderr.getvalue())
        self.assertNotIn("repetition", stderr.getvalue())
        self.assert_untouched(stderr.getvalue())


if __name__ == "__main__":
    unittest.main()
