"""Batched paged decoding gives each request what it would get alone: the random model and the Llama decoder."""

from __future__ import annotations

import math
import threading
import unittest
import unittest.mock
from collections.abc import Callable
from dataclasses import replace

import torch
from transformers import LlamaConfig

from kv_serving.benchmark import equivalence_gate
from kv_serving.testing import TINY_BLOCK, TINY_LAYERS, TINY_MODEL
from kv_serving.trained_load import prompt_ids
from labkit.bench import EquivalenceError
from labkit.waiting import HANG_S
from llm_models.attention import causal_attention
from llm_models.kv_bytes import kv_cache_bytes
from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.generate import smollm2
from llm_models.llama.model import LlamaDecoder
from llm_models.llama.native_step import NativeStep
from llm_models.llama.tiny import TINY, tiny_pair, tiny_reference
from llm_models.serving import llama as serving_llama
from llm_models.serving.dtypes import ROW_STEPS, TRAINED_TOLERANCES, bfloat16_step, difference_bound
from llm_models.serving.engine import EngineConfig
from llm_models.serving.kernels import dump_timings, ranking, timings_of
from llm_models.serving.llama import LlamaServingModel
from llm_models.serving.model import PackedPrompts, ServingModel, greedy_together
from llm_models.serving.pool import LayeredPool, pool_block_bytes
from llm_models.toy.equivalence import ATOL, RTOL
from llm_models.toy.model import DecoderBlock

# NOTE: the kernel table's timings supplied, so every host runs the same kernels (each pick is tested against the
# others in test_serving_kernels): one row by an (in, out) copy, several by oneDNN's packed copy where it runs.
KERNEL_NS = ranking("in_out", "onednn")


def prompts(lengths: tuple[int, ...], seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, TINY_MODEL.vocab_size, (n,), generator=generator).tolist() for n in lengths]


def poisoned_pool(blocks: int = 40) -> LayeredPool:
    """A pool whose never-written slots hold huge values: any unmasked padding would show in the logits."""
    pool = LayeredPool(TINY_MODEL, TINY_LAYERS, blocks, TINY_BLOCK)
    pool.blocks.keys.fill_(1e4)
    pool.blocks.values.fill_(-1e4)
    return pool


