"""The benchmark's quick run: a schema-valid, self-consistent record; a failed run keeps the previous one."""

from __future__ import annotations

import copy
import signal
import subprocess
import sys
import time
import unittest
from unittest import mock

import httpx

import kv_serving_views
from kv_serving import benchmark
from kv_serving.launch import free_port, healthy
from labkit.records import RecordError
from labkit.testing import ExistingRecordTest, QuickBenchmarkRun, run_quietly
from site_hooks.orchestrate import Evidence

SCHEMA = benchmark.ROOT / benchmark.LAB.schema


class QuickRun(QuickBenchmarkRun):
    main = staticmethod(benchmark.main)
    schema = SCHEMA

    def test_quick_record_holds_every_experiment_and_passes_its_own_consistency_check(self) -> None:
        record = self.record
        kv_serving_views.check_record(record, "quick record")
        self.assertEqual([p["name"] for p in record["admission"]["policies"]],
                         ["kv_budget_bytes", "count_safe", "count_average"])
        self.assertEqual([m["honor_disconnect"] for m in record["cancellation"]["modes"]], [True, False])
        self.assertEqual(record["targets"]["blocks_leaked_after_cancellation"], 0)
        self.assertTrue(record["targets"]["bytes_peak_within_budget"])
        self.assertEqual(len(kv_serving_views.headline(record)), 3)

    def test_ignoring_disconnects_decodes_for_departed_clients_and_honouring_them_does_not(self) -> None:
        honoured, ignored = (m["server"] for m in self.record["cancellation"]["modes"])
        self.assertEqual(honoured["tokens_after_disconnect"], 0)
        self.assertGreater(ignored["tokens_after_disconnect"], 0)
        self.assertEqual(ignored["completed"], ignored["submitted"])  # ran every departed request to the end

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
                kv_serving_views.check_record(record, "edited")


    def test_every_view_renders_the_quick_record_and_escapes_what_it_takes_from_it(self) -> None:
        record = copy.deepcopy(self.record)
        hostile = '<script>alert("x")</script>'
        record["admission"]["policies"][1]["label"] = hostile
        evidence = Evidence(lab=benchmark.LAB, record=record, tests={}, measured_now=False, build_machine={})
        for name, view in kv_serving_views.VIEWS.items():
            with self.subTest(view=name):
                html = view(evidence)
                self.assertNotIn("<script>", html)
                self.assertNotIn("--8<--", html)
        admission = kv_serving_views.VIEWS["admission"](evidence)
        self.assertIn("&lt;script&gt;", admission)
        self.assertEqual(admission.count("<polyline"), 3)  # one occupancy line per policy


class FailedRun(ExistingRecordTest):
    def test_a_failing_experiment_keeps_the_previous_record(self) -> None:
        with mock.patch.object(benchmark, "step_times", side_effect=RuntimeError("boom")):
            code, log = run_quietly(benchmark.main, ["--quick", "--output", str(self.path)])
        self.assertEqual(code, 1)
        self.assert_untouched(log)


class ServerProcessTest(unittest.TestCase):
    def test_the_server_command_serves_on_127_0_0_1_and_stops_cleanly_on_ctrl_c(self) -> None:
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "kv_serving.server", "--port", str(port), "--num-blocks", "16"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(300):
                if healthy(url) or process.poll() is not None:
                    break
                time.sleep(0.1)
            reply = httpx.post(f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 4}, timeout=30)
            self.assertEqual(len(reply.json()["choices"][0]["token_ids"]), 4)
        finally:
            process.send_signal(signal.SIGINT)
            output, _ = process.communicate(timeout=30)
        self.assertEqual(process.returncode, 0, output.decode(errors="replace"))
        self.assertIn(f"http://127.0.0.1:{port}", output.decode())
        self.assertIn("Application shutdown complete", output.decode())


if __name__ == "__main__":
    unittest.main()
