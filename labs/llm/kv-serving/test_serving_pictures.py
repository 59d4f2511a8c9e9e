"""The page's pictures are drawn from kv_serving.figures.formulas.replay: the real scheduler must do what it says."""

from __future__ import annotations

import asyncio
import copy
import json
import random
import unittest
from typing import Any

import kv_serving_views
from kv_serving import figures
from kv_serving.benchmark import LAB, ROOT
from kv_serving.figures.formulas import (
    REPLAY_BLOCK,
    REPLAY_BUDGET,
    REPLAY_EXAMPLE,
    STALL_EXAMPLE,
    Job,
    best_point,
    model_thread,
    replay,
    token_times,
)
from kv_serving.testing import TINY_BLOCK, TINY_MODEL, QuietLoopTestCase, StepGate, tiny_engine
from kv_serving_views.pictures import stall_wait
from labkit.figures import fill
from labkit.waiting import bounded
from llm_models.serving.admission import KVBudget
from llm_models.serving.request import Finished, Request, Token
from site_hooks.blocks import render_block


class ReplayAgainstTheScheduler(QuietLoopTestCase):
    async def run_scheduler(self, jobs: tuple[Job, ...], budget: int) -> list[tuple[tuple[str, ...], ...]]:
        """Run the real Scheduler on ``jobs``, each submitted before its iteration, one decode step at a time;
        per iteration: (admitted, decoded, reserved blocks, waiting) as the scheduler's own state shows them."""
        self.assertEqual(REPLAY_BLOCK, TINY_BLOCK)
        engine = tiny_engine(num_blocks=3 * budget, policy=KVBudget(budget * tiny_engine().block_bytes))
        scheduler = engine.build()
        names: dict[int, str] = {}
        requests: dict[str, Request] = {}
        calls: list[tuple[str, tuple[str, ...], int]] = []
        prefill = scheduler.model.prefill
        gate = StepGate(scheduler.model)
        decode = scheduler.model.decode

        def named(table: list[int]) -> str:
            return next(n for n, r in requests.items() if r.table is table)

        def prefill_logged(pool, prompts, tables):  # type: ignore[no-untyped-def]
            calls.append(("prefill", tuple(named(t) for t in tables), pool.num_used_blocks))
            return prefill(pool, prompts, tables)

        def decode_logged(pool, tokens, positions, tables):  # type: ignore[no-untyped-def]
            calls.append(("decode", tuple(named(t) for t in tables), pool.num_used_blocks))
            return decode(pool, tokens, positions, tables)

        scheduler.model.prefill, scheduler.model.decode = prefill_logged, decode_logged  # type: ignore[method-assign]
        rng = random.Random(0)

        def submit(iteration: int) -> None:
            for job in (j for j in jobs if j.arrives == iteration):
                prompt = [rng.randrange(TINY_MODEL.vocab_size) for _ in range(job.prompt)]
                requests[job.name] = scheduler.submit(prompt, job.max_tokens)
                names[id(requests[job.name])] = job.name

        submit(1)
        scheduler.start()
        seen: list[tuple[tuple[str, ...], ...]] = []
        try:
            async with bounded("every request of the example to finish, iteration by iteration"):
                step = 0
                while any(not r.done for r in requests.values()) or len(requests) < len(jobs):
                    if not (gate.holding and sum(kind == "decode" for kind, _, _ in calls) == step + 1):
                        await asyncio.sleep(0.001)
                        continue
                    step += 1
                    since = calls[[i for i, c in enumerate(calls) if c[0] == "decode"][step - 2] + 1:] if step > 1 \
                        else calls
                    admitted = tuple(n for kind, ns, _ in since if kind == "prefill" for n in ns)
                    _, decoded, used = since[-1]
                    seen.append((admitted, decoded, (used,), tuple(names[id(r)] for r in scheduler.waiting)))
                    submit(step + 1)
                    gate.step(1)
            for name, request in requests.items():
                tokens = []
                while not request.events.empty():
                    event = request.events.get_nowait()
                    tokens += [event.token_id] if isinstance(event, Token) else []
                    if not isinstance(event, Token):
                        self.assertEqual(event, Finished("length"), name)
                self.assertEqual(len(tokens), next(j.max_tokens for j in jobs if j.name == name), name)
        finally:
            gate.open()
            await scheduler.stop()
        self.assertEqual(scheduler.pool.num_used_blocks, 0)
        return seen

    async def test_the_replayed_example_is_what_the_scheduler_does_iteration_by_iteration(self) -> None:
        expected = [(it.admitted, it.decoded, (it.reserved_blocks,), it.waiting)
                    for it in replay(REPLAY_EXAMPLE, REPLAY_BUDGET, REPLAY_BLOCK)]
        self.assertEqual(await self.run_scheduler(REPLAY_EXAMPLE, REPLAY_BUDGET), expected)

    async def test_the_stall_example_is_what_the_scheduler_does(self) -> None:
        expected = [(it.admitted, it.decoded, (it.reserved_blocks,), it.waiting) for it in replay(STALL_EXAMPLE, 10, REPLAY_BLOCK)]
        self.assertEqual(await self.run_scheduler(STALL_EXAMPLE, 10), expected)

    async def test_a_seeded_random_workload_replays_exactly(self) -> None:
        rng = random.Random(7)
        jobs = tuple(Job(chr(65 + i), rng.randint(1, 4), rng.randint(1, 12), rng.randint(2, 6)) for i in range(7))
        jobs = (Job("first", 1, 4, 3), *jobs)  # iteration 1 decodes someone, so no iteration is idle
        expected = [(it.admitted, it.decoded, (it.reserved_blocks,), it.waiting) for it in replay(jobs, 8, REPLAY_BLOCK)]
        self.assertEqual(await self.run_scheduler(jobs, 8), expected)


