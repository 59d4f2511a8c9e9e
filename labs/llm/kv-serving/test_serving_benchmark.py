"""The benchmark's quick run: a schema-valid, self-consistent record; a failed run keeps the previous one."""

from __future__ import annotations

import copy
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Callable
from typing import Any, ClassVar
from unittest import mock

import kv_serving_views
from kv_serving import benchmark, figures, trained_load
from kv_serving.figures.formulas import policy
from kv_serving.launch import log_text, serving_url
from kv_serving.testing import BFLOAT16_WINS, FLOAT32_WINS, despite_stalls_sync
from labkit.figures import check_record, fill
from labkit.records import JsonPath, RecordError, load_record, path_text
from labkit.testing import ExistingRecordTest, QuickBenchmarkRun, quick_run, run_quietly
from labkit.waiting import HANG_S, communicate, read_until_closed
from llm_models.serving.dtypes import CHOSEN_BY_SUPPLIED_PROBES, TOLERANCES, TRAINED_TOLERANCES, tie_bound
from site_hooks.blocks import render_block

SCHEMA = benchmark.ROOT / benchmark.LAB.schema


def check(record: dict[str, Any], source: str) -> None:
    """The site's check of this lab's record: its invariants, then every derived figure."""
    check_record(record, source, figures.check_invariants, figures.derive)


