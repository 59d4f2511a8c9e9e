"""Resident memory while prompts of ever-new lengths are prefilled: the benchmark's section on a tiny model (its
shape, never its sizes, which are the host's), the figures and the verdict on edited sections that make each
wording hold (flat, growing, noisy), the invariants' refusals, and the view with a record that has the section and
one made before it."""

from __future__ import annotations

import copy
import unittest
from pathlib import Path
from typing import Any
from unittest import mock

from kv_serving import benchmark, figures
from kv_serving.figures import formulas
from kv_serving_views import VIEWS
from kv_serving_views.memory import verdict
from labkit.figures import check_record
from labkit.records import RecordError
from labkit.testing import committed_record
from llm_models.llama.tiny import tiny_pair
from llm_models.serving.kernel_rows import PREFILL_PACKED_ROWS
from llm_models.serving.kernels import ranking
from llm_models.serving.llama import LlamaServingModel
from llm_models.serving.sizes import blocks_for
from site_hooks.blocks import render_block

BEFORE = 2_000_000_000
MB = 1_000_000
SETTLE = 8
LENGTHS = [*range(1, PREFILL_PACKED_ROWS + 1), *range(64, PREFILL_PACKED_ROWS, -1)]  # the full run's order
WINDOW = len(LENGTHS) - PREFILL_PACKED_ROWS - SETTLE


def section(window_steps: list[int], packed_step: int = 24_576, settling: tuple[int, ...] = (400_000, 68_000)
            ) -> dict[str, Any]:
    """A memory section in the full run's shape whose window moves by ``window_steps`` (one per window prompt)."""
    if len(window_steps) != WINDOW:
        raise ValueError(f"the window holds {WINDOW} prompts, got {len(window_steps)} steps")
    steps = [packed_step] * PREFILL_PACKED_ROWS + [*settling, *[0] * (SETTLE - len(settling))] + window_steps
    levels, level = [], BEFORE
    for step in steps:
        level += step
        levels.append(level)
    return {"packed_rows": PREFILL_PACKED_ROWS, "settle": SETTLE, "block_size": 16, "seed": 11, "threads": 1,
            "warmup_length": 89, "lengths": list(LENGTHS), "rss_before_bytes": BEFORE, "rss_bytes": levels, "seconds": 16.0}


FLAT = [0] * (WINDOW - 2) + [4_096, 0]
GROWING = [600_000] * WINDOW  # what one oneDNN primitive per new length would keep, at 0.6 MB each
NOISY = [3_000_000 if i % 2 == 0 else -3_000_000 for i in range(WINDOW - 1)] + [-1_000_000]  # 3 MB jumps, +2 MB net
NOISY_GROWING = [600_000 + (1_500_000 if i % 2 == 0 else -1_500_000) for i in range(WINDOW)]
PAGES = [8_192] * 20 + [0] * (WINDOW - 20)  # 160 kB in two-page steps: above twice its largest, below the floor


def with_section(memory: dict[str, Any] | None) -> dict[str, Any]:
    """The committed record with ``memory`` as its section, checked and its figures derived as the build does."""
    record = committed_record(__file__)
    record.pop("memory", None)
    if memory is not None:
        record["memory"] = copy.deepcopy(memory)
        record["config"]["benchmark"]["threads"] = memory["threads"]
        record["config"]["benchmark"]["block_size"] = memory["block_size"]
    check_record(record, "edited", figures.check_invariants, figures.derive)
    return record


