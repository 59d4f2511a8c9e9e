"""The page's diagrams and key results: TableModel, which draws the block table and the fork, keeps the same
tables, counts and free list as the real BlockPool; the views draw what it says and word what the record says."""

from __future__ import annotations

import copy
import random
import re
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kv_storage.figures import FORK_EXAMPLE, TABLE_EXAMPLE, TableModel, forked, interleaved, locate
from kv_storage.paged import PagedSequence
from kv_storage_views.pictures import block_table_view, fork_view
from kv_storage_views.results import answer_peak_view, answer_sharing_view, key_results_view, regime_item
from labkit.figures import fill
from labkit.summary import sweep_figures
from labkit.testing import committed_record
from llm_models.paged.pool import BlockPool

RECORD = Path(__file__).resolve().parents[3] / "results" / "storage-results.json"
HEADS, DIM = 1, 2


def entries(count: int) -> torch.Tensor:
    return torch.randn(1, HEADS, count, DIM)


class Real:
    """The same script on a real pool, named requests mapped to PagedSequence objects."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.pool = BlockPool(num_blocks, block_size, HEADS, DIM)
        self.requests: dict[str, PagedSequence] = {}

    def admit(self, name: str) -> None:
        self.requests[name] = PagedSequence(self.pool)

    def append(self, name: str, count: int = 1) -> None:
        self.requests[name].update(entries(count), entries(count))

    def fork(self, parent: str, child: str) -> None:
        self.requests[child] = self.requests[parent].fork()

    def release(self, name: str) -> None:
        self.requests.pop(name).release()


def same(test: unittest.TestCase, model: TableModel, real: Real) -> None:
    test.assertEqual(model.tables, {name: r.table for name, r in real.requests.items()})
    test.assertEqual(model.lengths, {name: r.length for name, r in real.requests.items()})
    test.assertEqual(model.refcount, real.pool.refcount)
    test.assertEqual(model.free, real.pool.free)


class TableModelMatchesThePool(unittest.TestCase):
    def test_the_block_table_diagram_is_what_a_real_pool_does_with_two_interleaved_requests(self) -> None:
        real = Real(TABLE_EXAMPLE["pool"], TABLE_EXAMPLE["block_size"])
        lengths = TABLE_EXAMPLE["lengths"]
        for name in lengths:
            real.admit(name)
        for step in range(max(lengths.values())):
            for name, length in lengths.items():
                if step < length:
                    real.append(name)
        model = interleaved()
        same(self, model, real)
        self.assertNotEqual(model.tables["A"], list(range(len(model.tables["A"]))))  # really scattered

    def test_the_fork_diagram_is_what_a_real_pool_does_including_the_copy_on_write(self) -> None:
        for child_tokens, parent_tokens in ((0, 0), (1, 1)):
            real = Real(FORK_EXAMPLE["pool"], FORK_EXAMPLE["block_size"])
            real.admit("parent")
            real.append("parent", FORK_EXAMPLE["prompt"])
            real.fork("parent", "child")
            if child_tokens:
                real.append("child", child_tokens)
            if parent_tokens:
                real.append("parent", parent_tokens)
            same(self, forked(FORK_EXAMPLE, child_tokens, parent_tokens), real)
        self.assertEqual(len(forked(FORK_EXAMPLE, 1, 1).copies), 1)  # one copy, of the partly filled block

    def test_random_scripts_keep_the_same_tables_counts_and_free_list(self) -> None:
        rng = random.Random(7)
        for _ in range(30):
            model, real = TableModel(12, 3), Real(12, 3)
            names = 0
            for _ in range(25):
                live = list(model.tables)
                action = rng.choice(["admit", "append", "append", "fork", "release"] if live else ["admit"])
                if action == "admit":
                    name = f"r{names}"
                    names += 1
                    model.admit(name)
                    real.admit(name)
                elif action == "append":
                    name, count = rng.choice(live), rng.randint(1, 5)
                    if real.requests[name].blocks_needed(count) > len(real.pool.free):
                        continue
                    model.append(name, count)
                    real.append(name, count)
                elif action == "fork":
                    parent, name = rng.choice(live), f"r{names}"
                    names += 1
                    model.fork(parent, name)
                    real.fork(parent, name)
                else:
                    name = rng.choice(live)
                    model.release(name)
                    real.release(name)
                same(self, model, real)

    def test_locate_is_the_block_and_slot_the_pool_writes(self) -> None:
        real = Real(8, 4)
        real.admit("a")
        values = torch.arange(10, dtype=torch.float32).view(1, 1, 10, 1).expand(1, HEADS, 10, DIM).clone()
        real.requests["a"].update(values, values)
        for position in range(10):
            logical, slot = locate(position, 4)
            block = real.requests["a"].table[logical]
            self.assertEqual(float(real.pool.keys[block, 0, slot, 0]), position)


def record() -> dict[str, Any]:
    return committed_record(__file__)


class Pictures(unittest.TestCase):
    def test_the_block_table_draws_every_table_entry_of_the_model(self) -> None:
        svg = block_table_view(record()).diagrams[0].svg
        model = interleaved()
        for table in model.tables.values():
            for logical, block in enumerate(table):
                self.assertIn(f"{logical} → {block}", svg)
        self.assertEqual(svg.count("(free)"), len(model.free))

    def test_the_fork_panels_show_shared_tables_then_the_copy(self) -> None:
        block = fork_view(record())
        before, after = (d.svg for d in block.diagrams)
        self.assertIn("parent table [0, 1, 2]; child table [0, 1, 2]", before)
        (_, shared, copied), = forked(FORK_EXAMPLE, 1, 1).copies
        self.assertIn(f"child table [0, 1, {copied}]", after)
        self.assertIn(f"lands in block {shared}", block.notes[1])


class RepeatedSentencesAreTables(unittest.TestCase):
    def test_memory_gives_each_layout_a_row_and_keeps_only_the_comparisons_as_sentences(self) -> None:
        from kv_storage_views.memory import memory_view
        block = memory_view(record())
        self.assertIn("Peak ÷ retained", block.tables[0].headings)
        self.assertFalse(any(note.startswith(("concat:", "prealloc:", "paged:")) for note in block.notes))

    def test_grouped_query_shares_are_a_column_not_a_sentence_per_variant(self) -> None:
        from kv_storage_views.grouped_query import gqa_view
        block = gqa_view(record())
        self.assertIn("25%", [row[3] for row in block.tables[0].rows])
        self.assertFalse(any(note.startswith("With ") for note in block.notes))


class KeyResults(unittest.TestCase):
    def test_bullets_follow_the_record(self) -> None:
        base = record()
        items = key_results_view(base).items
        self.assertGreaterEqual(len(items), 5)
        changed = copy.deepcopy(base)
        changed["sharing"]["with"]["blocks"] += 1
        self.assertNotEqual(key_results_view(changed).items, items)

    def test_the_answers_quote_the_record(self) -> None:
        base = record()
        sharing, concat = base["sharing"], base["memory"]["variants"]["concat"]
        self.assertIn(f"= {sharing['with']['blocks']}.", answer_sharing_view(base).paragraphs[0])
        self.assertIn(f"{sharing['with']['copied_blocks']} copies", answer_sharing_view(base).paragraphs[0])
        self.assertIn(f"{concat['peak_bytes']:,} bytes", answer_peak_view(base).paragraphs[0])

    def test_the_regime_bullet_is_chosen_from_the_per_step_medians(self) -> None:
        def timed(per_step_ns: Callable[[int], int]) -> dict[str, Any]:
            """Every cached layout's repetitions equal to ``per_step_ns(length)`` per step; the sweep's figures
            (regimes included) derived again, as the benchmark would."""
            sweep = record()
            sweep["lengths"] = [dict(copy.deepcopy(sweep["lengths"][0]), length=n) for n in (16, 64, 256)]
            for entry in sweep["lengths"]:
                for mode in ("concat", "prealloc", "paged"):
                    values = entry["modes"][mode]
                    values["durations_ns"] = [per_step_ns(entry["length"]) * entry["steps"]] * len(values["durations_ns"])
            fill(sweep, sweep_figures(sweep))
            return sweep

        self.assertTrue(regime_item(timed(lambda length: 1000)).startswith("Overhead-bound"))
        growing = timed(lambda length: 1000 * length)
        self.assertTrue(regime_item(growing).startswith("No flat span"))
        self.assertIsNone(re.search(r"\d+-fold", regime_item(growing)))


if __name__ == "__main__":
    unittest.main()