class BatchedDecodeTest(unittest.TestCase):
    def setUp(self) -> None:
        self.model = ServingModel(TINY_MODEL, TINY_LAYERS)

    def test_one_layer_stack_is_the_first_labs_decoder_block(self) -> None:
        model = ServingModel(TINY_MODEL, 1)
        ids = prompts((11,))[0]
        expected = DecoderBlock(TINY_MODEL)(torch.tensor([ids]))[0][0, -1]
        torch.testing.assert_close(model.reference_logits(ids), expected, atol=0, rtol=0)

    def test_paged_prefill_and_decode_match_full_prefix_recompute_at_every_step(self) -> None:
        prompt = prompts((9,))[0]
        tokens, logits = greedy_together(self.model, poisoned_pool(), [prompt], steps=12)
        for step in range(13):
            expected = self.model.reference_logits(prompt + tokens[0][:step])
            torch.testing.assert_close(logits[0][step], expected, atol=ATOL, rtol=RTOL)

    def test_tokens_and_logits_alone_equal_batched_with_requests_of_other_lengths(self) -> None:
        batch = prompts((3, 17, 1, 30, 8), seed=1)  # lengths cross block boundaries differently
        together, together_logits = greedy_together(self.model, poisoned_pool(), batch, steps=10)
        for b, prompt in enumerate(batch):
            alone, alone_logits = greedy_together(self.model, poisoned_pool(), [prompt], steps=10)
            self.assertEqual(together[b], alone[0], f"request {b} (prompt {len(prompt)})")
            torch.testing.assert_close(together_logits[b], alone_logits[0], atol=ATOL, rtol=RTOL)

    def test_requests_in_scattered_blocks_still_read_only_their_own_keys(self) -> None:
        pool = poisoned_pool()
        pool.allocate(7)  # another tenant holds the first blocks: these requests get later, scattered ones
        batch = prompts((5, 13), seed=2)
        scattered, logits = greedy_together(self.model, pool, batch, steps=6)
        fresh, fresh_logits = greedy_together(self.model, poisoned_pool(), batch, steps=6)
        self.assertEqual(scattered, fresh)
        for a, b in zip(logits, fresh_logits):
            torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)

    def test_forced_tokens_are_fed_in_place_of_the_runs_own_choices(self) -> None:
        prompt = prompts((9,), seed=4)[0]
        own, own_logits = greedy_together(self.model, poisoned_pool(), [prompt], steps=5)
        replayed, replayed_logits = greedy_together(self.model, poisoned_pool(), [prompt], steps=5, forced=own)
        self.assertEqual(replayed, own)  # fed its own choices, a run is unchanged
        torch.testing.assert_close(replayed_logits[0], own_logits[0], atol=0, rtol=0)
        other = [[(t + 1) % TINY_MODEL.vocab_size for t in own[0]]]
        _, other_logits = greedy_together(self.model, poisoned_pool(), [prompt], steps=5, forced=other)
        torch.testing.assert_close(other_logits[0][0], own_logits[0][0], atol=0, rtol=0)  # the prompt's logits
        self.assertFalse(torch.equal(other_logits[0][1:], own_logits[0][1:]))  # then the other tokens' own
        with self.assertRaisesRegex(ValueError, "forced needs 6 tokens for each of 1 requests, got \\[5\\]"):
            greedy_together(self.model, poisoned_pool(), [prompt], steps=5, forced=[own[0][:5]])

    def test_packed_prompts_that_saw_each_others_keys_would_be_caught(self) -> None:
        batch = prompts((6, 9), seed=3)
        alone = [greedy_together(self.model, poisoned_pool(), [p], steps=0)[1][0][0] for p in batch]

        def one_causal_sequence(packed: PackedPrompts, layer: int, q: torch.Tensor, k: torch.Tensor,
                                v: torch.Tensor) -> torch.Tensor:  # broken: the second prompt sees the first
            for slot, (start, end) in zip(packed.slots, packed.bounds):
                slot.write(layer, k[:, :, start:end], v[:, :, start:end])
            return causal_attention(q, k, v, 0)

        with unittest.mock.patch.object(PackedPrompts, "attend", one_causal_sequence):
            leaked = greedy_together(self.model, poisoned_pool(), batch, steps=0)[1]
        torch.testing.assert_close(leaked[0][0], alone[0], atol=ATOL, rtol=RTOL)  # the first sees nothing earlier
        self.assertGreater(float((leaked[1][0] - alone[1]).abs().max()), 100 * ATOL)
        packed = greedy_together(self.model, poisoned_pool(), batch, steps=0)[1]
        for b in range(2):
            torch.testing.assert_close(packed[b][0], alone[b], atol=ATOL, rtol=RTOL)

    def test_decode_refuses_a_table_too_short_for_the_position(self) -> None:
        pool = poisoned_pool()
        with self.assertRaisesRegex(ValueError, "needs 2 blocks, has 1"):
            self.model.decode(pool, [1], [TINY_BLOCK], [pool.allocate(1)])


def in_torch(model: LlamaServingModel) -> LlamaServingModel:
    """``model`` stepping the decoder's layer in torch (its way without a C compiler or in bfloat16)."""
    model.native, model.decode_why = None, "the test's choice"
    return model


