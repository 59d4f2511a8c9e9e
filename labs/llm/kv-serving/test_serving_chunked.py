"""Chunked prefill: a long prompt prefilled over several passes, at most ``prefill_chunk`` tokens each, with the
running requests' decode steps between its chunks; the chunks' last logits equal a whole prefill's, and a chunk
computed at the wrong positions is caught."""

from __future__ import annotations

import asyncio
import unittest
from typing import Any

import torch

from kv_serving.figures import derivation, invariants
from kv_serving.server import engine_config, parse_args
from kv_serving.testing import (
    KERNEL_NS,
    TINY_BLOCK,
    TINY_LAYERS,
    TINY_MODEL,
    SchedulerTestCase,
    Unrunnable,
    drain,
    greedy_alone,
    ran,
    tiny_chat,
)
from kv_serving_views.chunked import chunked_verdict_view, chunked_view
from labkit.figures import Figures, fill
from labkit.records import RecordError
from labkit.waiting import eventually, within
from llm_models.serving.admission import KVBudget
from llm_models.serving.dtypes import TOLERANCES
from llm_models.serving.llama import served
from llm_models.serving.model import PackedPrompts, ServingModel
from llm_models.serving.output import ScheduledPrefill
from llm_models.serving.pool import LayeredPool
from llm_models.serving.refusals import Refusal
from llm_models.serving.request import Failed, Finished
from llm_models.serving.scheduler import Scheduler
from site_hooks.blocks import render_block

LONG = [(7 * i + 3) % TINY_MODEL.vocab_size for i in range(40)]  # ten blocks of TINY_BLOCK


