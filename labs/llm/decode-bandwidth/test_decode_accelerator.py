"""The accelerator arithmetic: one formula, two machines' figures, and every sentence worded from the comparison."""

from __future__ import annotations

import copy
import dataclasses
import unittest
from typing import Any

from decode_bandwidth import accelerator
from decode_bandwidth_views import VIEWS
from decode_bandwidth_views.accelerator import carry_over
from labkit.manifest import lab_for
from labkit.testing import committed_record
from llm_models import accelerator as shared
from llm_models.hardware import H100_SXM
from llm_models.kv_bytes import BYTES_PER_ELEMENT, kv_bytes
from llm_models.llama.traffic import llama_step_bytes, llama_weight_bytes
from llm_models.published import model as published_model
from site_hooks.blocks import render_block

LAB, ROOT = lab_for(__file__)
RECORD = committed_record(__file__)


def with_cpu_rate(record: dict[str, Any], flops_per_s: float) -> dict[str, Any]:
    """The record with every measured matrix rate of the headline thread count set to ``flops_per_s``."""
    record = copy.deepcopy(record)
    threads = record["config"]["benchmark"]["threads"]
    for key, entry in record["hardware"]["matmul"].items():
        if key.endswith(f"/{threads}"):
            entry["flops_per_s"] = flops_per_s
    return record