class ServedOncePerProcess(unittest.TestCase):
    def test_servers_asking_from_several_threads_share_one_model_built_under_the_lock(self) -> None:
        """Seven trained servers started in threads of one process each built the served model: 15 GB in one run."""
        _, decoder = tiny_pair(seed=5)
        built: list[bool] = []
        original = serving_llama.LlamaServingModel

        class Recorded(original):  # type: ignore[misc, valid-type]
            def __init__(self, *args: object, **kwargs: object) -> None:
                built.append(serving_llama._SERVED.locked())  # every construction runs while the lock is held
                super().__init__(*args, **kwargs)

        answers: list[LlamaServingModel] = []
        start = threading.Barrier(4)

        def ask() -> None:
            start.wait(HANG_S)
            answers.append(serving_llama.served(decoder, None, "float32"))

        with unittest.mock.patch.object(serving_llama, "LlamaServingModel", Recorded):
            threads = [threading.Thread(target=ask) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(HANG_S)
        self.assertEqual(built, [True])
        self.assertEqual(len({id(model) for model in answers}), 1)
        self.assertEqual(len(answers), 4)

    def test_a_server_handed_the_timings_a_timed_table_measured_serves_that_model_and_other_timings_another(self) -> None:
        _, decoder = tiny_pair(seed=6)
        timed = serving_llama.served(decoder)
        own = dump_timings(timings_of(timed.kernels.rows))
        self.assertIs(serving_llama.served(decoder, own, "float32"), timed)
        other = serving_llama.served(decoder, dump_timings(ranking("in_out", "in_out")), "float32")
        self.assertIsNot(other, timed)
        self.assertEqual({name for picks in other.kernels.chosen.values() for name in picks.values()}, {"in_out"})


class FirstRowRotation(LlamaServingModel):
    """Broken on purpose: every row of a decode step turns by the batch's first row's position (one offset for the
    whole batch, as a contiguous cache has). Alone, a request cannot tell; batched, every other row can. The torch
    way's angles; ``FirstRowPosition`` breaks the one-call step's the same way."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        in_torch(self)

    def _angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if positions.dim() == 2:  # a decode step's (B, 1) positions
            positions = positions[:1].expand_as(positions)
        return super()._angles(positions)


class FirstRowPosition(LlamaServingModel):
    """Broken on purpose: the one-call step is told that every row but the batch's first sits one position earlier
    (it turns by that position and writes over its own last key). Alone, a request cannot tell."""

    def decode(self, pool: LayeredPool, tokens: list[int], positions: list[int],
               tables: list[list[int]]) -> torch.Tensor:
        assert self.native is not None
        shifted = positions[:1] + [p - 1 for p in positions[1:]]
        return self.native.step_paged(tokens, shifted, tables, pool.blocks.keys, pool.blocks.values)


STEP_TOKENS = [3, 5, 7, 11, 13]  # one decode step's tokens for the five prompts of the tests below


def prefilled(model: LlamaServingModel, batch: list[list[int]], blocks: int = 60) -> tuple[LayeredPool, list[list[int]],
                                                                                          Callable[[], None]]:
    """A pool holding each prompt's own prefill in its blocks, their tables, and a function that puts the pool's
    contents back as they were after it (so two decode steps can start from one cache)."""
    pool = LayeredPool(model.config, model.layers, blocks, TINY_BLOCK)
    tables = [pool.allocate(len(p) // TINY_BLOCK + 2) for p in batch]
    for prompt, table in zip(batch, tables):
        model.prefill(pool, [prompt], [table])
    kept = pool.blocks.keys.clone(), pool.blocks.values.clone()

    def restore() -> None:
        pool.blocks.keys.copy_(kept[0])
        pool.blocks.values.copy_(kept[1])

    return pool, tables, restore


def replace_hf(config: LlamaConfig, **changes: object) -> LlamaConfig:
    """A copy of transformers' ``config`` with ``changes``."""
    return LlamaConfig(**{**config.to_dict(), **changes})


def llama_prompts(lengths: tuple[int, ...], seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, TINY.vocab_size, (n,), generator=generator).tolist() for n in lengths]


