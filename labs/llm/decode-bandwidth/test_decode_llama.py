"""The Llama part of the decode benchmark: its byte formula counts what the decoder holds, its two timed steps
agree before timing, a wrong decoder is refused, and each reset puts the cache back where the step found it.

A tiny random Llama (llm_models.llama.tiny.TINY) carries the mechanics; one test loads the trained SmolLM2-135M
from the weight cache the KV-cache lab's tests already use."""

from __future__ import annotations

import unittest

import torch

from decode_bandwidth import llama
from decode_bandwidth.figures import formulas
from decode_bandwidth.llama_modes import LLAMA_ATOL, LLAMA_RTOL
from decode_bandwidth.traffic import step_bytes
from kv_cache.broken import RotaryResetDecoder
from labkit.bench import EquivalenceError
from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.model import LlamaDecoder
from llm_models.llama.tiny import tiny_pair
from llm_models.llama.traffic import llama_head_bytes, llama_step_bytes, llama_weight_bytes

SIZE = 4  # float32


def unique_parameter_bytes(model: torch.nn.Module) -> int:
    """Every tensor the decoder holds, each storage once (the tied head is the embedding's storage)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


class ByteFormula(unittest.TestCase):
    reference, model = tiny_pair(seed=0)

    def test_the_weight_bytes_are_every_parameter_the_decoder_holds_with_the_tied_head_counted_once(self) -> None:
        record = self.model.config.as_record()
        self.assertIs(self.model.head, self.model.embedding)
        self.assertEqual(llama_weight_bytes(record, SIZE), unique_parameter_bytes(self.model))
        self.assertEqual(llama_step_bytes(record, SIZE, 1, 8)["embedding_rows"], 0)

    def test_smollm2s_config_gives_its_134_515_008_parameters_and_a_49_152_by_576_head(self) -> None:
        record = LlamaDecoderConfig().as_record()  # the defaults are SmolLM2-135M's; no weights are loaded
        self.assertEqual(llama_weight_bytes(record, SIZE), 134_515_008 * SIZE)
        self.assertEqual(llama_head_bytes(record, SIZE), 49_152 * 576 * SIZE)

    def test_the_kv_bytes_are_the_cache_the_decoder_allocates_with_its_key_value_heads(self) -> None:
        context = 10
        cache = self.model.new_cache(2, context)
        held = sum(t.numel() * t.element_size() for store in cache for t in (store.keys, store.values))
        needed = llama_step_bytes(self.model.config.as_record(), SIZE, 2, context)
        self.assertEqual(needed["kv_read"], held)  # T positions of every layer's keys and values, read
        self.assertEqual(needed["kv_written"] * context, held)  # one position of them, written
        config = self.model.config
        self.assertEqual(cache[0].keys.shape[1], config.kv_heads)
        self.assertLess(config.kv_heads, config.heads)  # grouped: the cache holds fewer heads than the queries use

    def test_the_contrast_sets_grouped_query_heads_against_one_key_value_head_per_query_head(self) -> None:
        llama_config = LlamaDecoderConfig().as_record()
        gpt2 = {"vocab_size": 50_257, "width": 768, "layers": 12, "heads": 12, "kv_heads": 12, "head_dim": 64,
                "ffn_multiplier": 4, "max_positions": 1024}
        rows = formulas.contrast(gpt2, llama_config, SIZE, 512)
        self.assertEqual(rows["gpt2"]["kv_bytes_per_position"], 2 * 12 * 12 * 64 * SIZE)
        self.assertEqual(rows["llama"]["kv_bytes_per_position"], 2 * 30 * 3 * 64 * SIZE)
        self.assertEqual(rows["llama"]["head_bytes"], 49_152 * 576 * SIZE)
        self.assertAlmostEqual(rows["llama"]["batch_x_context"],
                               rows["llama"]["weight_bytes"] / rows["llama"]["kv_bytes_per_position"])
        self.assertEqual((rows["llama"]["queries_per_kv_head"], rows["llama"]["kv_heads_x_layers"]), (3, 90))
        self.assertAlmostEqual(rows["ratios"]["kv_bytes_per_position"], (30 * 3) / (12 * 12))
        for name, step in (("gpt2", step_bytes(gpt2, SIZE, 1, 512)),
                           ("llama", llama_step_bytes(llama_config, SIZE, 1, 512))):
            row = rows[name]  # the bar's three segments: every byte of the step, each once
            self.assertEqual(row["layer_bytes"] + row["head_bytes"] + row["step_kv_bytes"], step["total"])
            self.assertEqual(row["step_total_bytes"], step["total"])


class TimedSteps(unittest.TestCase):
    reference, model = tiny_pair(seed=0)

    def runners(self, model: LlamaDecoder, context: int) -> tuple[dict, list]:
        return llama.step_runners(model, self.reference, context, torch.Generator().manual_seed(3))

    def test_both_steps_give_the_same_logits_at_every_context_checked(self) -> None:
        with torch.inference_mode():
            for context in (1, 2, 9, 33):
                with self.subTest(context=context):
                    entry = llama.check_step(*self.runners(self.model, context), context)
                    self.assertTrue(entry["within_tolerance"])
                    bound = LLAMA_ATOL + LLAMA_RTOL * entry["max_abs_reference"]
                    self.assertLessEqual(entry["max_abs_diff"], bound)

    def test_a_decoder_that_restarts_rotary_positions_at_zero_is_refused_before_timing(self) -> None:
        broken = RotaryResetDecoder(self.model.config, self.reference.state_dict())
        with torch.inference_mode(), self.assertRaises(EquivalenceError) as refused:
            llama.check_step(*self.runners(broken, 24), 24)
        self.assertIn("context 24", str(refused.exception))

    def test_each_reset_rewinds_the_cache_so_every_repetition_repeats_the_same_step(self) -> None:
        context = 12
        runners, held = self.runners(self.model, context)
        with torch.inference_mode():
            for mode, (step, reset) in runners.items():
                with self.subTest(mode=mode):
                    step()
                    first = held[-1].clone()
                    reset()
                    self.assertEqual(held, [])  # the logits are freed by the reset, outside the clock
                    step()
                    torch.testing.assert_close(held[-1], first, atol=0, rtol=0)
                    reset()


class MeasuredAgain(unittest.TestCase):
    """The benchmark measures again the group whose floor reads ran slowed, the most slowed first, up to its limit,
    and keeps measuring nothing once every group's reads sit near the fastest."""

    @staticmethod
    def run_groups(reads: dict[tuple[int, int], list[float]]) -> tuple[dict, list[tuple[int, int, int]]]:
        """measured_groups over fake groups: each attempt's rounds read at the next rate ``reads`` lists for it."""
        from labkit.harness import Progress

        calls: list[tuple[int, int, int]] = []

        def measure(threads: int, context: int, attempt: int) -> dict:
            calls.append((threads, context, attempt))
            return {"rate": reads[(threads, context)][attempt]}

        progress = Progress(len(reads))
        try:
            found = llama.measured_groups(list(reads), measure, lambda attempt: [attempt["rate"]] * 3, progress, 1)
        finally:
            progress.close()
        return found, calls

    def test_a_quiet_run_measures_each_group_once(self) -> None:
        _, calls = self.run_groups({(1, 128): [10.0], (1, 512): [9.5], (2, 128): [19.0]})
        self.assertEqual(calls, [(1, 128, 0), (1, 512, 0), (2, 128, 0)])

    def test_the_slowed_group_is_measured_again_until_its_reads_recover(self) -> None:
        found, calls = self.run_groups({(1, 128): [10.0], (1, 512): [3.0, 5.0, 9.8, 1.0], (2, 128): [19.0]})
        self.assertEqual(calls[3:], [(1, 512, 1), (1, 512, 2)])  # 70% then 50% under; its third read 2% under
        self.assertEqual([a["rate"] for a in found[(1, 512)]], [3.0, 5.0, 9.8])

    def test_no_more_than_the_limit_is_measured_again(self) -> None:
        from decode_bandwidth.llama_modes import LLAMA_REMEASURE

        _, calls = self.run_groups({(1, 128): [10.0], (1, 512): [1.0] * (LLAMA_REMEASURE + 2)})
        self.assertEqual(len(calls), 2 + LLAMA_REMEASURE)


class Rewind(unittest.TestCase):
    def test_rewinding_our_cache_sets_every_layer_back_to_the_same_length(self) -> None:
        _, model = tiny_pair(seed=1)
        cache = model.new_cache(1, 8)
        with torch.inference_mode():
            model(torch.zeros(1, 6, dtype=torch.long), cache)
        llama.rewind_ours(cache, 3)
        self.assertEqual({store.length for store in cache}, {3})


class TrainedWeights(unittest.TestCase):
    def test_the_smollm2_preset_is_the_trained_model_and_its_two_steps_agree(self) -> None:
        model, reference, weights, _ = llama.llama_pair("smollm2", seed=0)  # from the weight cache: about a second
        self.assertTrue(weights["trained"])
        self.assertEqual(model.config, LlamaDecoderConfig())
        self.assertEqual(llama_weight_bytes(model.config.as_record(), SIZE), unique_parameter_bytes(model))
        runners = llama.step_runners(model, reference, 64, torch.Generator().manual_seed(0))
        with torch.inference_mode():
            entry = llama.check_step(*runners, 64)
        self.assertTrue(entry["within_tolerance"])


if __name__ == "__main__":
    unittest.main()