def chunked_logits(model: Any, prompt: list[int], chunk: int, num_blocks: int = 16) -> torch.Tensor:
    """The last position's logits of ``prompt`` prefilled ``chunk`` tokens at a time into a fresh pool, each chunk
    from where the one before stopped (what the scheduler's passes do)."""
    pool = LayeredPool(model.config, model.layers, num_blocks, TINY_BLOCK)
    table = pool.allocate(-(-len(prompt) // TINY_BLOCK))
    logits = None
    for start in range(0, len(prompt), chunk):
        logits = model.prefill(pool, [prompt[:start + chunk]], [table], [start])
    assert logits is not None
    return logits[0]


class RestartedPositions(ServingModel):
    """A broken chunked prefill: each chunk's tokens computed at positions from 0, as if it were a new prompt."""

    def packing(self, *args: Any) -> PackedPrompts:
        packed = super().packing(*args)
        packed.positions = packed.positions - packed.positions[0]
        return packed


class ChunksWithoutALoop(unittest.TestCase):
    def scheduler(self, chunk: int) -> Scheduler:
        pool = LayeredPool(TINY_MODEL, TINY_LAYERS, 24, TINY_BLOCK)
        return Scheduler(Unrunnable(), pool, KVBudget(24 * pool.block_bytes), prefill_chunk=chunk)  # type: ignore[arg-type]

    def test_a_long_prompt_takes_the_budget_pass_by_pass_with_the_decode_rows_and_decodes_after_its_last_chunk(
            self) -> None:
        scheduler = self.scheduler(chunk=8)
        short, long = scheduler.submit([1] * 5, 4), scheduler.submit(LONG[:30], 2)
        first = scheduler.schedule()
        # the short prompt whole (5 of the 8 tokens); the 3 left are less than a block: the long one waits a pass
        # its first token comes from this call: it decodes from the next pass on, so the pass is one call
        self.assertEqual((first.prefills, first.decodes, first.mixed), ((ScheduledPrefill(short, 0, 5),), (), False))
        self.assertEqual(scheduler.waiting_prompt_tokens, 35)  # nothing computed yet: both prompts still to come
        ran(first)
        chunks = []
        for _ in range(3):
            output = scheduler.schedule()
            (chunk,) = output.prefills
            # the short one's row rides in the chunk's call; the long one gets no first token before its last chunk
            self.assertEqual((chunk.request, output.decodes, output.mixed), (long, (short,), True))
            chunks.append((chunk.start, chunk.tokens))
            ran(output)
        self.assertEqual(chunks, [(0, 8), (8, 8), (16, 8)])
        self.assertEqual(scheduler.waiting_prompt_tokens, 6)
        last = scheduler.schedule()
        # the long one's first token comes from its last chunk's call: it decodes from the next pass on
        self.assertEqual((last.prefills, last.decodes, last.mixed), ((ScheduledPrefill(long, 24, 6),), (short,), True))
        ran(last)
        after = scheduler.schedule()
        self.assertEqual((after.prefills, after.decodes, after.mixed), ((), (short, long), False))

    def test_a_chunk_that_is_not_a_whole_number_of_blocks_is_refused_naming_the_block_size(self) -> None:
        for chunk in (0, 2, 6):
            with self.subTest(chunk=chunk), self.assertRaisesRegex(ValueError, "whole number of blocks of 4 tokens"):
                self.scheduler(chunk)
        with self.assertRaises(SystemExit):
            parse_args(["--prefill-chunk", "24", "--block-size", "16"])
        self.assertEqual(engine_config(parse_args(["--prefill-chunk", "32"])).prefill_chunk, 32)


Call = tuple[str, int, list[int], int]  # prefill or mixed, the last prompt's length, the starts, the decode rows


def recording(scheduler: Scheduler, fail_at: int | None = None, failing: tuple[str, ...] = ("prefill", "mixed")
              ) -> list[Call]:
    """Every prefill and mixed call the scheduler makes; a call of a ``failing`` kind whose last prompt is ``fail_at``
    tokens long raises instead."""
    calls: list[Call] = []
    prefill, mixed = scheduler.model.prefill, scheduler.model.mixed

    def check(kind: str, prompts: list[list[int]], starts: Any, rows: int) -> None:
        calls.append((kind, len(prompts[-1]), list(starts or [0] * len(prompts)), rows))
        if len(prompts[-1]) == fail_at and kind in failing:
            raise RuntimeError("a chunk that fails")

    def recorded_prefill(pool: Any, prompts: list[list[int]], tables: Any, starts: Any = None) -> torch.Tensor:
        check("prefill", prompts, starts, 0)
        return prefill(pool, prompts, tables, starts)

    def recorded_mixed(pool: Any, prompts: list[list[int]], tables: Any, starts: Any, tokens: list[int],
                       *rest: Any) -> torch.Tensor:
        check("mixed", prompts, starts, len(tokens))
        return mixed(pool, prompts, tables, starts, tokens, *rest)

    scheduler.model.prefill = recorded_prefill  # type: ignore[method-assign]
    scheduler.model.mixed = recorded_mixed  # type: ignore[method-assign]
    return calls


class ChunkedLogits(unittest.TestCase):
    def test_chunks_of_any_whole_number_of_blocks_give_a_whole_prefills_last_logits_on_both_models(self) -> None:
        models = {"random": ServingModel(TINY_MODEL, TINY_LAYERS), "llama": served(tiny_chat().model, KERNEL_NS)}
        tolerance = TOLERANCES["float32"]
        for name, model in models.items():
            whole = chunked_logits(model, LONG, len(LONG))
            for chunk in (TINY_BLOCK, 3 * TINY_BLOCK, 8 * TINY_BLOCK):
                with self.subTest(model=name, chunk=chunk):
                    torch.testing.assert_close(chunked_logits(model, LONG, chunk), whole, **tolerance)

    def test_chunks_computed_at_positions_restarted_from_zero_are_caught(self) -> None:
        broken = RestartedPositions(TINY_MODEL, TINY_LAYERS)
        whole = chunked_logits(broken, LONG, len(LONG))  # one chunk from 0: nothing restarts
        with self.assertRaises(AssertionError):
            torch.testing.assert_close(chunked_logits(broken, LONG, 2 * TINY_BLOCK), whole, **TOLERANCES["float32"])


class ChunkedLoop(SchedulerTestCase):
    async def test_the_running_stream_decodes_in_the_long_prompts_chunk_calls_and_both_get_their_alone_tokens(
            self) -> None:
        scheduler = self.start(num_blocks=32, prefill_chunk=8)
        calls = recording(scheduler)
        # Both arrive before the loop's first pass (nothing is awaited in between), whatever the host's speed: the
        # first pass prefills the stream's 5 tokens, and the 3 left of the budget hold no block of the long prompt.
        stream, long = scheduler.submit([5] * 5, 10), scheduler.submit(LONG, 3)
        (stream_tokens, stream_end), (long_tokens, long_end) = await within(
            asyncio.gather(drain(stream), drain(long)), "both requests to finish")
        # then each chunk of the long prompt in one call with the stream's decode row, which advances a token a call
        self.assertEqual(calls[:6], [("prefill", 5, [0], 0), ("mixed", 8, [0], 1), ("mixed", 16, [8], 1),
                                     ("mixed", 24, [16], 1), ("mixed", 32, [24], 1), ("mixed", 40, [32], 1)])
        self.assertEqual(len(calls), 6)  # after the last chunk, plain decode steps: no prefill, no mixed
        self.assertEqual(stream_tokens, greedy_alone(scheduler, stream.prompt, 10))
        self.assertEqual(long_tokens, greedy_alone(scheduler, LONG, 3))
        counters = scheduler.counters
        self.assertEqual((counters.prefills, counters.prefill_calls, counters.mixed_passes), (2, 1, 5))
        self.assertEqual((counters.prefill_tokens, counters.decode_rows + counters.prefills),
                         (5 + len(LONG), counters.tokens_generated))
        self.assertEqual((stream_end, long_end), (Finished("length"), Finished("length")))


class MixedLogits(unittest.TestCase):
    def test_a_chunk_and_decode_rows_in_one_pass_give_each_its_own_calls_logits_on_both_models(self) -> None:
        models = {"random": ServingModel(TINY_MODEL, TINY_LAYERS), "llama": served(tiny_chat().model, KERNEL_NS)}
        for name, model in models.items():
            with self.subTest(model=name):
                pool = LayeredPool(model.config, model.layers, 32, TINY_BLOCK)
                # two running requests at positions 5 and 11 (not block boundaries), a prompt's second chunk of 8
                rows = [[(3 * i + 1) % TINY_MODEL.vocab_size for i in range(n)] for n in (6, 12)]
                tables = [pool.allocate(4) for _ in rows]
                long_table = pool.allocate(-(-len(LONG) // TINY_BLOCK))
                for ids, table in zip(rows, tables):
                    model.prefill(pool, [ids[:-1]], [table])
                model.prefill(pool, [LONG[:8]], [long_table])
                # and a new prompt of 5 tokens packed beside the chunk: two prompts' last rows, then two decode rows
                short, short_table = [9, 8, 7, 6, 5], pool.allocate(2)
                prompts, prompt_tables, starts = [LONG[:16], short], [long_table, short_table], [8, 0]
                mixed = model.mixed(pool, prompts, prompt_tables, starts, [ids[-1] for ids in rows],
                                    [len(ids) - 1 for ids in rows], tables)
                apart = torch.cat([model.prefill(pool, prompts, prompt_tables, starts),
                                   model.decode(pool, [ids[-1] for ids in rows], [len(ids) - 1 for ids in rows],
                                                tables)])
                torch.testing.assert_close(mixed, apart, **TOLERANCES["float32"])
                alone = torch.stack([model.reference_logits(ids) for ids in (LONG[:16], short, *rows)])
                torch.testing.assert_close(mixed, alone, **TOLERANCES["float32"])
                # a row written one position late, or reading another request's blocks, is caught
                for positions, read in (([6, 11], tables), ([5, 11], tables[::-1])):
                    wrong = model.mixed(pool, prompts, prompt_tables, starts, [ids[-1] for ids in rows], positions,
                                        read)
                    with self.assertRaises(AssertionError):
                        torch.testing.assert_close(wrong[2:], alone[2:], **TOLERANCES["float32"])


def request(sent: float, ttft: float, gaps: list[float]) -> dict[str, Any]:
    return {"outcome": "completed", "prompt_tokens": 30, "tokens": len(gaps) + 1, "sent_s": sent, "ttft_s": ttft,
            "itl_s": gaps, "error": None}


def section(pauses: dict[str, list[float]], firsts: dict[str, list[float]], later_gaps: int = 32,
            late_stall: float = 0.05) -> dict[str, Any]:
    """A chunked-prefill section of two streams whose gaps are 50 ms but for one pause, from 0.5 s on, when the long
    prompt is sent, and ``late_stall`` after it: ``pauses`` and ``firsts`` give, per server, each round's pause and
    the long prompt's time to first token; ``later_gaps``, the streams' 50 ms gaps after the pause."""
    rounds = []
    for number in range(len(pauses["whole"])):
        order = ["whole", "chunked"] if number % 2 == 0 else ["chunked", "whole"]
        runs = {name: [*(request(0.0, 0.1, [0.05] * 8 + [pauses[name][number]] + [0.05] * later_gaps + [late_stall])
                         for _ in range(2)), request(0.5, firsts[name][number], [0.05])] for name in order}
        rounds.append({"order": order, "runs": runs})
    return {"chunk": 64, "long_tokens": 384, "streams": 2, "stream_tokens": 44, "long_max_tokens": 2,
            "long_after_s": 0.3, "text": "python-language-reference.txt", "rounds": rounds}


def derived(raw: dict[str, Any]) -> dict[str, Any]:
    trained = {"chunked_prefill": raw}
    invariants.check_chunked_prefill(trained, "test")
    figures = Figures()
    derivation.chunked_figures(trained, figures)
    record = {"trained": trained}
    fill(record, figures)
    return record


WHOLE_PAUSES, WHOLE_FIRSTS = [1.30, 1.25, 1.35], [1.30, 1.28, 1.33]


class Wording(unittest.TestCase):
    def test_shorter_pauses_for_a_later_first_token_read_as_the_trade_and_the_opposite_as_growth(self) -> None:
        helped = derived(section({"whole": WHOLE_PAUSES, "chunked": [0.30, 0.28, 0.33]},
                                 {"whole": WHOLE_FIRSTS, "chunked": [1.70, 1.65, 1.80]}))
        text = chunked_verdict_view(helped).paragraphs[0]
        self.assertIn("fell to 0.23× (middle half 0.23–0.24)", text)
        self.assertIn("took 1.31× (middle half 1.30–1.33) its time prefilled whole", text)
        self.assertIn("the trade chunking makes", text)
        self.assertIn("Prefilled whole, the long prompt held the streams for 26.00×", text)
        hurt = derived(section({"whole": [0.30, 0.28, 0.33], "chunked": WHOLE_PAUSES},
                               {"whole": WHOLE_FIRSTS, "chunked": [1.20, 1.18, 1.25]}))
        text = chunked_verdict_view(hurt).paragraphs[0]
        self.assertIn("grew", text)
        self.assertIn("while the long prompt's own first token came sooner, 0.92×", text)
        self.assertNotIn("as well", text)
        nothing = derived(section({"whole": [0.30, 0.28, 0.33], "chunked": WHOLE_PAUSES},
                                  {"whole": WHOLE_FIRSTS, "chunked": [1.70, 1.65, 1.80]}))
        text = chunked_verdict_view(nothing).paragraphs[0]
        self.assertIn("on this run chunking bought nothing", text)
        self.assertNotIn("the trade", text)

    def test_a_stall_after_the_long_prompts_first_token_is_not_its_prefills(self) -> None:
        late = derived(section({"whole": WHOLE_PAUSES, "chunked": [0.30, 0.28, 0.33]},
                               {"whole": WHOLE_FIRSTS, "chunked": [1.70, 1.65, 1.80]}, late_stall=2.0))
        self.assertEqual(late["trained"]["chunked_prefill"]["longest_gap_s"],
                         {"whole": WHOLE_PAUSES, "chunked": [0.30, 0.28, 0.33]})

    def test_rounds_whose_ratios_straddle_one_read_as_noise_never_as_shorter(self) -> None:
        noisy = derived(section({"whole": WHOLE_PAUSES, "chunked": [1.20, 1.40, 1.30]},
                                {"whole": WHOLE_FIRSTS, "chunked": [1.20, 1.40, 1.31]}))
        text = chunked_verdict_view(noisy).paragraphs[0]
        self.assertIn("did not shrink beyond the rounds' noise", text)
        self.assertIn("its time prefilled whole, within the rounds' noise", text)
        self.assertNotIn("fell to", text)

    def test_streams_that_ended_before_the_long_prompt_was_prefilled_draw_no_comparison(self) -> None:
        short = derived(section({"whole": WHOLE_PAUSES, "chunked": [0.30, 0.28, 0.33]},
                                {"whole": WHOLE_FIRSTS, "chunked": [1.70, 1.65, 1.80]}, later_gaps=0))
        self.assertFalse(short["trained"]["chunked_prefill"]["all_spanned"])
        text = chunked_verdict_view(short).paragraphs[0]
        self.assertIn("draws no comparison", text)
        self.assertNotIn("fell to", text)
        self.assertIn("&lt;b&gt;", render_block(chunked_view(derived(section(
            {"whole": WHOLE_PAUSES, "chunked": WHOLE_PAUSES}, {"whole": WHOLE_FIRSTS, "chunked": WHOLE_FIRSTS})
            | {"text": "<b>"}))))

    def test_a_round_out_of_turn_or_a_request_that_did_not_complete_is_refused_naming_it(self) -> None:
        raw = section({"whole": WHOLE_PAUSES, "chunked": WHOLE_PAUSES}, {"whole": WHOLE_FIRSTS, "chunked": WHOLE_FIRSTS})
        raw["rounds"][1]["order"] = ["whole", "chunked"]
        with self.assertRaisesRegex(RecordError, r"field \$\.trained\.chunked_prefill\.rounds\[1\]\.order is"):
            derived(raw)
        raw = section({"whole": WHOLE_PAUSES, "chunked": WHOLE_PAUSES}, {"whole": WHOLE_FIRSTS, "chunked": WHOLE_FIRSTS})
        raw["rounds"][2]["runs"]["chunked"][2]["outcome"] = "failed"
        with self.assertRaisesRegex(RecordError, r"rounds\[2\]\.runs\.chunked\[2\]\.outcome is 'failed'"):
            derived(raw)
        raw = section({"whole": WHOLE_PAUSES, "chunked": WHOLE_PAUSES}, {"whole": WHOLE_FIRSTS, "chunked": WHOLE_FIRSTS})
        raw["rounds"][0]["runs"]["whole"][2]["sent_s"] = 0.35  # 0.3 s after the streams' first tokens at 0.1 s: early
        with self.assertRaisesRegex(RecordError, r"rounds\[0\]\.runs\.whole\[2\]\.sent_s is 0\.350 s, but the long "
                                                 r"prompt is sent 0\.3 s after the last stream's first token, at 0\.100 s"):
            derived(raw)


class ChunkedLoopEdges(SchedulerTestCase):
    async def test_a_mixed_call_that_fails_runs_its_chunk_and_rows_apart_and_every_token_comes_once(self) -> None:
        scheduler = self.start(num_blocks=32, prefill_chunk=8)
        calls = recording(scheduler, fail_at=16, failing=("mixed",))  # the chunk alone then succeeds
        stream, long = scheduler.submit([5] * 5, 10), scheduler.submit(LONG, 3)
        (stream_tokens, stream_end), (long_tokens, long_end) = await within(
            asyncio.gather(drain(stream), drain(long)), "both requests to finish")
        self.assertEqual(calls[2:4], [("mixed", 16, [8], 1), ("prefill", 16, [8], 0)])
        self.assertEqual((stream_tokens, stream_end), (greedy_alone(scheduler, stream.prompt, 10), Finished("length")))
        self.assertEqual((long_tokens, long_end), (greedy_alone(scheduler, LONG, 3), Finished("length")))
        counters = scheduler.counters
        self.assertEqual((counters.failed_for_error, counters.decode_rows + counters.prefills),
                         (0, counters.tokens_generated))
        await eventually(lambda: scheduler.pool.num_used_blocks == 0, "every block back in the pool")

    async def test_a_prompt_found_in_the_prefix_cache_is_chunked_from_the_end_of_its_cached_blocks(self) -> None:
        scheduler = self.start(num_blocks=32, prefill_chunk=8, prefix_index="hash")
        calls = recording(scheduler)
        shared = LONG[:24]  # six blocks
        first = scheduler.submit([*shared, 1], 2)
        await within(drain(first), "the first request to finish")
        second = scheduler.submit([*shared, *LONG[24:38]], 3)  # 38 tokens: 24 cached, then chunks of 8 and 6
        tokens, end = await within(drain(second), "the second request to finish")
        self.assertEqual(calls[-2:], [("prefill", 32, [24], 0), ("prefill", 38, [32], 0)])  # alone: no decode row
        self.assertEqual((second.cached_tokens, tokens, end),
                         (24, greedy_alone(scheduler, second.prompt, 3), Finished("length")))

    async def test_a_chunk_that_fails_fails_its_own_request_and_gives_back_its_blocks(self) -> None:
        scheduler = self.start(num_blocks=32, prefill_chunk=8)
        # the long prompt's second chunk fails, in the mixed call and again alone; the stream's row then steps alone
        calls = recording(scheduler, fail_at=16)
        stream, long = scheduler.submit([5] * 5, 10), scheduler.submit(LONG, 3)
        (stream_tokens, stream_end), (long_tokens, long_end) = await within(
            asyncio.gather(drain(stream), drain(long)), "both requests to end")
        self.assertEqual((stream_tokens, stream_end), (greedy_alone(scheduler, stream.prompt, 10), Finished("length")))
        self.assertEqual(long_tokens, [])
        assert isinstance(long_end, Failed)
        self.assertEqual(long_end.refusal, Refusal.INTERNAL_ERROR)
        self.assertIn("a chunk that fails", long_end.message)
        await eventually(lambda: scheduler.pool.num_used_blocks == 0, "every block back in the pool")
        self.assertEqual(calls[:4], [("prefill", 5, [0], 0), ("mixed", 8, [0], 1), ("mixed", 16, [8], 1),
                                     ("prefill", 16, [8], 0)])