class LlamaBatchedDecodeTest(unittest.TestCase):
    """The Llama decoder over the block pool (llm_models.serving.llama), on a tiny seeded Llama: requests at different
    offsets in one batch get, at every step, the logits of each alone and of the decoder's own full recompute."""

    LENGTHS = (3, 17, 1, 30, 8)  # every row at its own offset, crossing block boundaries at different steps
    STEPS = 10

    @classmethod
    def setUpClass(cls) -> None:
        _, decoder = tiny_pair(seed=5)
        cls.model = LlamaServingModel(decoder, KERNEL_NS)
        cls.ways = {"one call": cls.model, "torch": in_torch(LlamaServingModel(decoder, KERNEL_NS))}
        cls.batch = llama_prompts(cls.LENGTHS, seed=6)

    def setUp(self) -> None:
        if self.model.native is None:
            self.skipTest(f"the one-call step cannot run here: {self.model.decode_why}")

    def pool(self, model: LlamaServingModel) -> LayeredPool:
        """A pool whose never-written slots hold huge values: any unmasked padding would show in the logits."""
        config = model.config
        pool = LayeredPool(config, config.layers, 40, TINY_BLOCK)
        pool.blocks.keys.fill_(1e4)
        pool.blocks.values.fill_(-1e4)
        return pool

    def test_batched_equals_each_alone_and_the_full_recompute_at_every_step(self) -> None:
        for way, model in self.ways.items():
            together, together_logits = greedy_together(model, self.pool(model), self.batch, self.STEPS)
            for b, prompt in enumerate(self.batch):
                alone, alone_logits = greedy_together(model, self.pool(model), [prompt], self.STEPS)
                self.assertEqual(together[b], alone[0], f"{way}: request {b} (prompt {len(prompt)})")
                for step in range(self.STEPS + 1):
                    with self.subTest(way=way, request=b, step=step):
                        full = model.reference_logits(prompt + together[b][:step])  # the decoder's own forward
                        torch.testing.assert_close(together_logits[b][step], full, atol=ATOL, rtol=RTOL)
                        torch.testing.assert_close(together_logits[b][step], alone_logits[0][step], atol=ATOL,
                                                   rtol=RTOL)

    def test_the_one_call_step_gives_a_batched_row_its_solo_logits_to_the_bit(self) -> None:
        # each prompt prefilled on its own, so batched and solo steps start from the same cache
        pool, tables, restore = prefilled(self.model, self.batch)
        positions = [len(p) for p in self.batch]
        batched = self.model.decode(pool, STEP_TOKENS, positions, tables)
        for b in range(len(self.batch)):
            restore()
            alone = self.model.decode(pool, [STEP_TOKENS[b]], [positions[b]], [tables[b]])
            with self.subTest(request=b):  # each row's sums run in the same order batched or alone
                torch.testing.assert_close(batched[b], alone[0], atol=0, rtol=0)

    def test_the_one_call_step_reads_scattered_blocks_and_steps_on_two_threads(self) -> None:
        pool = self.pool(self.model)
        pool.allocate(7)  # another tenant holds the first blocks: these requests get later, scattered ones
        scattered, logits = greedy_together(self.model, pool, self.batch, self.STEPS)
        fresh, fresh_logits = greedy_together(self.model, self.pool(self.model), self.batch, self.STEPS)
        self.assertEqual(scattered, fresh)
        for a, b in zip(logits, fresh_logits):
            torch.testing.assert_close(a, b, atol=0, rtol=0)  # the same sums, wherever the blocks lie
        # one step from one cache, on one thread and on two: each row's sums run in one order on any team
        pool, tables, restore = prefilled(self.model, self.batch)
        positions = [len(p) for p in self.batch]
        one = self.model.decode(pool, STEP_TOKENS, positions, tables)
        restore()
        threads = torch.get_num_threads()
        torch.set_num_threads(2)
        try:
            two = self.model.decode(pool, STEP_TOKENS, positions, tables)
        finally:
            torch.set_num_threads(threads)
        torch.testing.assert_close(two, one, atol=0, rtol=0)

    def test_the_one_call_step_refuses_what_it_cannot_read_naming_it(self) -> None:
        pool, native = self.pool(self.model), self.model.native
        assert native is not None
        table = pool.allocate(1)
        keys, values = pool.blocks.keys, pool.blocks.values
        with self.assertRaisesRegex(ValueError, f"request 0 at position {TINY_BLOCK} needs 2 blocks of {TINY_BLOCK}, its table has 1"):
            native.step_paged([1], [TINY_BLOCK], [table], keys, values)
        with self.assertRaisesRegex(ValueError, "one token, position and table per request, got 2, 1 and 1"):
            native.step_paged([1, 2], [0], [table], keys, values)
        with self.assertRaisesRegex(ValueError, r"token ids \[128\] lie outside the vocabulary of 128"):
            native.step_paged([128], [0], [table], keys, values)
        with self.assertRaisesRegex(ValueError, "blocks outside 0 .. 39"):
            native.step_paged([1], [0], [[40]], keys, values)
        with self.assertRaisesRegex(ValueError, "contiguous float32 pool"):
            native.step_paged([1], [0], [table], keys.bfloat16(), values.bfloat16())

    def test_a_bfloat16_pool_steps_in_torch(self) -> None:
        config = self.model.config
        pool = LayeredPool(replace(config, dtype=torch.bfloat16), config.layers, 4, TINY_BLOCK)
        self.assertFalse(self.model.steps_in_one_call(pool))
        self.assertTrue(self.model.steps_in_one_call(self.pool(self.model)))

    def test_rotating_every_row_at_the_batchs_first_position_is_caught(self) -> None:
        for broken in (FirstRowRotation(self.model.decoder, KERNEL_NS), FirstRowPosition(self.model.decoder, KERNEL_NS)):
            prompt = self.batch[1]
            _, alone = greedy_together(broken, self.pool(broken), [prompt], self.STEPS)
            _, correct = greedy_together(self.model, self.pool(self.model), [prompt], self.STEPS)
            torch.testing.assert_close(alone[0], correct[0], atol=ATOL, rtol=RTOL)  # alone, one offset is no bug
            forced = greedy_together(self.model, self.pool(self.model), self.batch, self.STEPS)[0]
            _, batched = greedy_together(broken, self.pool(broken), self.batch, self.STEPS, forced=forced)
            for b in range(1, len(self.batch)):  # row 0 is the first row: its own position is the one used
                with self.subTest(broken=type(broken).__name__, request=b):
                    _, own = greedy_together(self.model, self.pool(self.model), [self.batch[b]], self.STEPS,
                                             forced=[forced[b]])
                    self.assertGreater(float((batched[b][1:] - own[0][1:]).abs().max()), 100 * ATOL)