class TimelineTest(unittest.TestCase):
    def test_a_prefill_between_two_steps_delays_every_running_request_by_its_length(self) -> None:
        spans = model_thread(replay(REPLAY_EXAMPLE, REPLAY_BUDGET, REPLAY_BLOCK), step_s=1.0, prefill_s=2.5)
        self.assertEqual([kind for kind, *_ in spans],
                         ["prefill", "prefill", "decode", "decode", "prefill", "prefill", "decode", "decode", "decode",
                          "prefill", "decode"])
        b = token_times(spans)["B"]
        gaps = [round(later - earlier, 6) for earlier, later in zip(b, b[1:])]
        self.assertEqual(gaps, [1.0, 1.0, 6.0, 1.0, 1.0])  # two prefills (C, D) between steps 2 and 3: 1 + 2 x 2.5


if __name__ == "__main__":
    unittest.main()


def rederived(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every derived figure recomputed from its (edited) raw data, as the benchmark stores them."""
    fill(record, figures.derive(record))
    return record


def scale_times(run: dict[str, Any], factor: float) -> None:
    """Every time of a run's request rows stretched by ``factor``: its throughput divided by it."""
    for row in run["requests"]:
        for name in ("sent_s", "ttft_s", "e2e_s"):
            if row[name] is not None:
                row[name] *= factor


class ViewsFromTheRecord(unittest.TestCase):
    """The key results and the pictures word what the record holds, and change with it."""

    @classmethod
    def setUpClass(cls) -> None:

        cls.record = rederived(json.loads((ROOT / LAB.record).read_text(encoding="utf-8")))

    def render(self, name: str, record: dict[str, Any]) -> str:
        return render_block(kv_serving_views.VIEWS[name](record))

    def test_how_much_of_a_step_the_batch_shares_is_said_only_beyond_the_steps_spread(self) -> None:
        from kv_serving_views.steps import regime_sentence
        record = copy.deepcopy(self.record)
        rows = sorted(record["step_times"], key=lambda r: r["batch"])
        first, last = rows[0], rows[-1]
        widening = last["batch"] / first["batch"]

        def steps(small: list[int], large: list[int]) -> str:
            first["durations_ns"], last["durations_ns"] = small, large
            return regime_sentence(rederived(record))

        small = [10_000_000, 10_100_000, 10_200_000, 10_300_000, 10_400_000]
        self.assertIn("most of a step is a cost the batch shares", steps(small, [2 * t for t in small]))
        per_row = steps(small, [int(widening * t) for t in small])
        self.assertIn("little of a step is shared", per_row)
        self.assertIn("flat within", steps(small, [t + 100_000 for t in small]))
        # the largest batch's middle half spans from 1.05x to 20x the smallest: readable as flat and as per-row
        noisy = steps(small, [10_500_000, 10_800_000, 60_000_000, 200_000_000, 210_000_000])
        self.assertIn("this run cannot say how much of a step the batch shares", noisy)
        self.assertNotIn("most of a step", noisy)
        # one slow outlier among the largest batch's steps moves nothing
        self.assertIn("most of a step is a cost the batch shares",
                      steps(small, [2 * t for t in small[:4]] + [900_000_000]))

    def test_the_batch_chart_names_the_one_at_a_time_run_apart_from_the_batched_run_at_its_rate(self) -> None:
        html = self.render("trained", self.record)
        serial = self.record["trained"]["serial"]["rate"]
        self.assertIn(f"one at a time, {serial:g}/s", html)
        self.assertIn(f">{serial:g}/s<", html)  # the batched run at the same rate keeps the bare rate

    def test_key_results_choose_their_words_from_the_record(self) -> None:
        record = copy.deepcopy(self.record)
        serial = record["rates"]["serial"]
        best = max(p["summary"]["throughput_tokens_per_s"] for p in record["rates"]["points"])
        scale_times(serial, 10 * serial["summary"]["throughput_tokens_per_s"] / best)  # serial at a tenth of the best
        self.assertIn("10.00× the same requests served one at a time.", self.render("key-results", rederived(record)))
        scale_times(serial, 0.1)  # serial as fast as the best
        self.assertIn("1.00× the same requests served one at a time.", self.render("key-results", rederived(record)))
        # the trained model's: batched over one at a time in paired rounds, worded by the side of 1 they lie on
        rounds = record["trained"]["batching_rounds"]
        rounds["serial"]["tokens"] = list(rounds["batched"]["tokens"])
        rounds["serial"]["seconds"] = [10 * seconds for seconds in rounds["batched"]["seconds"]]
        html = self.render("key-results", rederived(record))
        self.assertIn("batching wrote 10.00× (middle half 10.00–10.00) the output tokens per second of one at a time",
                      html)
        self.assertNotIn("noise", html)
        rounds["serial"]["seconds"] = list(rounds["batched"]["seconds"])
        self.assertIn("within its rounds&#39; noise of no gain", self.render("key-results", rederived(record)))
        rounds["serial"]["seconds"] = [seconds / 2 for seconds in rounds["batched"]["seconds"]]
        self.assertIn("fewer output tokens per second than one at a time (0.50×",
                      self.render("key-results", rederived(record)))
        # the sweep's single runs, beside the rounds: the highest rate's throughput over one at a time (not the best
        # rate's)
        trained = record["trained"]
        highest = max(trained["points"], key=lambda p: p["rate"])["summary"]["throughput_tokens_per_s"]
        scale_times(trained["serial"], 10 * trained["serial"]["summary"]["throughput_tokens_per_s"] / highest)
        self.assertIn("the sweep&#39;s batched run wrote 10.00× the output tokens per second",
                      self.render("trained", rederived(record)))
        average = next(p for p in record["admission"]["policies"] if p["name"] == "count_average")
        average["server"]["failed_for_memory"] = 0
        self.assertIn("happened to fail nobody", self.render("key-results", rederived(record)))
        average["server"]["failed_for_memory"] = 3
        self.assertIn("let 3 requests fail for memory", self.render("key-results", rederived(record)))
        by_bytes = next(p for p in record["admission"]["policies"] if p["name"] == "kv_budget_bytes")["server"]
        self.assertIn(") within its budget (peak", self.render("key-results", rederived(record)))
        by_bytes["peak_used_blocks"] = by_bytes["budget_blocks"] + 1
        self.assertIn(") above its budget (peak", self.render("key-results", rederived(record)))

    def test_the_step_and_rate_sections_word_what_limited_them_from_the_record(self) -> None:
        record = copy.deepcopy(self.record)
        for row in record["step_times"]:
            row["durations_ns"] = [10_000_000] * len(row["durations_ns"])
        self.assertIn("flat within 10%", self.render("steps", rederived(record)))
        for row in record["step_times"]:
            row["durations_ns"] = [10_000_000 * row["batch"]] * len(row["durations_ns"])
        self.assertIn("little of a step is shared", self.render("steps", rederived(record)))
        point = best_point(record)
        point["server"].update(decode_seconds=0.1 * point["summary"]["duration_s"], prefill_seconds=0.0)
        self.assertIn("computed for only 10% of the run: overhead-bound", self.render("rates", rederived(record)))
        point["server"].update(decode_seconds=0.95 * point["summary"]["duration_s"])
        self.assertIn("not HTTP, was the limit", self.render("rates", rederived(record)))

    def test_the_iteration_picture_is_the_replay_and_the_stall_uses_the_records_times(self) -> None:

        html = self.render("iterations", self.record)
        for it in replay(REPLAY_EXAMPLE, REPLAY_BUDGET, REPLAY_BLOCK):
            self.assertIn(f"iteration {it.number}: admitted", html)
            self.assertIn(f"{it.reserved_blocks} blocks reserved", html)
        self.assertEqual(html.count("<svg"), 1)
        self.assertIn("2 + 4 of 6 blocks", self.render("iteration", self.record))  # B's 2 held, C's 3 + D's 1 added
        record = copy.deepcopy(self.record)
        server = best_point(record)["server"]
        # NOTE: a stream waits out a whole packed call, so the picture's prefill is the mean call, not the mean prompt
        server.update(decode_seconds=0.02 * server["decode_steps"], prefill_seconds=0.06 * server["prefill_calls"],
                      prefills=3 * server["prefill_calls"])
        stall = self.render("prefill-stall", rederived(record))
        self.assertIn("a decode step of 20 ms and a prefill call of 60 ms (the prompts admitted together, 3.0 on "
                      "average, packed into one)", stall)
        self.assertIn("after 80 ms instead of 20 ms", stall)
        self.assertIn("A waits 80 ms", stall)
        before, after = stall_wait(model_thread(replay(STALL_EXAMPLE, 100, REPLAY_BLOCK), 0.02, 0.06))
        self.assertAlmostEqual(after - before, 0.08)  # the wait the picture marks is the stored step + prefill