class MemoryFigures(unittest.TestCase):
    def test_flat_growing_and_noisy_windows_get_the_verdict_their_noise_allows(self) -> None:
        for name, steps, expected in [("flat", FLAT, formulas.FLAT), ("growing", GROWING, formulas.GROWS),
                                      ("noisy", NOISY, formulas.FLAT), ("noisy, growing", NOISY_GROWING, formulas.GROWS),
                                      ("pages", PAGES, formulas.FLAT)]:
            with self.subTest(window=name):
                memory = with_section(section(steps))["memory"]
                self.assertEqual(memory["verdict"], expected)
                self.assertEqual(memory["window_prompts"], WINDOW)
                self.assertEqual(memory["window_growth_bytes"], sum(steps))
                self.assertEqual(memory["largest_step_bytes"], max(abs(step) for step in steps))
                self.assertEqual(memory["noise_bytes"], max(formulas.NOISE_JUMPS * memory["largest_step_bytes"],
                                                            formulas.MEMORY_FLOOR_BYTES))

    def test_the_figures_follow_the_readings(self) -> None:
        memory = with_section(section(GROWING))["memory"]
        self.assertEqual(len(memory["growth_bytes"]), len(LENGTHS) + 1)  # before the first, then after each
        self.assertEqual(memory["growth_bytes"][0], 0)
        self.assertEqual(memory["packed_prompts"], PREFILL_PACKED_ROWS)
        self.assertEqual(memory["packed_growth_bytes"], PREFILL_PACKED_ROWS * 24_576)
        self.assertEqual(memory["window_start"], PREFILL_PACKED_ROWS + SETTLE)
        self.assertEqual(memory["per_length_bytes"], 600_000)
        self.assertEqual((memory["step_median_bytes"], memory["step_middle_half_bytes"]), (600_000, [600_000, 600_000]))
        self.assertEqual(memory["peak_growth_bytes"], memory["growth_bytes"][-1])
        self.assertEqual(memory["grows_above_bytes"],
                         memory["growth_bytes"][memory["window_start"]] + memory["noise_bytes"])
        self.assertEqual(memory["tokens"], sum(LENGTHS))

    def test_a_section_without_packed_prompts_has_no_packed_growth(self) -> None:
        memory = section(FLAT)
        memory["lengths"], memory["rss_bytes"] = memory["lengths"][PREFILL_PACKED_ROWS:], memory["rss_bytes"][PREFILL_PACKED_ROWS:]
        derived = with_section(memory)["memory"]
        self.assertIsNone(derived["packed_growth_bytes"])
        self.assertEqual(derived["window_start"], SETTLE)

    def test_a_hand_edited_verdict_is_refused(self) -> None:
        record = with_section(section(GROWING))
        record["memory"]["verdict"] = formulas.FLAT
        with self.assertRaisesRegex(RecordError, r"\$\.memory\.verdict is flat, but the window's growth"):
            check_record(record, "edited", figures.check_invariants, figures.derive)


class MemoryInvariants(unittest.TestCase):
    def assert_refused(self, path: str, change: Any) -> None:
        memory = section(FLAT)
        change(memory)
        with self.assertRaisesRegex(RecordError, path.replace("$", r"\$").replace("[", r"\[").replace(".", r"\.")):
            with_section(memory)

    def test_readings_lengths_and_window_that_cannot_be_are_refused(self) -> None:
        cases = [
            ("$.memory.rss_bytes holds", lambda m: m["rss_bytes"].pop()),
            ("$.memory.rss_bytes[3] is not positive", lambda m: m["rss_bytes"].__setitem__(3, 0)),
            ("$.memory.rss_before_bytes is not positive", lambda m: m.update(rss_before_bytes=-1)),
            ("$.memory.lengths repeat [40]", lambda m: m["lengths"].__setitem__(-1, 40)),
            ("$.memory.lengths are not the prompts of at most 32 rows first",
             lambda m: m["lengths"].__setitem__(0, m["lengths"].pop(-1)) or m["lengths"].insert(-1, 1)),
            ("$.memory.settle", lambda m: m.update(settle=WINDOW + SETTLE)),
            ("$.memory.warmup_length = 40 is among the lengths", lambda m: m.update(warmup_length=40)),
        ]
        for path, change in cases:
            with self.subTest(path=path):
                self.assert_refused(path, change)

    def test_a_section_at_another_thread_count_than_the_run_is_refused(self) -> None:
        record = committed_record(__file__)
        record["memory"] = section(FLAT)
        record["memory"]["threads"] = record["config"]["benchmark"]["threads"] + 1
        with self.assertRaisesRegex(RecordError, r"\$\.memory\.threads is"):
            check_record(record, "edited", figures.check_invariants, figures.derive)


class MemoryView(unittest.TestCase):
    def test_the_sentence_says_growth_only_beyond_the_noise(self) -> None:
        growing = verdict(with_section(section(GROWING))["memory"])
        self.assertIn("grew with the new lengths: 14.4 MB over the window's 24 new lengths", growing)  # 24 x 600 kB
        self.assertIn("600 kB per prompt", growing)
        for name, steps in [("flat", FLAT), ("noisy", NOISY), ("pages", PAGES)]:
            with self.subTest(window=name):
                sentence = verdict(with_section(section(steps))["memory"])
                self.assertIn("stayed flat", sentence)
                self.assertNotIn("grew", sentence)
        self.assertIn("moved by 2 MB in all", verdict(with_section(section(NOISY))["memory"]))

    def test_the_view_draws_both_kernels_lines_and_escapes_its_text(self) -> None:
        text = render_block(VIEWS["prefill-memory"](with_section(section(GROWING))))
        self.assertEqual(text.count("<polyline"), 2)  # the packed kernel's prompts, then the longer ones
        self.assertIn("prompts of at most 32 rows (the table&#39;s kernel)", text)  # through the escaping template
        self.assertNotIn("the table's kernel", text)
        self.assertIn("the window opens after prompt 40", text)
        self.assertIn("growth beyond noise", text)

    def test_a_level_that_falls_below_the_first_reading_is_drawn_over_its_lowest_and_said_to_fall(self) -> None:
        """The reference run's process handed 147 MB back during its first prompt: no state kept per length, and a
        chart drawn over the first reading would have had nothing above zero."""
        memory = section(FLAT)
        memory["rss_bytes"] = [level - 147 * MB for level in memory["rss_bytes"]]
        record = with_section(memory)
        self.assertEqual(min(record["memory"]["growth_bytes"]), 0)
        self.assertEqual(record["memory"]["lowest_bytes"], record["memory"]["growth_bytes"][0] * -1)
        text = render_block(VIEWS["prefill-memory"](record))
        self.assertIn("<svg", text)
        self.assertIn("left it 146 MB lower (a fall, which no state kept per length can cause)", text)
        self.assertIn("stayed flat", text)

    def test_a_record_made_before_the_section_says_so(self) -> None:
        text = render_block(VIEWS["prefill-memory"](with_section(None)))
        self.assertIn("holds no reading of resident memory", text)
        self.assertIn("without /proc/self/status", text)
        self.assertNotIn("<svg", text)