# float32 sums over 192 features and 64-wide heads in another order than the decoder's: about 2e-5 apart on logits
# of magnitude ~1 here; a row read from a wrong block moves them by far more (its keys are another position's)
WIDE_TOL = 1e-4


class WideHeadsTest(unittest.TestCase):
    """Heads 64 wide, three queries per key/value head: the one-call step's vector attention loops (AVX2 or AVX-512
    where the CPU has them) walking blocks of TINY_BLOCK positions, against the decoder's own forward and against
    the same loop built without its vector paths."""

    @classmethod
    def setUpClass(cls) -> None:
        config = replace_hf(TINY, hidden_size=192, num_attention_heads=3, num_key_value_heads=1, head_dim=64,
                            intermediate_size=128, num_hidden_layers=1)
        reference = tiny_reference(seed=7, config=config)
        cls.decoder = LlamaDecoder(LlamaDecoderConfig.from_hf(reference.config, torch.float32), reference.state_dict())
        cls.model = LlamaServingModel(cls.decoder, KERNEL_NS)
        cls.batch = llama_prompts((3, 17, 1, 30, 8), seed=8)

    def setUp(self) -> None:
        if self.model.native is None:
            self.skipTest(f"the one-call step cannot run here: {self.model.decode_why}")

    def test_every_step_gives_the_decoders_logits_across_blocks(self) -> None:
        pool = LayeredPool(self.model.config, self.model.layers, 60, TINY_BLOCK)
        pool.allocate(5)  # later, scattered blocks
        tokens, logits = greedy_together(self.model, pool, self.batch, 8)
        for b, prompt in enumerate(self.batch):
            for step in range(9):
                with self.subTest(request=b, step=step):
                    full = self.model.reference_logits(prompt + tokens[b][:step])
                    torch.testing.assert_close(logits[b][step], full, atol=WIDE_TOL, rtol=WIDE_TOL)

    def test_the_vector_loops_give_the_plain_loops_logits(self) -> None:
        plain = NativeStep(self.decoder, "float32", plain=True)
        pool, tables, restore = prefilled(self.model, self.batch)
        positions = [len(p) for p in self.batch]
        fast = self.model.decode(pool, STEP_TOKENS, positions, tables)
        restore()
        slow = plain.step_paged(STEP_TOKENS, positions, tables, pool.blocks.keys, pool.blocks.values)
        torch.testing.assert_close(fast, slow, atol=WIDE_TOL, rtol=WIDE_TOL)