class Arithmetic(unittest.TestCase):
    def test_the_ridge_points_are_each_machines_flops_over_its_bandwidth(self) -> None:
        cpu, device = accelerator.compare(RECORD).machines
        threads = RECORD["config"]["benchmark"]["threads"]
        self.assertEqual(cpu.bandwidth_bytes_per_s, RECORD["hardware"]["bandwidth"][str(threads)]["bytes_per_s"])
        self.assertEqual(cpu.flops_per_s, max(e["flops_per_s"] for k, e in RECORD["hardware"]["matmul"].items()
                                              if k.endswith(f"/{threads}")))
        self.assertAlmostEqual(device.ridge_flops_per_byte, H100_SXM.bf16_flops_per_s / H100_SXM.bandwidth_bytes_per_s)
        self.assertTrue(cpu.measured and not device.measured)

    def test_the_turn_to_compute_bound_is_the_first_batch_whose_flops_outlast_its_bytes(self) -> None:
        model = shared.llama_model(published_model(shared.MODEL))
        device = shared.accelerator()
        batch = shared.compute_bound_batch(device, model, accelerator.SHORT_CONTEXT)
        assert batch is not None
        for b, bound in ((batch - 1, False), (batch, True)):
            needed = llama_step_bytes(model, 2, b, accelerator.SHORT_CONTEXT)
            self.assertEqual(needed["flops"] / device.flops_per_s >= needed["total"] / device.bandwidth_bytes_per_s,
                             bound, b)
        # At 8k tokens each sequence's own cache is read for its own flops: the ratio stays below the ridge.
        self.assertIsNone(shared.compute_bound_batch(device, model, shared.LONG_CONTEXT))

    def test_sequences_that_fit_are_the_memory_left_beside_the_weights_over_one_sequences_cache(self) -> None:
        entry = published_model(shared.MODEL)
        model = shared.llama_model(entry)
        device = shared.accelerator()
        per_sequence = kv_bytes(model, BYTES_PER_ELEMENT["bfloat16"], 1, shared.LONG_CONTEXT)
        expected = int((H100_SXM.memory_bytes - entry["parameters"] * 2) // per_sequence)
        self.assertEqual(shared.sequences_that_fit(device, entry, model, shared.LONG_CONTEXT), expected)
        self.assertGreater(expected, 10)
        self.assertIsNone(shared.sequences_that_fit(accelerator.this_cpu(RECORD), entry, model, 8192))

    def test_a_step_reads_the_published_parameters_less_the_untied_embedding_table(self) -> None:
        """Capacity counts every parameter; a step reads all but the token embedding's unread rows."""
        entry = published_model(shared.MODEL)
        model = shared.llama_model(entry)
        self.assertFalse(model["tie_embeddings"])
        self.assertEqual(llama_weight_bytes(model, 2) + model["vocab_size"] * model["width"] * 2,
                         entry["parameters"] * 2)

    def test_the_table_is_labelled_arithmetic_and_links_its_sources(self) -> None:
        html = render_block(VIEWS["accelerator"](RECORD))
        self.assertIn("not a measurement", html)
        self.assertIn(f'href="{H100_SXM.source}"', html)
        self.assertIn(f'href="{published_model(shared.MODEL)["config"]}"', html)
        self.assertIn("not recorded", html)  # this CPU's memory: no invented figure


# The committed record's CPU at fixed rates (100 GFLOP/s in every dtype, 20 GB/s): the wording tests below must not
# turn on what the machine that last measured the record could do (its ridge is this CPU's, far below an H100's).
FIXED = with_cpu_rate(RECORD, 100e9)
FIXED["hardware"]["bandwidth"][str(FIXED["config"]["benchmark"]["threads"])]["bytes_per_s"] = 20e9


class Wording(unittest.TestCase):
    def lessons(self, record: dict[str, Any]) -> str:
        return " ".join(VIEWS["accelerator-lessons"](record).items)

    def takeaway(self, record: dict[str, Any]) -> str:
        return " ".join(VIEWS["accelerator-takeaway"](record).paragraphs)

    def test_batch_one_waits_on_bytes_on_both_unless_a_machine_multiplies_too_slowly(self) -> None:
        self.assertIn("Batch 1 waits on bytes on both machines", self.lessons(FIXED))
        self.assertIn("the byte floor at batch 1 carries over", self.takeaway(FIXED))
        slow = with_cpu_rate(FIXED, 1e6)  # a CPU whose ridge sits far below a batch-1 step's flops per byte
        self.assertIn("Batch 1 is already bound by arithmetic on this CPU", self.lessons(slow))
        self.assertNotIn("waits on bytes on both", self.lessons(slow))
        self.assertIn("even batch 1 is not bound by bytes on both", self.takeaway(slow))

    def test_batching_is_said_to_invert_only_where_this_cpu_turns_compute_bound_far_sooner(self) -> None:
        self.assertEqual(accelerator.compare(FIXED).sooner, "cpu")
        self.assertIn("Batching inverts", self.lessons(FIXED))
        self.assertIn("the price of batching does not", self.takeaway(FIXED))
        self.assertIn("higher than this CPU's", self.takeaway(FIXED))
        cpu = accelerator.this_cpu(FIXED)
        device_ridge = H100_SXM.bf16_flops_per_s / H100_SXM.bandwidth_bytes_per_s
        # Half the accelerator's ridge: float32 moves twice the bytes per flop, so both turn at the same batch.
        alike = with_cpu_rate(FIXED, device_ridge / 2 * cpu.bandwidth_bytes_per_s)
        self.assertEqual(accelerator.compare(alike).sooner, "alike")
        self.assertIn("Batching turns compute-bound at about the same size on both", self.lessons(alike))
        self.assertNotIn("inverts", self.lessons(alike))
        self.assertIn("so does where batching turns compute-bound", self.takeaway(alike))
        self.assertIn("2× higher than this CPU's", self.takeaway(alike))
        close = with_cpu_rate(FIXED, device_ridge * cpu.bandwidth_bytes_per_s)
        self.assertIn("close to this CPU's", self.takeaway(close))
        # A CPU that multiplies so fast it never turns within the search: the accelerator turns sooner.
        fast = with_cpu_rate(FIXED, cpu.bandwidth_bytes_per_s * 10_000)
        self.assertEqual(accelerator.compare(fast).short_batch[0], None)
        self.assertEqual(accelerator.compare(fast).sooner, "accelerator")
        self.assertIn("Batching costs arithmetic sooner there", self.lessons(fast))
        self.assertIn("this CPU never (up to batch 4,096)", self.lessons(fast))
        self.assertIn("batching costs arithmetic sooner there", self.takeaway(fast))
        self.assertIn("lower than this CPU's", self.takeaway(fast))

    def test_the_long_context_sentence_appears_only_where_no_batch_turns_the_accelerator(self) -> None:
        self.assertIn("no batch turns the accelerator compute-bound", self.lessons(FIXED))
        device = shared.accelerator()
        weak = dataclasses.replace(device, flops_per_s=device.bandwidth_bytes_per_s)  # a ridge of one flop per byte
        comparison = accelerator.compare(FIXED)
        model = shared.llama_model(published_model(shared.MODEL))
        long_batch = shared.compute_bound_batch(weak, model, shared.LONG_CONTEXT)
        self.assertIsNotNone(long_batch)
        changed = dataclasses.replace(comparison, machines=(comparison.machines[0], weak),
                                      long_batch=(comparison.long_batch[0], long_batch))
        self.assertNotIn("no batch turns the accelerator", " ".join(carry_over(changed)))


if __name__ == "__main__":
    unittest.main()
