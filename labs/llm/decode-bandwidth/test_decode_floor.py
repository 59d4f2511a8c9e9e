"""The floor's byte accounting matches the model's own tensors; the bandwidth measurement is STREAM-shaped."""

from __future__ import annotations

import math
import tempfile
import unittest
from pathlib import Path

import torch

from decode_bandwidth import benchmark, equivalence, profile, traffic
from decode_bandwidth.bandwidth import (
    MIN_STREAM_BYTES,
    QUICK_STREAM_BYTES,
    kv_crossover,
    last_level_cache_bytes,
    read_bandwidth,
    read_kernels,
    step_bytes,
    stream_buffer_bytes,
    weight_bytes,
)
from decode_bandwidth.cache import PreallocatedCache
from decode_bandwidth.config import preset
from decode_bandwidth.figures import formulas, hardware_figures
from decode_bandwidth.floors import COMPILED_COLUMNS, MATVEC_COLUMNS, READ_KERNELS, STREAMS, kernel_bytes
from decode_bandwidth.grid import ATOL, LAYOUT, MODES, RTOL
from decode_bandwidth.model import DecoderLayer
from decode_bandwidth.profile import kind_bytes
from decode_bandwidth.testing import tiny_model, token_ids
from decode_bandwidth.traffic import KINDS
from labkit.figures import Figures
from llm_models.kernels.row_dot import row_dot