class Int8WeightsTest(unittest.TestCase):
    """The trained model's int8 weights on the server: decode steps read the codes, prefill and the reference run on
    the float32 matrices the codes stand for, so every token of a request comes from one model."""

    @classmethod
    def setUpClass(cls) -> None:
        _, cls.decoder = tiny_pair(seed=5)
        cls.int8 = LlamaServingModel(cls.decoder, KERNEL_NS, weights="int8")
        cls.batch = llama_prompts((3, 17, 1, 30, 8), seed=6)

    def setUp(self) -> None:
        if self.int8.native is None:
            self.skipTest("the one-call step cannot run here")

    def pool(self) -> LayeredPool:
        return LayeredPool(self.int8.config, self.int8.layers, 40, TINY_BLOCK)

    def test_each_step_gives_the_round_trip_models_logits_batched_or_alone(self) -> None:
        together, logits = greedy_together(self.int8, self.pool(), self.batch, 6)
        for b, prompt in enumerate(self.batch):
            alone, _ = greedy_together(self.int8, self.pool(), [prompt], 6)
            self.assertEqual(together[b], alone[0])
            for step in range(7):
                with self.subTest(request=b, step=step):  # the reference is the round-trip decoder's own forward
                    full = self.int8.reference_logits(prompt + together[b][:step])
                    torch.testing.assert_close(logits[b][step], full, atol=ATOL, rtol=RTOL)

    def test_the_codes_are_not_the_float32_weights(self) -> None:
        float32 = LlamaServingModel(self.decoder, KERNEL_NS)
        prompt = self.batch[3]
        _, mine = greedy_together(self.int8, self.pool(), [prompt], 3)
        _, theirs = greedy_together(float32, self.pool(), [prompt], 3)
        self.assertGreater(float((mine[0] - theirs[0]).abs().max()), 100 * ATOL)
        self.assertFalse(torch.equal(self.int8.decoder.layers[0].qkv, self.decoder.layers[0].qkv))

    def test_weights_it_cannot_serve_are_refused_by_name(self) -> None:
        with self.assertRaisesRegex(ValueError, "weights must be one of float32, int8, got 'int4'"):
            LlamaServingModel(self.decoder, KERNEL_NS, weights="int4")
        with self.assertRaisesRegex(ValueError, "int8 for the trained model, got 'int8' for the random model"):
            EngineConfig(weights="int8")


class PlusOneRotation(LlamaServingModel):
    """Broken on purpose: a batched decode step turns every row one position too far. Alone, it is correct."""

    def _angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if positions.dim() == 2 and positions.shape[0] > 1:
            positions = positions + 1
        return super()._angles(positions)


class NeighbourKeys(LlamaServingModel):
    """Broken on purpose: in a batched decode step each row's first block is the next request's (its first keys)."""

    def decode(self, pool: LayeredPool, tokens: list[int], positions: list[int],
               tables: list[list[int]]) -> torch.Tensor:
        firsts = [table[0] for table in tables]
        return super().decode(pool, tokens, positions, [[firsts[(b + 1) % len(tables)], *table[1:]]
                                                        for b, table in enumerate(tables)])