def rederived(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every derived figure recomputed from its (edited) raw data, as the benchmark stores them."""
    fill(record, figures.derive(record))
    return record


def rendered(name: str, record: dict[str, Any]) -> str:
    """A section's view, with its worded detail (placed in the page's appendix) where it has one."""
    views = kv_serving_views.VIEWS
    return "".join(render_block(views[n](record)) for n in (name, f"{name}-detail") if n in views)


class QuickRun(QuickBenchmarkRun):
    main = staticmethod(benchmark.main)
    schema = SCHEMA
    main_kwargs: ClassVar[dict[str, Any]] = {"dtype_probes": FLOAT32_WINS}  # float32 wins here, whatever this CPU

    def test_quick_record_holds_every_experiment_and_passes_its_own_consistency_check(self) -> None:
        record = self.record
        check(record, "quick record")
        self.assertEqual([p["name"] for p in record["admission"]["policies"]],
                         ["kv_budget_bytes", "count_safe", "count_average"])
        self.assertEqual([m["honor_disconnect"] for m in record["cancellation"]["modes"]], [True, False])
        self.assertEqual(record["targets"]["blocks_leaked_after_cancellation"], 0)
        self.assertTrue(record["targets"]["bytes_peak_within_budget"])
        headline = kv_serving_views.headline(record)
        self.assertEqual(len(headline), 4)  # the trained model's batched over one at a time, then the random model's
        self.assertEqual(headline[0][1], record["trained"]["speedup_over_serial"])

    def test_the_quick_record_times_a_clients_gaps_between_tokens_in_rounds_with_the_step_in_process(self) -> None:
        client = self.record["trained"]["client_steps"]
        self.assertEqual([(row["weights"], row["context"]) for row in client["rows"]],
                         [(weights, context) for weights in ("float32", "int8")
                          for context in trained_load.QUICK_SOLO_CONTEXTS])  # int8: the float32 run's own codes
        self.assertEqual(client["server"], trained_load.CLIENT_SERVERS)
        for row in client["rows"]:
            self.assertEqual(len(row["in_process_ns"]), client["rounds"])
            self.assertTrue(all(len(steps) == client["tokens"] - 1 for steps in row["in_process_ns"]))
            self.assertTrue(all(2 <= len(gaps) <= client["tokens"] - 1 for gaps in row["client_gaps_ns"]))
            self.assertEqual(row["paired"]["rounds"], client["rounds"])

    def test_the_quick_record_reads_resident_memory_over_the_quick_lengths_on_the_trained_model(self) -> None:
        memory = self.record["memory"]  # on Linux: /proc/self/status (no section where it is missing)
        self.assertEqual(memory["lengths"], benchmark.memory_lengths(quick=True))
        self.assertEqual(len(memory["rss_bytes"]), len(memory["lengths"]))
        self.assertEqual(memory["window_prompts"], benchmark.MEMORY_QUICK_WINDOW)
        self.assertEqual(memory["threads"], self.record["config"]["benchmark"]["threads"])

    def test_ignoring_disconnects_decodes_for_departed_clients_and_honouring_them_drops_at_most_a_row_each(self) -> None:
        honoured, ignored = (m["server"] for m in self.record["cancellation"]["modes"])
        self.assertEqual(honoured["tokens_after_disconnect"], 0)
        self.assertLessEqual(honoured["rows_dropped"], honoured["cancelled"])
        self.assertEqual(honoured["rows_dropped"], honoured["decode_rows"] + honoured["prefills"]
                         - honoured["tokens_generated"])
        # How many of those rows came after a client left depends on how far the server ran ahead of its readers
        # on this host (none, if it finished before they left); that every departed request ran to its end does not.
        self.assertEqual(ignored["tokens_after_disconnect"],
                         ignored["decode_rows_after_disconnect"] + ignored["prefills_after_disconnect"])
        self.assertEqual(ignored["completed"], ignored["submitted"])  # ran every departed request to the end

    def test_every_rate_runs_on_its_own_server_and_keeps_its_occupancy_timeline(self) -> None:
        rates = self.record["rates"]
        for run in [*rates["points"], rates["serial"]]:
            self.assertEqual(run["server"]["submitted"], run["summary"]["requests"])  # nothing from other runs
            self.assertGreater(len(run["occupancy"]), 0)
            self.assertLessEqual(max(s["used_blocks"] for s in run["occupancy"]), run["server"]["peak_used_blocks"])
        self.assertEqual(self.record["targets"]["wall_time_met"],
                         self.record["wall_time_s"] <= self.record["targets"]["wall_time_limit_s"])

    # ---- check_record refuses each kind of hand edit the record contradicts ----
    def assert_refused(self, path: str, change: Callable[[dict[str, Any]], None]) -> None:
        record = copy.deepcopy(self.record)
        change(record)
        with self.assertRaisesRegex(RecordError, re.escape(path)):
            check(record, "edited")

    def test_check_record_refuses_a_hand_edited_ratio_share_or_verdict_the_views_read(self) -> None:
        """The figures the views word instead of computing: each, edited, is refused at its own path."""
        edits: list[JsonPath] = [
            ("step_scaling", "growth"), ("step_times", 0, "weights_share"), ("step_times", 1, "rest_ns"),
            ("rates", "points", 0, "over_serial"), ("rates", "serial", "server", "stalled_gap_s"),
            ("rates", "points", 1, "busy_share"), ("admission", "policies", 0, "mean_used_share"),
            ("admission", "occupancy_bytes_over_safe"), ("admission", "longest_request_bytes"),
            ("cancellation", "modes", 1, "tokens_unread"), ("cancellation", "tokens_before_noticed"),
            ("config", "benchmark", "dtype_choice", "probes", "float32", "median_ns")]
        for path in edits:
            def change(record: dict[str, Any], path: JsonPath = path) -> None:
                parent = record
                for key in path[:-1]:
                    parent = parent[key]
                parent[path[-1]] = parent[path[-1]] * 1.5 + 1
            with self.subTest(path=path):
                self.assert_refused(f"field {path_text(path)} is ", change)
        regimes = {"flat": "shared", "shared": "per-row", "per-row": "flat", "unresolved": "flat"}
        self.assert_refused("$.step_scaling.regime", lambda r: r["step_scaling"].update(
            regime=regimes[r["step_scaling"]["regime"]]))

    def test_check_record_refuses_failed_for_memory_that_the_failed_request_rows_contradict(self) -> None:
        self.assert_refused("$.admission.policies[0].server.failed_for_memory",
                            lambda r: r["admission"]["policies"][0]["server"].update(failed_for_memory=2))

    def test_check_record_refuses_a_peak_below_what_the_occupancy_samples_saw(self) -> None:
        def lower(record: dict[str, Any]) -> None:
            run = record["rates"]["points"][0]
            run["server"]["peak_used_blocks"] = max(s["used_blocks"] for s in run["occupancy"]) - 1
        self.assert_refused("$.rates.points[0].server.peak_used_blocks", lower)

    def test_check_record_refuses_tokens_generated_that_the_clients_tokens_contradict(self) -> None:
        def inflate(record: dict[str, Any]) -> None:  # identity kept: rows_dropped edited along
            server = record["admission"]["policies"][0]["server"]
            server.update(tokens_generated=server["tokens_generated"] - 3, rows_dropped=server["rows_dropped"] + 3)
        self.assert_refused("$.admission.policies[0].server.tokens_generated", inflate)

    def test_check_record_refuses_a_dropped_row_count_the_row_arithmetic_contradicts(self) -> None:
        # one more than the rows arithmetic gives: a contradiction however many rows this host's run dropped (a
        # host that finished every request before its client left drops none, so 0 would be no edit)
        def one_more(record: dict[str, Any]) -> None:
            server = record["cancellation"]["modes"][0]["server"]
            server.update(rows_dropped=server["rows_dropped"] + 1)
        self.assert_refused("$.cancellation.modes[0].server.rows_dropped", one_more)

    def test_check_record_refuses_tokens_after_disconnect_the_departed_rows_contradict(self) -> None:
        def one_more(record: dict[str, Any]) -> None:  # as above: 0 may be what this host measured
            server = record["cancellation"]["modes"][1]["server"]
            server.update(tokens_after_disconnect=server["tokens_after_disconnect"] + 1)
        self.assert_refused("$.cancellation.modes[1].server.tokens_after_disconnect", one_more)

    def test_check_record_refuses_an_honoured_server_dropping_more_rows_than_it_cancelled(self) -> None:
        def fewer(record: dict[str, Any]) -> None:
            server = record["cancellation"]["modes"][0]["server"]
            server["cancelled"] = server["rows_dropped"] - 1
        self.assert_refused("$.cancellation.modes[0].server.rows_dropped", fewer)

    def test_check_record_refuses_decode_rows_and_mean_batch_the_clients_tokens_contradict(self) -> None:
        def inflate(record: dict[str, Any]) -> None:
            server = record["rates"]["points"][0]["server"]
            server["decode_rows"] += 5
            server["mean_batch"] = server["decode_rows"] / server["decode_steps"]
        self.assert_refused("$.rates.points[0].server.decode_rows", inflate)

    def test_check_record_refuses_a_mean_batch_that_is_not_rows_over_steps(self) -> None:
        self.assert_refused("$.rates.points[1].server.mean_batch",
                            lambda r: r["rates"]["points"][1]["server"].update(mean_batch=32.0))

    def test_check_record_refuses_a_pool_size_the_servers_did_not_report(self) -> None:
        def grow(record: dict[str, Any]) -> None:
            config = record["config"]["benchmark"]
            config.update(num_blocks=config["num_blocks"] * 2, pool_bytes=config["pool_bytes"] * 2,
                          byte_budget_blocks=int(config["num_blocks"] * 2 * config["byte_budget_share"]))
            record["admission"]["pool_blocks"] = config["num_blocks"]
        self.assert_refused("$.admission.policies[0].server.num_blocks", grow)
        self.assert_refused("$.rates.points[0].server.num_blocks",
                            lambda r: r["config"]["benchmark"].update(sweep_blocks=r["config"]["benchmark"]["sweep_blocks"] + 1))

    def test_byte_admission_ran_with_a_budget_below_its_pool_and_stayed_within_it(self) -> None:
        config = self.record["config"]["benchmark"]
        server = policy(self.record, "kv_budget_bytes")["server"]
        self.assertEqual(server["budget_blocks"], int(config["num_blocks"] * benchmark.BYTE_BUDGET_SHARE))
        self.assertLess(server["budget_blocks"], server["num_blocks"])
        self.assertLessEqual(server["peak_used_blocks"], server["budget_blocks"])
        for name in ("count_safe", "count_average"):  # the count limits keep the whole pool
            self.assertEqual(policy(self.record, name)["server"]["budget_blocks"], config["num_blocks"])

    def test_check_record_refuses_a_byte_budget_that_is_not_the_configured_share_of_the_pool(self) -> None:
        def widen(record: dict[str, Any]) -> None:
            config = record["config"]["benchmark"]
            config["byte_budget_blocks"] += 1
        self.assert_refused("$.config.benchmark.byte_budget_blocks", widen)

    def test_check_record_refuses_a_byte_budget_as_large_as_the_pool(self) -> None:
        def whole(record: dict[str, Any]) -> None:
            config = record["config"]["benchmark"]
            config.update(byte_budget_share=1.0, byte_budget_blocks=config["num_blocks"])
        self.assert_refused("$.config.benchmark.byte_budget_blocks", whole)

    def test_check_record_refuses_a_server_budget_other_than_the_configured_one(self) -> None:
        def budget(index: int, key: str) -> Callable[[dict[str, Any]], None]:
            def edit(record: dict[str, Any]) -> None:  # the server and its /metrics samples edited alike
                run, blocks = record["admission"]["policies"][index], record["config"]["benchmark"][key]
                run["server"]["budget_blocks"] = blocks
                for sample in run["occupancy"]:
                    sample["budget_blocks"] = blocks
            return edit
        self.assert_refused("$.admission.policies[0].server.budget_blocks", budget(0, "num_blocks"))
        self.assert_refused("$.admission.policies[1].server.budget_blocks", budget(1, "byte_budget_blocks"))

    def test_check_record_refuses_a_weights_median_its_timings_contradict(self) -> None:
        self.assert_refused("$.step_times[0].weights.median_ns",
                            lambda r: r["step_times"][0]["weights"].update(median_ns=1.0))

    def test_check_record_refuses_a_serial_run_at_another_rate_than_the_sweeps_highest(self) -> None:
        self.assert_refused("$.rates.serial.rate", lambda r: r["rates"]["serial"].update(rate=0.5))

    def test_check_record_refuses_a_serial_server_that_ran_two_requests_at_once(self) -> None:
        self.assert_refused("$.rates.serial.server.peak_running",
                            lambda r: r["rates"]["serial"]["server"].update(peak_running=2))

    def test_the_model_runs_in_the_dtype_whose_weight_multiplies_were_faster_gated_with_its_tolerance(self) -> None:
        record = self.record
        choice, dtype = record["config"]["benchmark"]["dtype_choice"], record["config"]["model"]["dtype"]
        medians = {name: statistics.median(probe["durations_ns"]) for name, probe in choice["probes"].items()}
        self.assertEqual(sorted(medians), ["bfloat16", "float32"])
        self.assertEqual(dtype, min(medians, key=lambda name: medians[name]))
        self.assertEqual(record["tolerance"], TOLERANCES[dtype])

    def test_check_record_refuses_a_dtype_choice_its_probes_or_its_model_contradict(self) -> None:
        def slower(record: dict[str, Any]) -> None:
            choice = record["config"]["benchmark"]["dtype_choice"]
            other = next(name for name in choice["probes"] if name != choice["chosen"])
            choice["probes"][other]["durations_ns"] = [1] * len(choice["probes"][other]["durations_ns"])
        self.assert_refused("$.config.benchmark.dtype_choice.chosen", slower)

        def other_tolerance(record: dict[str, Any]) -> None:
            other = next(name for name in TOLERANCES if name != record["config"]["model"]["dtype"])
            record["tolerance"] = dict(TOLERANCES[other])
        self.assert_refused("$.tolerance", other_tolerance)

    def test_check_record_refuses_a_failed_equivalence_gate(self) -> None:
        self.assert_refused("$.equivalence.within_tolerance", lambda r: r["equivalence"].update(within_tolerance=False))

    def test_check_record_refuses_token_verdicts_the_ties_contradict_and_ties_rounding_cannot_explain(self) -> None:
        def wide_tie(record: dict[str, Any]) -> None:
            gate, tolerance = record["equivalence"], record["tolerance"]
            bound = tie_bound(tolerance, gate["max_abs_reference"])
            gate.update(tokens_identical=False, ties=[{"request": 0, "step": 3, "margin": 1.5 * bound}])
        self.assert_refused("$.equivalence.ties[0].margin", wide_tie)
        flipped = not self.record["equivalence"]["tokens_identical"]
        self.assert_refused("$.equivalence.tokens_identical",
                            lambda r: r["equivalence"].update(tokens_identical=flipped))

    def test_check_record_refuses_inter_token_percentiles_out_of_order_or_beyond_the_requests_spans(self) -> None:
        def disorder(record: dict[str, Any]) -> None:
            itl = record["rates"]["points"][0]["summary"]["itl_s"]
            itl["p90"] = itl["p50"] / 2
        self.assert_refused("$.rates.points[0].summary.itl_s.p90", disorder)

        def stretch(record: dict[str, Any]) -> None:
            itl = record["rates"]["points"][0]["summary"]["itl_s"]
            itl["mean"] *= 1000
        self.assert_refused("$.rates.points[0].summary.itl_s.mean", stretch)

    def test_check_record_refuses_a_wall_time_verdict_the_wall_time_contradicts(self) -> None:
        self.assert_refused("$.targets.wall_time_met",
                            lambda r: r["targets"].update(wall_time_met=not r["targets"]["wall_time_met"]))
        self.assert_refused("$.targets.wall_time_s", lambda r: r["targets"].update(wall_time_s=1.0))

    def test_pool_and_checks_views_word_their_verdicts_from_the_record(self) -> None:
        record = copy.deepcopy(self.record)
        record["equivalence"].update(tokens_identical=False, within_tolerance=False,
                                     ties=[{"request": 1, "step": 4, "margin": 0.0078}])
        record["targets"].update(wall_time_s=301.0, wall_time_met=False)
        pool = rendered("pool", record)
        self.assertIn("alone would have chosen another token at 1 step", pool)
        record["equivalence"].update(tokens_identical=True, ties=[])
        self.assertIn("every greedy choice was the same", rendered("pool", record))
        self.assertIn("beyond atol", pool)
        checks = rendered("checks", record)
        self.assertIn("<td>301 s</td>", checks)
        for planned in ("target", "aims for", "not met"):
            self.assertNotIn(planned, checks)
        record["targets"]["bytes_peak_within_budget"] = False
        self.assertIn("did not hold: peak", rendered("checks", record))

    def test_admission_latencies_are_labelled_completed_only_and_a_count_limit_that_failed_requests_is_named(
            self) -> None:
        record = copy.deepcopy(self.record)
        average = policy(record, "count_average")["summary"]
        average.update(completed=average["requests"] - 3, failed=3, output_tokens=7)
        html = rendered("admission", record)
        self.assertIn("Latency of completed requests only", html)
        self.assertIn(f"{average['completed']} of {average['requests']} requests completed and 3 failed", html)
        self.assertIn("the 7 tokens it delivered", html)
        self.assertIn("Between tokens p50 / p99", html)

    def test_rates_view_gives_the_ratio_over_serial_at_every_rate_and_draws_serial_as_one_point(self) -> None:
        rates = self.record["rates"]
        html = rendered("rates", copy.deepcopy(self.record))
        serial = rates["serial"]["summary"]["throughput_tokens_per_s"]
        for point in rates["points"]:
            ratio = point["summary"]["throughput_tokens_per_s"] / serial
            self.assertIn(f"{ratio:.2f}× at {point['rate']:g}/s", html)
        self.assertIn(f"one at a time, measured at {rates['serial']['rate']:g}/s only", html)
        self.assertIn(f"Each rate sent the same {rates['requests']} requests", html)

    def test_step_view_says_when_a_larger_batch_steps_faster_and_whether_that_is_noise(self) -> None:
        record = copy.deepcopy(self.record)
        small, large = record["step_times"][0], record["step_times"][-1]
        for row, value in ((small, 30_000_000), (large, 20_000_000)):  # every repeat equal: ranges cannot overlap
            for timings in (row, row["weights"]):
                timings["durations_ns"] = [value] * len(timings["durations_ns"])
        html = rendered("steps", rederived(record))
        self.assertIn(f"a step for {small['batch']} requests took 30.00 ms", html)
        self.assertIn("so this is not noise between repeats", html)
        self.assertIn("The weight multiplications alone show the same inversion", html)
        # the weights' repeats overlapping (the larger batch's slowest above the smaller's fastest): no inversion claimed
        large["weights"]["durations_ns"][0] = 40_000_000
        noisy = rendered("steps", rederived(record))
        self.assertNotIn("show the same inversion", noisy)
        self.assertIn("but their timed repeats overlap, so they cannot say whether", noisy)

    def test_cancellation_view_says_from_which_moment_it_counts_and_what_slipped_in_before(self) -> None:
        record = copy.deepcopy(self.record)
        for run in record["cancellation"]["modes"]:  # nothing streamed before the server noticed
            run["server"]["tokens_generated"] = (sum(r["tokens"] for r in run["requests"])
                                                 + run["server"]["tokens_after_disconnect"])
        html = rendered("cancellation", rederived(record))
        self.assertIn("start when the server noticed a departure", html)
        self.assertIn("So no streamed token fell between a client", html)
        honoured = next(m for m in record["cancellation"]["modes"] if m["honor_disconnect"])
        honoured["server"]["tokens_generated"] += 2  # two tokens streamed that nobody read, before the server noticed
        self.assertIn("So 2 tokens went out between a client",
                      rendered("cancellation", rederived(record)))

    def test_checks_view_gives_the_evidence_beside_each_verdict(self) -> None:
        record = self.record
        html = rendered("checks", copy.deepcopy(record))
        server = policy(record, "kv_budget_bytes")["server"]
        self.assertIn(f"peak {server['peak_used_blocks']} of {server['budget_blocks']} blocks", html)
        self.assertIn(f"{record['targets']['bytes_failed_for_memory']} of {record['admission']['workload']['requests']} "
                      f"failed", html)
        self.assertIn("blocks in use once idle", html)
        self.assertIn(f"at {record['rates']['best_rate']:g}/s, the most (other rates:", html)
        self.assertIn("held: peak", html)

    def test_every_table_is_narrow_enough_for_the_article_column(self) -> None:
        record = copy.deepcopy(self.record)
        for name in kv_serving_views.VIEWS:
            for head in re.findall(r"<thead>(.*?)</thead>", rendered(name, record), re.S):
                with self.subTest(view=name):
                    self.assertLessEqual(head.count("<th>"), 8)

    def test_rates_view_names_the_rates_at_which_the_pool_was_full(self) -> None:
        record = copy.deepcopy(self.record)
        pool = record["config"]["benchmark"]["sweep_blocks"]
        last = record["rates"]["points"][-1]
        last["server"]["peak_used_blocks"] = pool
        self.assertIn(f"At {last['rate']:g} arrivals per second every one of the {pool} blocks was reserved",
                      rendered("rates", record))

    def test_check_record_names_a_figure_that_contradicts_the_data(self) -> None:
        for path, change in [
            ("$.rates.speedup_over_serial", lambda r: r["rates"].update(speedup_over_serial=99.0)),
            ("$.admission.policies[0].summary.completed",
             lambda r: r["admission"]["policies"][0]["summary"].update(completed=-1)),
            ("$.targets.blocks_leaked_after_cancellation",
             lambda r: r["cancellation"]["modes"][0]["server"].update(num_used_blocks=3)),
            ("$.config.benchmark.block_bytes", lambda r: r["config"]["benchmark"].update(block_bytes=1)),
        ]:
            record = copy.deepcopy(self.record)
            change(record)
            with self.subTest(path=path), self.assertRaisesRegex(RecordError, path.replace("[", r"\[").replace("$", r"\$")):
                check(record, "edited")


    def test_every_view_renders_the_quick_record_and_escapes_what_it_takes_from_it(self) -> None:
        record = copy.deepcopy(self.record)
        hostile = '<script>alert("x")</script>'
        record["admission"]["policies"][1]["label"] = hostile
        for name in kv_serving_views.VIEWS:
            with self.subTest(view=name):
                text = rendered(name, record)
                self.assertNotIn("<script>", text)
                self.assertNotIn("--8<--", text)
        admission = rendered("admission", record)
        self.assertIn("&lt;script&gt;", admission)
        self.assertEqual(admission.count("<polyline"), 3)  # one occupancy line per policy


class QuickRunInBfloat16(QuickBenchmarkRun):
    """The quick run with bfloat16 the faster probe: the other branch of the dtype choice, on any CPU."""

    main = staticmethod(benchmark.main)
    schema = SCHEMA
    # the random model's workloads narrowed further: this class reads the dtype choice, which the random model
    # follows, and checks the whole record the same way whatever its size
    main_arguments = ("--requests", "6", "--cancel-requests", "4", "--rate-requests", "4", "--step-batches", "1", "2")

    @classmethod
    def setUpClass(cls) -> None:
        # The trained model's section is the float32 quick run's: that model is float32 whichever dtype won
        # (TrainedDtype below checks it without a run), and measuring it again took most of this run's 40 s.
        # No resident-memory section: a record without one is what a machine without /proc writes, and the build
        # must accept it (the float32 quick run measures the section).
        trained = load_record(quick_run(benchmark.main, **QuickRun.main_kwargs).record, SCHEMA)["trained"]
        cls.main_kwargs = {"dtype_probes": BFLOAT16_WINS, "trained": trained}
        with mock.patch.object(benchmark, "memory_section", lambda args: None):
            super().setUpClass()

    def test_a_record_without_the_memory_section_is_accepted_and_its_page_says_why(self) -> None:
        self.assertNotIn("memory", self.record)
        check(self.record, "quick record without a memory section")
        self.assertIn("holds no reading of resident memory", rendered("prefill-memory", self.record))

    def test_each_dtype_as_the_probes_winner_gives_a_record_the_builds_check_accepts(self) -> None:
        records = {"bfloat16": self.record, "float32": load_record(quick_run(benchmark.main, dtype_probes=FLOAT32_WINS)
                                                                   .record, SCHEMA)}
        for dtype, record in records.items():
            with self.subTest(dtype=dtype):
                check(record, f"quick record, {dtype} the faster probe")
                choice = record["config"]["benchmark"]["dtype_choice"]
                self.assertEqual((choice["chosen"], choice["how"]), (dtype, CHOSEN_BY_SUPPLIED_PROBES))
                self.assertEqual(record["config"]["model"]["dtype"], dtype)
                # the trained model stays in float32 whichever won (trained_load.TRAINED_DTYPE), gated as float32,
                # its int8 client server started beside the float32 one
                self.assertEqual(record["trained"]["model"]["dtype"], "float32")
                self.assertEqual(record["trained"]["tolerance"], TRAINED_TOLERANCES["float32"])
                self.assertNotIn("max_row_steps", record["trained"]["equivalence"])
                self.assertEqual(sorted(record["trained"]["client_steps"]["server"]), ["float32", "int8"])
                self.assertIn("not measured on this CPU", rendered("model-cost", record))

    def test_a_record_whose_choice_contradicts_its_probes_is_refused(self) -> None:
        record = copy.deepcopy(self.record)
        record["config"]["benchmark"]["dtype_choice"]["probes"] = {name: {"durations_ns": list(times)}
                                                                   for name, times in FLOAT32_WINS.items()}
        with self.assertRaisesRegex(RecordError, "make 'float32' the faster"):
            check(rederived(record), "edited")


class TrainedDtype(unittest.TestCase):
    def test_every_trained_server_is_float32_whichever_dtype_the_random_model_takes(self) -> None:
        for dtype in ("float32", "bfloat16"):
            with self.subTest(dtype=dtype):
                args = benchmark.parse_args(["--quick", "--output", "unwritten.json", "--dtype", dtype])
                planned = trained_load.plan(args, benchmark.BYTE_BUDGET_SHARE)
                for name, options in planned["servers"].items():
                    self.assertEqual(options[options.index("--dtype") + 1], "float32", name)

    def test_a_trained_section_measured_with_another_workload_is_not_reused(self) -> None:
        args = benchmark.parse_args(["--quick", "--output", "unwritten.json"])
        section = {"requests": args.trained_requests, "max_tokens": args.trained_max_tokens,
                   "seed": args.seed + trained_load.SEED_OFFSET}  # written out: what a measured section holds
        self.assertEqual(trained_load.workload_identity(args), section)
        self.assertEqual(benchmark.reused_trained(args, section), section)
        for name in section:
            with self.subTest(field=name), self.assertRaisesRegex(ValueError, "same trained workload"):
                benchmark.reused_trained(args, {**section, name: section[name] + 1})


class FailedRun(ExistingRecordTest):
    def test_a_failing_experiment_keeps_the_previous_record(self) -> None:
        # the first experiment fails: what follows it never runs, and the record must survive all the same
        with mock.patch.object(benchmark, "choose_dtype", side_effect=RuntimeError("boom")):
            code, log = run_quietly(benchmark.main, ["--quick", "--output", str(self.path)])
        self.assertEqual(code, 1)
        self.assert_untouched(log)


class ServerProcessTest(unittest.TestCase):
    def test_the_server_command_serves_on_127_0_0_1_closes_silent_connections_and_stops_cleanly_on_ctrl_c(
            self) -> None:
        with tempfile.TemporaryFile(mode="w+") as log:
            process = subprocess.Popen([sys.executable, "-m", "kv_serving.server", "--port", "0", "--num-blocks", "16",
                                        "--request-timeout-s", "0.5"], stdout=log, stderr=subprocess.STDOUT)
            try:
                url = serving_url(process, log, HANG_S)  # importing torch is most of a start
                with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as silent:
                    silent_reply = read_until_closed(silent, "the server to close a connection that sent nothing")
                reply = despite_stalls_sync("POST", f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 4})
                self.assertEqual(len(reply.json()["choices"][0]["token_ids"]), 4)
            finally:
                process.send_signal(signal.SIGINT)
                communicate(process, "the server to stop on Ctrl-C")
            output = log_text(log)
        self.assertEqual(process.returncode, 0, output)
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+$")
        self.assertIn("Application shutdown complete", output)
        self.assertTrue(silent_reply.startswith(b"HTTP/1.1 408 "), silent_reply[:80])


if __name__ == "__main__":
    unittest.main()