class MemorySection(unittest.TestCase):
    """The benchmark's own section, on the tiny model: its shape and its calls, not the host's memory."""

    def setUp(self) -> None:
        _, decoder = tiny_pair(seed=3)
        self.model = LlamaServingModel(decoder, ranking("in_out", "in_out"))  # no kernel timing

    def test_the_lengths_are_distinct_the_packed_kernels_first_and_leave_a_window(self) -> None:
        for quick in (False, True):
            with self.subTest(quick=quick):
                lengths = benchmark.memory_lengths(quick)
                self.assertEqual(len(set(lengths)), len(lengths))
                packed = [n for n in lengths if n <= PREFILL_PACKED_ROWS]
                self.assertEqual(lengths[:len(packed)], packed)
                longer = lengths[len(packed):]
                self.assertEqual(longer, sorted(longer, reverse=True))  # the longest first
                self.assertGreater(len(longer), benchmark.MEMORY_SETTLE)
        self.assertEqual(benchmark.memory_lengths(False)[:PREFILL_PACKED_ROWS], list(range(1, PREFILL_PACKED_ROWS + 1)))

    def test_each_prompt_is_prefilled_alone_and_its_blocks_come_back(self) -> None:
        calls: list[tuple[list[int], list[list[int]], int]] = []
        prefill = self.model.prefill

        def recording(pool: Any, prompts: list[list[int]], tables: list[list[int]], *rest: Any) -> Any:
            calls.append(([len(p) for p in prompts], [list(t) for t in tables], pool.num_used_blocks))
            logits = prefill(pool, prompts, tables, *rest)
            self.pools.add(pool)
            return logits

        self.pools: set[Any] = set()
        lengths = benchmark.memory_lengths(quick=True)
        with mock.patch.object(self.model, "prefill", recording):
            memory = benchmark.prefill_memory(self.model, lengths, 4, seed=0)
        assert memory is not None
        prompts = [memory["warmup_length"], *lengths]  # the warm-up first, before the first reading
        self.assertNotIn(memory["warmup_length"], lengths)
        self.assertEqual([sizes for sizes, _, _ in calls], [[n] for n in prompts])  # one request per prefill
        self.assertEqual([len(tables[0]) for _, tables, _ in calls], [blocks_for(n, 4) for n in prompts])
        self.assertEqual([used for _, tables, used in calls], [len(tables[0]) for _, tables, _ in calls])
        self.assertEqual([pool.num_used_blocks for pool in self.pools], [0])  # every block released

    def test_the_section_is_schema_shaped_and_passes_the_builds_check(self) -> None:
        lengths = benchmark.memory_lengths(quick=True)
        memory = benchmark.prefill_memory(self.model, lengths, 16, seed=0)
        assert memory is not None
        self.assertEqual(memory["lengths"], lengths)
        self.assertEqual(len(memory["rss_bytes"]), len(lengths))
        self.assertTrue(all(isinstance(value, int) and value > 0
                            for value in [memory["rss_before_bytes"], *memory["rss_bytes"]]))
        self.assertEqual((memory["packed_rows"], memory["settle"]), (PREFILL_PACKED_ROWS, benchmark.MEMORY_SETTLE))
        derived = with_section(memory)["memory"]
        self.assertIn(derived["verdict"], (formulas.GROWS, formulas.FLAT))  # which one is the host's to say
        self.assertEqual(derived["window_prompts"], benchmark.MEMORY_QUICK_WINDOW)

    def test_without_proc_status_the_section_is_left_out(self) -> None:
        with mock.patch.object(benchmark, "STATUS", Path("/nonexistent/status")):
            self.assertIsNone(benchmark.resident_bytes())
            self.assertIsNone(benchmark.prefill_memory(self.model, [1, 40], 4, seed=0))


if __name__ == "__main__":
    unittest.main()
