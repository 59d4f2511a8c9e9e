"""The storage benchmark's record, and the allocation profile it rests on."""

from __future__ import annotations

import copy
import re
import statistics
import unittest
from typing import Any
from unittest import mock

import torch

import labkit.testing
from kv_cache.broken import PositionResetBlock
from kv_storage import benchmark
from kv_storage.figures import check_invariants, derive
from kv_storage.paged import PagedSequence
from kv_storage.peak import profile_allocations
from kv_storage.preallocated import PreallocatedKVCache
from kv_storage.testing import TINY, random_ids
from labkit import figures
from labkit.records import RecordError, path_text
from llm_models.kv_bytes import cache_storage_bytes
from llm_models.toy.model import DecoderBlock

SCHEMA = benchmark.ROOT / benchmark.LAB.schema


def check_record(record: dict[str, Any], source: str) -> None:
    """The site's check of this lab's record: its invariants, then every derived figure."""
    figures.check_record(record, source, check_invariants, derive)


def run_quietly(*argv: str) -> tuple[int, str]:
    return labkit.testing.run_quietly(benchmark.main, ["--quick", *argv])


class QuickRun(labkit.testing.QuickBenchmarkRun):
    main = staticmethod(benchmark.main)
    schema = SCHEMA

    def test_quick_run_writes_a_schema_valid_record_for_full_recompute_and_every_layout(self) -> None:
        record = self.record
        self.assertEqual(record["config"]["benchmark"]["modes"], ["full", "concat", "prealloc", "paged"])
        self.assertEqual(sorted(record["lengths"][0]["equivalence"]), ["concat", "paged", "prealloc"])

    def test_the_lead_rotates_so_each_mode_runs_first_once_when_repetitions_equal_modes(self) -> None:
        for entry in self.record["lengths"]:
            firsts = [order[0] for order in entry["order"]]
            self.assertEqual(firsts, ["full", "concat", "prealloc", "paged"])  # --quick: 4 repeats

    def test_stored_medians_equal_those_of_the_raw_durations(self) -> None:
        for entry in self.record["lengths"]:
            for mode, values in entry["modes"].items():
                self.assertEqual(values["median_ns"], statistics.median(values["durations_ns"]), mode)

    def test_every_grouped_query_variant_is_compared_in_every_layout_at_every_position(self) -> None:
        record = self.record
        cached = sorted(record["lengths"][0]["equivalence"])
        self.assertEqual(sorted(row["kv_heads"] for row in record["gqa"]), sorted(benchmark.GQA_KV_HEADS))
        for row in record["gqa"]:
            self.assertEqual(row["positions_compared"], record["memory"]["length"])
            self.assertEqual(sorted(row["layouts"]), cached)
            for values in row["layouts"].values():
                self.assertTrue(values["within_tolerance"])

    def test_the_site_accepts_the_record_and_refuses_a_hand_edited_grouped_query_figure(self) -> None:
        record = self.record
        check_record(record, "quick.json")
        edits = {"bytes": lambda layout: layout.update(bytes=layout["bytes"] + 1),
                 "max_abs_diff": lambda layout: layout.update(max_abs_diff=1.0)}
        for field, edit in edits.items():
            edited = copy.deepcopy(record)
            edit(edited["gqa"][-1]["layouts"]["paged"])
            with self.subTest(field=field), self.assertRaisesRegex(RecordError, rf"gqa\[\d\]\.layouts\.paged\.{field}"):
                check_record(edited, "quick.json")
        edited = copy.deepcopy(record)
        edited["gqa"][0]["positions_compared"] -= 1
        with self.assertRaisesRegex(RecordError, r"positions_compared"):
            check_record(edited, "quick.json")

    def test_a_hand_edited_paged_overhead_peak_ratio_or_sharing_share_is_refused_by_its_path(self) -> None:
        for path in (("paged_overhead", "intercept_ns"), ("paged_overhead", "mostly_fixed"),
                     ("memory", "variants", "concat", "peak_ratio"), ("memory", "concat_vs_prealloc", "peak"),
                     ("sharing", "saved_share"), ("gqa", 0, "share_of_multi_head")):
            edited = copy.deepcopy(self.record)
            parent = edited
            for key in path[:-1]:
                parent = parent[key]
            value = parent[path[-1]]
            parent[path[-1]] = (not value) if isinstance(value, bool) else value * 2 + 1
            with self.subTest(path=path), self.assertRaisesRegex(RecordError,
                                                                 re.escape(path_text(path)) + " is .*, but"):
                check_record(edited, "quick.json")

    def test_sharing_saves_the_prompt_blocks_of_all_but_one_request(self) -> None:
        sharing = self.record["sharing"]
        size, n = sharing["block_size"], sharing["requests"]
        per_request = -(-(sharing["prompt"] + sharing["tokens"]) // size)
        self.assertEqual(sharing["without"]["blocks"], n * per_request)
        full_prompt_blocks = sharing["prompt"] // size
        self.assertEqual(sharing["without"]["blocks"] - sharing["with"]["blocks"], (n - 1) * full_prompt_blocks)


class RecordSurvivesFailures(labkit.testing.ExistingRecordTest):

    def test_a_layout_that_disagrees_with_full_recompute_stops_the_run_and_writes_nothing(self) -> None:
        with mock.patch.object(benchmark, "DecoderBlock", PositionResetBlock):
            code, log = run_quietly("--output", str(self.path))
        self.assertEqual(code, 2)
        self.assertIn("concat differs from full", log)
        self.assert_untouched(log)

    def test_a_paged_store_that_reads_keys_back_out_of_order_is_caught_before_timing(self) -> None:
        class ReversedKeys(PagedSequence):
            def stored(self) -> tuple[torch.Tensor, torch.Tensor]:
                keys, values = super().stored()
                return keys.flip(2), values  # keys no longer line up with their values

        with mock.patch.object(benchmark, "PagedSequence", ReversedKeys):
            code, log = run_quietly("--output", str(self.path))
        self.assertEqual(code, 2)
        self.assertIn("paged differs from full", log)
        self.assertNotIn("repetition", log)  # nothing was timed
        self.assert_untouched(log)

    def test_a_preallocated_store_that_loses_its_values_is_caught_before_timing(self) -> None:
        class ZeroValues(PreallocatedKVCache):
            def stored(self) -> tuple[torch.Tensor, torch.Tensor]:
                keys, values = super().stored()
                return keys, torch.zeros_like(values)

        with mock.patch.object(benchmark, "PreallocatedKVCache", ZeroValues):
            code, log = run_quietly("--output", str(self.path))
        self.assertEqual(code, 2)
        self.assertIn("prealloc differs from full", log)
        self.assert_untouched(log)

    def test_a_layout_wrong_only_with_grouped_query_heads_is_caught_and_nothing_is_written(self) -> None:
        class DropsSharedHeads(PagedSequence):  # right for the timed multi-head model, wrong with fewer heads
            def stored(self) -> tuple[torch.Tensor, torch.Tensor]:
                keys, values = super().stored()
                if keys.shape[1] < TINY.heads:
                    values = values.flip(2)
                return keys, values

        with mock.patch.object(benchmark, "PagedSequence", DropsSharedHeads):
            code, log = run_quietly("--output", str(self.path))
        self.assertEqual(code, 2)
        self.assertIn("paged differs from full", log)
        self.assertIn("kv_heads=", log)
        self.assert_untouched(log)

    def test_a_cache_that_holds_other_than_its_formula_fails_the_run_and_writes_nothing(self) -> None:
        real = benchmark.retained_bytes
        with mock.patch.object(benchmark, "retained_bytes", lambda state: real(state) + 1):
            code, log = run_quietly("--output", str(self.path))
        self.assertEqual(code, 1)
        self.assertIn("this run's own counts: field $.memory.variants.concat.retained_bytes is", log)
        self.assert_untouched(log)

    def test_interrupted_run_leaves_the_existing_record_byte_identical(self) -> None:
        with mock.patch.object(benchmark, "memory_profile", side_effect=KeyboardInterrupt):
            code, log = run_quietly("--output", str(self.path))
        self.assertEqual(code, 130)
        self.assertIn("interrupted", log)
        self.assert_untouched(log)


class AllocationProfile(unittest.TestCase):
    """The peak figures on the page come from this tool; check it on cases whose answer is known."""

    def test_concatenation_peak_holds_the_old_and_the_new_cache_at_once(self) -> None:
        model, ids = DecoderBlock(TINY), random_ids(40, seed=0)
        kept = {}

        def loop() -> None:
            cache = None
            for t in range(40):
                _, cache = model(ids[:, t : t + 1], cache)
            kept["cache"] = cache

        with torch.inference_mode():
            profile = profile_allocations(loop)
        final = cache_storage_bytes(kept["cache"])
        self.assertGreaterEqual(profile.peak_bytes, final + final * 39 // 40)  # last step: 39 old + 40 new

    def test_preallocated_peak_is_its_buffer_plus_small_activations(self) -> None:
        model, ids = DecoderBlock(TINY), random_ids(40, seed=0)

        def loop() -> None:
            store = PreallocatedKVCache.for_model(TINY, batch=1, capacity=40)
            for t in range(40):
                model(ids[:, t : t + 1], store)

        with torch.inference_mode():
            profile = profile_allocations(loop)
        buffer = 2 * 1 * TINY.kv_heads * 40 * TINY.head_dim * 4
        self.assertGreaterEqual(profile.peak_bytes, buffer)
        self.assertLess(profile.peak_bytes, buffer + buffer // 2)

    def test_a_second_profile_in_the_same_process_starts_from_zero(self) -> None:
        keep = []
        first = profile_allocations(lambda: keep.append(torch.ones(10_000)))  # 40,000 bytes stay allocated
        second = profile_allocations(lambda: torch.ones(10_000))
        self.assertGreaterEqual(first.peak_bytes, 40_000)
        self.assertEqual(first.peak_bytes, second.peak_bytes)


if __name__ == "__main__":
    unittest.main()
