"""The HTTP server on 127.0.0.1: OpenAI-shaped replies, clear 4xx, cancellation on disconnect."""

from __future__ import annotations

import asyncio
import json
import random
import unittest
from typing import Any

import httpx

from kv_serving.admission import KVBudget
from kv_serving.scheduler import Scheduler
from kv_serving.testing import TINY_MODEL, QuietLoopTestCase, StepGate, serve_in_loop, tiny_engine

TIMEOUT_S = 20


async def stream_tokens(client: httpx.AsyncClient, url: str, body: dict[str, Any],
                        leave_after: int | None = None) -> tuple[list[int], list[str]]:
    """Token ids and raw data lines of one streamed completion; leaves after ``leave_after`` tokens."""
    tokens, lines = [], []
    async with client.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.status_code
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            lines.append(line[6:])
            if line[6:] != "[DONE]":
                tokens.extend(json.loads(line[6:]).get("choices", [{}])[0].get("token_ids", []))
            if leave_after is not None and len(tokens) >= leave_after:
                break
    return tokens, lines


class ServerTest(QuietLoopTestCase):
    async def test_streamed_and_plain_replies_carry_the_same_greedy_tokens_in_openai_shape(self) -> None:
        async with serve_in_loop(tiny_engine()) as (url, app), httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            body = {"model": "tiny", "prompt": [3, 1, 4, 1, 5], "max_tokens": 9}
            streamed, lines = await stream_tokens(client, url, body)
            plain = (await client.post(f"{url}/v1/completions", json=body)).json()
            scheduler: Scheduler = app.state.scheduler
        self.assertEqual(lines[-1], "[DONE]")
        self.assertEqual(json.loads(lines[-2])["choices"][0]["finish_reason"], "length")
        self.assertEqual(len(streamed), 9)
        self.assertEqual(plain["choices"][0]["token_ids"], streamed)
        self.assertEqual(plain["object"], "text_completion")
        self.assertEqual(plain["usage"], {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14})
        ids = [3, 1, 4, 1, 5]
        for _ in range(9):
            ids.append(int(scheduler.model.reference_logits(ids).argmax()))
        self.assertEqual(streamed, ids[5:])

    async def test_bad_requests_get_400_with_the_reason_while_other_streams_keep_going(self) -> None:
        vocab, positions = TINY_MODEL.vocab_size, TINY_MODEL.max_positions
        bad = [
            (b'{"prompt": [1, 2', "not valid JSON"),
            (b'[1, 2]', "must be a JSON object"),
            (b'{"max_tokens": 3}', "missing field prompt"),
            (b'{"prompt": [1, "two"]}', "list of integer token ids"),
            (b'{"prompt": [1, 2.5]}', "list of integer token ids"),
            (b'{"prompt": [true]}', "list of integer token ids"),
            (b'{"prompt": []}', "non-empty"),
            (json.dumps({"prompt": [1, vocab]}).encode(), f"[0, {vocab})"),
            (b'{"prompt": [1], "max_tokens": 0}', "max_tokens must be an integer >= 1, got 0"),
            (json.dumps({"prompt": [1] * 10, "max_tokens": positions}).encode(),
             f"= {positions + 10} positions, beyond the model's {positions}"),
            (b'{"prompt": [1], "temperature": 0.7, "n": 2}', "unsupported field(s) n, temperature"),
            (b'{"prompt": [1], "stream": "yes"}', "stream must be true or false"),
        ]
        async with serve_in_loop(tiny_engine(num_blocks=80)) as (url, app), \
                httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            scheduler: Scheduler = app.state.scheduler
            # Decode steps pass only when the test says so: the three streams cannot finish (each needs 84 steps)
            # before every refusal is in, however fast or slow this host is; one step passes between refusals.
            with StepGate(scheduler.model) as gate:
                streams = [asyncio.create_task(stream_tokens(client, url, {"prompt": [i + 1] * 7, "max_tokens": 85}))
                           for i in range(3)]
                async with asyncio.timeout(TIMEOUT_S):
                    while scheduler.counters.submitted < 3:
                        await asyncio.sleep(0.001)
                    if len(scheduler.running) < 3:  # some were admitted before the others arrived: one step more
                        while not gate.holding:
                            await asyncio.sleep(0.001)
                        gate.step()
                    while len(scheduler.running) < 3:  # 23 blocks each: all three fit the 80-block pool
                        await asyncio.sleep(0.001)
                running_at_reply = []
                for raw, reason in bad:
                    reply = await client.post(f"{url}/v1/completions", content=raw,
                                              headers={"content-type": "application/json"})
                    running_at_reply.append(len(scheduler.running))
                    gate.step()
                    with self.subTest(body=raw):
                        self.assertEqual(reply.status_code, 400)
                        self.assertIn(reason, reply.json()["error"]["message"])
                gate.open()
                results = await asyncio.wait_for(asyncio.gather(*streams), TIMEOUT_S)
        self.assertEqual(running_at_reply, [3] * len(bad), "every refusal came while all three streams decoded")
        for tokens, lines in results:
            self.assertEqual((len(tokens), lines[-1]), (85, "[DONE]"))

    async def test_never_fitting_request_gets_400_with_numbers_and_a_full_queue_503(self) -> None:
        config = tiny_engine(num_blocks=16, policy=KVBudget(4 * tiny_engine().block_bytes), max_waiting=1)
        async with serve_in_loop(config) as (url, app), httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            huge = await client.post(f"{url}/v1/completions", json={"prompt": [1] * 20, "max_tokens": 10})
            self.assertEqual(huge.status_code, 400)
            self.assertIn("8 blocks of 4", huge.json()["error"]["message"])
            self.assertIn("KV budget is 4 blocks", huge.json()["error"]["message"])
            # a paused scheduler admits nobody: the first request waits, the second finds the queue full
            scheduler: Scheduler = app.state.scheduler
            await scheduler.stop()
            body = {"prompt": [1] * 4, "max_tokens": 10}
            first = asyncio.create_task(client.post(f"{url}/v1/completions", json=body))
            async with asyncio.timeout(TIMEOUT_S):
                while not scheduler.waiting:
                    await asyncio.sleep(0.005)
            second = await client.post(f"{url}/v1/completions", json=body)
            self.assertEqual(second.status_code, 503)
            self.assertIn("waiting queue is full (1 of 1)", second.json()["error"]["message"])
            self.assertEqual(second.headers["retry-after"], "1")
            scheduler.start()
            self.assertEqual((await asyncio.wait_for(first, TIMEOUT_S)).status_code, 200)

    async def test_cancelling_many_streams_at_random_moments_leaves_no_block_and_no_task(self) -> None:
        rng = random.Random(7)
        async with serve_in_loop(tiny_engine(num_blocks=48)) as (url, app):
            scheduler: Scheduler = app.state.scheduler
            before = asyncio.all_tasks()  # this test, the server, its lifespan and the scheduler loop
            async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
                async def one(i: int) -> tuple[int, int]:
                    await asyncio.sleep(rng.uniform(0, 0.3))
                    max_tokens = rng.randint(5, 40)
                    leave = rng.choice([None, 0, 1, rng.randint(1, max_tokens)])
                    body = {"prompt": [rng.randrange(TINY_MODEL.vocab_size) for _ in range(rng.randint(1, 30))],
                            "max_tokens": max_tokens}
                    if leave == 0:  # leave before the first token, after a random delay
                        try:
                            await asyncio.wait_for(stream_tokens(client, url, body), rng.uniform(0, 0.05))
                        except TimeoutError:
                            pass
                        return max_tokens, -1
                    tokens, _ = await stream_tokens(client, url, body, leave)
                    return max_tokens, len(tokens)

                results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(40))), TIMEOUT_S)
            for _ in range(200):  # the last cancellations retire within an iteration or two
                if not scheduler.running and not scheduler.waiting:
                    break
                await asyncio.sleep(0.01)
            metrics = scheduler.metrics()
            pool = scheduler.pool
            self.assertEqual((metrics["num_running"], metrics["num_waiting"], metrics["num_used_blocks"]), (0, 0, 0))
            self.assertEqual(sorted(pool.blocks.free), list(range(pool.num_blocks)))
            self.assertGreater(metrics["cancelled"], 5)
            self.assertEqual(metrics["cancelled"] + metrics["completed"], metrics["submitted"])
            # every computed row was streamed or dropped, and only cancelled requests lost a row, one at most each
            self.assertEqual(metrics["decode_rows"] + metrics["prefills"] - metrics["tokens_generated"],
                             metrics["rows_dropped"])
            self.assertLessEqual(metrics["rows_dropped"], metrics["cancelled"])
            self.assertEqual(metrics["tokens_after_disconnect"], 0)
            await asyncio.sleep(0.1)  # closed connections' tasks end
            self.assertEqual(asyncio.all_tasks(), before)  # every per-request task has ended
        self.assertTrue(any(received < max_tokens for max_tokens, received in results))

    async def test_a_plain_request_whose_client_gives_up_is_cancelled(self) -> None:
        async with serve_in_loop(tiny_engine(num_blocks=48)) as (url, app):
            scheduler: Scheduler = app.state.scheduler
            # Its first decode step is held at the gate until the server has seen the client go: the request
            # cannot finish first, whatever the host's speed.
            with StepGate(scheduler.model) as gate:
                async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
                    post = asyncio.create_task(client.post(f"{url}/v1/completions",
                                                           json={"prompt": [1] * 8, "max_tokens": 80}))
                    async with asyncio.timeout(TIMEOUT_S):
                        while not (scheduler.running and gate.holding):  # prefilled, first decode step held
                            await asyncio.sleep(0.002)
                    request = scheduler.running[0]
                    post.cancel()
                    await asyncio.gather(post, return_exceptions=True)
                async with asyncio.timeout(TIMEOUT_S):  # the client and its connection are closed now
                    while not request.client_gone:
                        await asyncio.sleep(0.002)
                gate.open()
                async with asyncio.timeout(TIMEOUT_S):
                    while not scheduler.counters.cancelled:
                        await asyncio.sleep(0.002)
            counters = scheduler.counters
            self.assertEqual((counters.cancelled, counters.completed), (1, 0))
            self.assertEqual(len(request.output), 1)  # the prefill's token; the held step's row was dropped
            self.assertEqual((counters.decode_rows_after_disconnect, counters.rows_dropped), (1, 1))
            self.assertEqual(scheduler.pool.num_used_blocks, 0)

    async def test_health_and_metrics_describe_the_pool_and_queues(self) -> None:
        async with serve_in_loop(tiny_engine(num_blocks=20)) as (url, _), httpx.AsyncClient(timeout=TIMEOUT_S) as c:
            self.assertEqual((await c.get(f"{url}/health")).json(), {"status": "ok"})
            metrics = (await c.get(f"{url}/metrics")).json()
        self.assertEqual((metrics["num_blocks"], metrics["num_free_blocks"], metrics["num_used_blocks"]), (20, 20, 0))
        self.assertEqual((metrics["num_running"], metrics["num_waiting"]), (0, 0))
        self.assertEqual(metrics["admission"]["policy"], "kv_budget_bytes")


if __name__ == "__main__":
    unittest.main()