class TrainedBfloat16Gate(unittest.TestCase):
    """The trained model's bfloat16 gate (bfloat16 steps at each logits row's scale, ROW_STEPS) still refuses a
    batched path that is wrong, on the benchmark's first two gate prompts. Two prompts
    and three steps (the benchmark's own gate runs all of its prompts and steps, every run): a batch of two is the
    least that tells each broken path from the right one, and this CPU multiplies bfloat16 slowly."""

    PROMPTS, STEPS = 2, 3

    @classmethod
    def setUpClass(cls) -> None:
        cls.decoder = smollm2(torch.bfloat16).model
        cls.prompts = prompt_ids(cls.PROMPTS)

    def gate(self, model: LlamaServingModel) -> dict[str, object]:
        return equivalence_gate(model, model.layers, self.prompts, self.STEPS, 16, TRAINED_TOLERANCES)

    def test_the_step_is_the_gap_between_neighbouring_bfloat16_numbers_at_a_rows_scale(self) -> None:
        for magnitude in (0.75, 1.0, 1.5, 36.0, 63.5, 64.0, -36.0):  # each a bfloat16 number
            with self.subTest(magnitude=magnitude):
                value = torch.tensor(magnitude, dtype=torch.bfloat16)
                step = bfloat16_step(magnitude)
                self.assertEqual(float(torch.nextafter(value, value * 4)) - magnitude, math.copysign(step, magnitude))
        self.assertEqual(difference_bound(TRAINED_TOLERANCES["bfloat16"], 36.0), ROW_STEPS * 0.25)

    def test_a_row_at_the_wrong_position_or_on_anothers_keys_fails(self) -> None:
        # that the served decoder passes this gate, every quick run in bfloat16 shows: test_serving_benchmark's
        # QuickRunInBfloat16 reads its record's gate (max_row_steps within ROW_STEPS)
        for broken in (PlusOneRotation, NeighbourKeys, FirstRowRotation):
            with self.subTest(broken=broken.__name__), self.assertRaisesRegex(EquivalenceError, "bfloat16 steps"):
                self.gate(broken(self.decoder, KERNEL_NS))


class PoolTest(unittest.TestCase):
    def test_block_bytes_is_the_cache_formula_summed_over_layers(self) -> None:
        pool = LayeredPool(TINY_MODEL, TINY_LAYERS, 8, TINY_BLOCK)
        per_layer = kv_cache_bytes(1, TINY_MODEL.kv_heads, TINY_BLOCK, TINY_MODEL.head_dim,
                                   TINY_MODEL.bytes_per_element)
        self.assertEqual(pool.block_bytes, TINY_LAYERS * per_layer)
        self.assertEqual(pool_block_bytes(TINY_MODEL, TINY_LAYERS, TINY_BLOCK), pool.block_bytes)
        self.assertEqual(pool.blocks.keys.numel() * 4 * 2, 8 * pool.block_bytes)  # storage holds exactly that

    def test_layers_are_disjoint_views_of_one_storage(self) -> None:
        pool = LayeredPool(TINY_MODEL, TINY_LAYERS, 4, TINY_BLOCK)
        pool.layer_keys(1)[2] = 7.0
        self.assertEqual(float(pool.layer_keys(0).abs().sum()), 0.0)
        self.assertEqual(float(pool.blocks.keys[2].sum()), 7.0 * pool.layer_keys(1)[2].numel())

    def test_an_allocation_that_does_not_fit_takes_nothing(self) -> None:
        pool = LayeredPool(TINY_MODEL, TINY_LAYERS, 4, TINY_BLOCK)
        pool.allocate(3)
        with self.assertRaisesRegex(ValueError, "2 blocks needed, 1 of 4 are free"):
            pool.allocate(2)
        self.assertEqual(pool.num_free_blocks, 1)


if __name__ == "__main__":
    unittest.main()