class ByteAccounting(unittest.TestCase):
    def test_weight_bytes_are_every_parameter_but_the_position_table(self) -> None:
        for overrides in ({}, {"kv_heads": 2}, {"dtype": torch.bfloat16}):
            model = tiny_model(**overrides)
            every = sum(p.numel() * p.element_size() for p in model.parameters())
            positions = model.position.numel() * model.position.element_size()  # looked up one row at a time
            self.assertEqual(weight_bytes(model.config), every - positions, overrides)

    def test_the_head_is_counted_once_because_it_is_the_token_embedding(self) -> None:
        model = tiny_model()
        names = [name for name, _ in model.named_parameters()]
        self.assertIn("tied_head", names)
        self.assertFalse(any("token" in name or "embed" in name for name in names))

    def test_kv_bytes_read_are_the_bytes_of_the_cache_the_step_attends_over(self) -> None:
        model = tiny_model(kv_heads=2)
        ids = token_ids(model.config, batch=3, length=9)
        cache = PreallocatedCache(model.config, 3, 9)
        with torch.inference_mode():
            model(ids[:, :8], cache)
            _, concat = model(ids)  # every layer's keys and values over the 9 attended positions
        attended = sum(t.numel() * t.element_size() for pair in concat for t in pair)
        needed = step_bytes(model.config, batch=3, context=9)
        self.assertEqual(needed.kv_read, attended)
        self.assertEqual(needed.kv_written, attended // 9)  # one position, every layer
        self.assertEqual(needed.embedding_rows, 4 * model.config.width * 4)  # 3 token rows + 1 position row

    def test_profile_kinds_add_up_to_the_step_bytes(self) -> None:
        config = preset("tiny")
        needed = kind_bytes(config, batch=2, context=20)
        self.assertEqual(sum(needed.values()), step_bytes(config, 2, 20).total)

    def test_kv_reads_overtake_weight_reads_past_the_crossover(self) -> None:
        config = preset("gpt2-small")
        crossover = kv_crossover(config)  # 494,613,504 / 73,728 = 6,708.6 positions
        self.assertAlmostEqual(crossover, 494_613_504 / 73_728)
        below, above = step_bytes(config, 16, math.floor(crossover / 16)), step_bytes(config, 16, math.ceil(crossover / 16))
        self.assertLess(below.kv_read, below.weights)
        self.assertGreater(above.kv_read, above.weights)

    def test_contexts_beyond_the_position_table_are_refused(self) -> None:
        with self.assertRaises(ValueError) as caught:
            step_bytes(preset("tiny"), 1, 65)
        self.assertIn("got 1 and 65", str(caught.exception))


class OneHome(unittest.TestCase):
    """The torch modules use decode_bandwidth.figures' constants and formulas, which the site checks with."""

    def test_the_torch_modules_hold_the_figures_modules_objects(self) -> None:
        self.assertIs(DecoderLayer.LAYOUT, LAYOUT)
        self.assertIs(profile.KINDS, KINDS)
        self.assertIs(benchmark.MODES, MODES)
        self.assertEqual((equivalence.ATOL, equivalence.RTOL), (ATOL, RTOL))

    def test_the_step_bytes_of_a_config_are_the_formula_on_its_record(self) -> None:
        for config in (preset("gpt2-small"), preset("tiny", kv_heads=2), preset("tiny", dtype=torch.bfloat16)):
            record = config.as_record()
            self.assertEqual(step_bytes(config, 4, 17).as_record(),
                             traffic.step_bytes(record, record["bytes_per_element"], 4, 17))


class Bandwidth(unittest.TestCase):
    def test_the_buffer_is_at_least_four_times_the_cache_and_never_under_256_mib(self) -> None:
        self.assertEqual(stream_buffer_bytes(None), MIN_STREAM_BYTES)
        self.assertEqual(stream_buffer_bytes(32 * 2**20), 256 * 2**20)
        self.assertEqual(stream_buffer_bytes(128 * 2**20), 512 * 2**20)

    def test_a_quick_runs_buffer_is_small_whatever_the_cache(self) -> None:
        for llc in (None, 32 * 2**20, 480 * 2**20):
            self.assertEqual(stream_buffer_bytes(llc, quick=True), QUICK_STREAM_BYTES)

    def test_the_last_level_cache_is_the_highest_level_sysfs_lists(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            for index, (level, size) in enumerate(((1, "32K"), (2, "1024K"), (3, "32768K"))):
                entry = Path(folder) / f"index{index}"
                entry.mkdir()
                (entry / "level").write_text(f"{level}\n")
                (entry / "size").write_text(f"{size}\n")
            size, source = last_level_cache_bytes(Path(folder))
        self.assertEqual(size, 32 * 2**20)
        self.assertIn("level 3", source)

    def test_every_read_kernel_is_timed_over_the_buffer_and_the_floor_takes_the_fastest(self) -> None:
        buffer = 4 * STREAMS * MATVEC_COLUMNS * 4
        measured = read_bandwidth(buffer, passes=10)
        self.assertEqual(sorted(measured["kernels"]), sorted(READ_KERNELS))
        for name, kernel in measured["kernels"].items():
            self.assertEqual(len(kernel["durations_ns"]), 10)
            self.assertEqual(kernel["bytes"], kernel_bytes(name, buffer))
        machine = {"bandwidth": {"1": measured}, "matmul": {}}
        found = Figures()
        rates = hardware_figures(machine, found)
        stored = {figure.path: figure.value for figure in found}
        best = {name: kernel["bytes"] / min(kernel["durations_ns"]) * 1e9 for name, kernel in measured["kernels"].items()}
        fastest = max(best, key=lambda name: best[name])
        self.assertEqual(stored[("hardware", "bandwidth", "1", "best_kernel")], fastest)
        self.assertAlmostEqual(rates[("bandwidth", "1")], best[fastest])

    def test_the_read_kernels_compute_what_they_claim_to_read(self) -> None:
        buffer = torch.arange(STREAMS * MATVEC_COLUMNS * 2, dtype=torch.float32)
        kernels = read_kernels(buffer, row_dot)  # the eager function: the compiled one is the same code
        half = buffer.numel() // 2
        self.assertEqual(float(kernels["sum"]()), float(buffer.sum()))
        self.assertEqual(float(kernels["dot"]()), float(torch.dot(buffer[:half], buffer[half:])))
        self.assertTrue(torch.equal(kernels["streams"](), buffer.view(STREAMS, -1).sum(0)))
        self.assertEqual(kernels["matvec"]().numel(), buffer.numel() // MATVEC_COLUMNS)
        whole = kernel_bytes("compiled", buffer.numel() * 4) // 4  # the values in whole rows
        self.assertGreater(whole, buffer.numel() - COMPILED_COLUMNS)
        rows = buffer[:whole].view(-1, COMPILED_COLUMNS)
        torch.testing.assert_close(kernels["compiled"]().view(-1), rows.sum(-1), rtol=1e-6, atol=0)


if __name__ == "__main__":
    unittest.main()


def beside_record(groups_ns: list[int], best_ns: int = 100_000_000) -> dict:
    """A hardware section read at one thread count (two kernels over 1 GB, best pass ``best_ns``) and one headline
    group per entry of ``groups_ns``, its floor read in that many nanoseconds by its faster kernel."""
    kernels = {"sum": {"bytes": 10**9, "durations_ns": [best_ns] * 10},
               "dot": {"bytes": 10**9, "durations_ns": [2 * best_ns] * 10}}
    return {"hardware": {"bandwidth": {"1": {"buffer_bytes": 10**9, "passes": 10, "kernels": kernels}}, "matmul": {}},
            "groups": [{"threads": 1, "floor_ns": {"sum": ns, "dot": 3 * ns}} for ns in groups_ns],
            "llama": {"groups": []}}


def with_stability(record: dict) -> dict:
    """``record`` with its hardware rates and the floors' stability figures filled in, as a view reads it."""
    from decode_bandwidth.figures.derivation import floor_stability

    found = Figures()
    floor_stability(record, hardware_figures(record["hardware"], found), found)
    for figure in found:
        *parents, name = figure.path
        place = record
        for key in parents:
            place = place.setdefault(key, {}) if isinstance(place, dict) else place[key]
        place[name] = figure.value
    return record


class FloorBesideEachGroup(unittest.TestCase):
    def test_a_groups_floor_is_its_own_passes_fastest_kernel(self) -> None:
        from decode_bandwidth.figures.derivation import beside_rate

        record = beside_record([125_000_000])
        self.assertAlmostEqual(beside_rate(record["hardware"], record["groups"][0]), 10**9 / 0.125)

    def test_the_floors_drift_is_derived_from_every_read(self) -> None:
        record = with_stability(beside_record([100_000_000, 104_000_000, 108_000_000]))
        beside = record["hardware"]["bandwidth"]["1"]["beside"]
        self.assertNotIn("stable", beside)  # drift is stated, never judged against a limit
        self.assertAlmostEqual(beside["drift"], 1 - 100 / 108)
        self.assertAlmostEqual(beside["median_over_best"], 1.04)

    def test_a_trained_groups_rounds_count_in_the_drift(self) -> None:
        record = beside_record([100_000_000])
        record["llama"]["groups"] = [{"threads": 1, "round_floor": {"kernel": "sum",
                                                                   "durations_ns": [100_000_000, 150_000_000]}}]
        beside = with_stability(record)["hardware"]["bandwidth"]["1"]["beside"]
        self.assertEqual(beside["groups"], 3)
        self.assertAlmostEqual(beside["drift"], 1 - 100 / 150)

    def test_no_drift_refuses_a_reference_run(self) -> None:
        import inspect

        from decode_bandwidth import benchmark

        self.assertFalse(hasattr(formulas, "unsteady_floor"))
        self.assertNotIn("refuse_reference", inspect.getsource(benchmark.main))

    def test_the_page_states_the_drift_in_both_cases(self) -> None:
        from decode_bandwidth_views.floor import beside_sentence

        steady = beside_sentence(with_stability(beside_record([100_000_000, 108_000_000]))["hardware"])
        self.assertIn("9.3–10.0 GB/s at 1 thread (drift 7% over 2 reads", steady)
        wandered = beside_sentence(with_stability(beside_record([100_000_000, 150_000_000]))["hardware"])
        self.assertIn("6.7–10.0 GB/s at 1 thread (drift 33% over 2 reads", wandered)
        for sentence in (steady, wandered):
            self.assertIn("moves both sides of it", sentence)
            self.assertNotIn("steady", sentence)


def sized_record(step_ns: list[int], large_ns: list[int], llc: int | None) -> dict:
    """A record with one thread count's step-sized and large reads (one kernel, 1 GB each) and its figures."""
    from decode_bandwidth.figures.derivation import step_sized_figures
    from llm_models.llama.config import LlamaDecoderConfig

    record = {"hardware": {"last_level_cache_bytes": llc, "buffer_bytes": 10**9,
                           "step_sized": {"step_bytes": 10**9, "buffer_bytes": 10**9,
                                          "threads": {"1": {"rounds": len(step_ns), "step_ns": {"sum": step_ns},
                                                            "large_ns": {"sum": large_ns}}}}},
              "llama": {"model": LlamaDecoderConfig().as_record()}}
    found = Figures()
    step_sized_figures(record, found)
    for figure in found:
        *parents, name = figure.path
        place = record
        for key in parents:
            place = place[key]
        place[name] = figure.value
    return record


class StepSizedFloor(unittest.TestCase):
    """Which floor bounds the trained step: said from the paired reads, in each of the three cases."""

    def sentence(self, step_ns: list[int], large_ns: list[int], llc: int | None = 32 * 2**20) -> str:
        from decode_bandwidth_views.floor import step_sized_sentence

        return step_sized_sentence({"hardware": sized_record(step_ns, large_ns, llc)["hardware"]})

    def test_reads_that_agree_leave_the_large_buffers_floor_as_the_bound(self) -> None:
        text = self.sentence([100, 102, 98, 101, 99], [100, 99, 101, 100, 102])
        self.assertIn("agree within their rounds' middle half, so the large buffer's floor bounds the step", text)
        self.assertIn("larger than the 33.6 MB last-level cache: no step can keep them there", text)

    def test_a_faster_step_sized_read_is_the_safer_bound(self) -> None:
        text = self.sentence([80, 82, 79, 81, 80], [100, 99, 101, 100, 102])
        self.assertIn("the read the size of the step ran faster", text)
        self.assertIn("1.25×", text)

    def test_a_slower_step_sized_read_leaves_the_large_floor_lower(self) -> None:
        self.assertIn("ran slower, so the large buffer's floor is the lower", self.sentence([120] * 5, [100] * 5))

    def test_weights_that_fit_in_the_cache_are_said_to(self) -> None:
        self.assertIn("they fit in it, so part of a step's bytes can come from cache",
                      self.sentence([100] * 5, [100] * 5, llc=2**30))
        self.assertNotIn("last-level cache", self.sentence([100] * 5, [100] * 5, llc=None))
