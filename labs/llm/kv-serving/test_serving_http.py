"""The HTTP server on 127.0.0.1: OpenAI-shaped replies, clear 4xx, cancellation on disconnect."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import random
import signal
import subprocess
import sys
import tempfile
import unittest
import unittest.mock
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx

from kv_serving import server
from kv_serving.bounds import TRANSPORT, stalls
from kv_serving.launch import log_text, serving_url
from kv_serving.protocol import max_body_bytes
from kv_serving.testing import (
    TINY_MODEL,
    QuietLoopTestCase,
    StepGate,
    despite_stalls,
    never_reading_stream,
    read_slowly,
    serve_in_loop,
    stepping_until_stalled,
    tiny_engine,
    unread_stream,
)
from labkit.waiting import HANG_S, eventually, run, within
from llm_models.serving.admission import KVBudget, MaxRunning
from llm_models.serving.scheduler import Scheduler

JSON = {"content-type": "application/json"}


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
                for choice in json.loads(line[6:]).get("choices", []):  # none in an error or a usage chunk
                    tokens.extend(choice["token_ids"])
            if leave_after is not None and len(tokens) >= leave_after:
                break
    return tokens, lines


class ClosingConnection(asyncio.WriteTransport):
    """A cut stream's connection as the server watches it close: the bytes its client has not taken, one value per
    look, and a socket whose send queue cannot be read (so the transport's buffer alone counts)."""

    class Socket:
        def fileno(self) -> int:
            raise ValueError("a stand-in socket has no descriptor")

    def __init__(self, unsent: Iterator[int]) -> None:
        super().__init__()
        self.unsent, self.aborted = unsent, False

    def get_write_buffer_size(self) -> int:
        return next(self.unsent)

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.Socket() if name == "socket" and not self.aborted else default

    def abort(self) -> None:
        self.aborted = True


class StallWatching(QuietLoopTestCase):
    """One loop (kv_serving.bounds.stalls) watches both a write that waits for room and a cut connection closing."""

    async def test_a_wait_ends_when_its_work_is_done_or_when_the_client_has_taken_nothing_for_the_timeout(
            self) -> None:
        looks = itertools.count()

        async def done_at_the_third_look(poll_s: float) -> bool:
            return next(looks) == 2

        async def never_done(poll_s: float) -> bool:
            await asyncio.sleep(poll_s)
            return False

        falling = itertools.count(10**6, -1)  # a client taking a byte between any two looks
        self.assertFalse(await within(stalls(HANG_S, lambda: next(falling), done_at_the_third_look), "the wait"))
        self.assertTrue(await within(stalls(0.05, lambda: 100, never_done), "the stall to be seen"))

    async def test_a_closing_connection_is_aborted_only_if_its_client_takes_nothing_of_what_is_left(self) -> None:
        unread = ClosingConnection(itertools.repeat(100))
        await within(server.abort_when_stalled(unread, 0.05), "the unread connection to be aborted")
        taken = ClosingConnection(itertools.chain([100, 50], itertools.repeat(0)))
        await within(server.abort_when_stalled(taken, 1.0), "the watch to see the client take the rest")
        self.assertEqual((unread.aborted, taken.aborted), (True, False))


class ServerTest(QuietLoopTestCase):
    async def test_streamed_and_plain_replies_carry_the_same_greedy_tokens_in_openai_shape(self) -> None:
        async with serve_in_loop(tiny_engine()) as (url, app), httpx.AsyncClient(timeout=HANG_S) as client:
            body = {"model": "tiny", "prompt": [3, 1, 4, 1, 5], "max_tokens": 9}
            streamed, lines = await stream_tokens(client, url, body)
            plain = (await client.post(f"{url}/v1/completions", json=body)).json()
            scheduler: Scheduler = app.state.scheduler
        self.assertEqual(lines[-1], "[DONE]")
        self.assertEqual(json.loads(lines[-2])["choices"][0]["finish_reason"], "length")
        self.assertEqual(len(streamed), 9)
        self.assertEqual(plain["choices"][0]["token_ids"], streamed)
        chunks = [json.loads(line) for line in lines[:-1]]
        self.assertEqual(len({(c["id"], c["created"]) for c in chunks}), 1)  # one id and one created per request
        self.assertRegex(chunks[0]["id"], r"^cmpl-[0-9a-f]{32}$")  # a uuid4: unique across launches too
        self.assertNotEqual(plain["id"], chunks[0]["id"])
        self.assertEqual(plain["object"], "text_completion")
        self.assertEqual(plain["usage"], {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14,
                                          "prompt_tokens_details": {"cached_tokens": 0}})
        ids = [3, 1, 4, 1, 5]
        for _ in range(9):
            ids.append(int(scheduler.model.reference_logits(ids).argmax()))
        self.assertEqual(streamed, ids[5:])

    async def test_bad_requests_get_400_with_the_reason_while_other_streams_keep_going(self) -> None:
        vocab, positions = TINY_MODEL.vocab_size, TINY_MODEL.max_positions
        bad = [  # (body, what the message says, the error's param)
            (b'{"prompt": [1, 2', "not valid JSON", None),
            (b'[1, 2]', "must be a JSON object", None),
            (b'{"max_tokens": 3}', "missing field prompt", "prompt"),
            (b'{"prompt": [1, "two"]}', 'prompt[1] must be an integer token id, got "two"', "prompt"),
            (json.dumps({"prompt": [1] * 40 + [1.5]}).encode(), "prompt[40] must be an integer token id, got 1.5",
             "prompt"),
            (b'{"prompt": [true]}', "prompt[0] must be an integer token id, got true", "prompt"),
            (b'{"prompt": []}', "non-empty", "prompt"),
            (json.dumps({"prompt": [1] * 30 + [vocab]}).encode(), f"prompt[30] = {vocab} is not a token id", "prompt"),
            (json.dumps({"prompt": [1, -1]}).encode(), f"prompt[1] = -1 is not a token id: ids must lie in [0, {vocab})",
             "prompt"),
            (b'{"prompt": [1], "max_tokens": 0}', "max_tokens must be an integer >= 1, got 0", "max_tokens"),
            (json.dumps({"prompt": [1] * 10, "max_tokens": positions}).encode(),
             f"= {positions + 10} positions, beyond the model's {positions}", "max_tokens"),
            (b'{"prompt": [1], "top_p": 0.9, "best_of": 2}', "unsupported field(s) best_of, top_p", "best_of"),
            (b'{"prompt": [1], "temperature": 0.7}', "temperature must be 0 (this server decodes greedily), got 0.7",
             "temperature"),
            (b'{"prompt": [1], "n": 2}', "n must be 1", "n"),
            (b'{"prompt": [1], "stream": "yes"}', "stream must be true or false", "stream"),
            (b'{"prompt": [1], "model": null}', "model must be a string, got null", "model"),  # absent is not null
            (b'{"prompt": [1], "model": 7}', "model must be a string, got 7", "model"),
            (b'{"prompt": [1], "stream_options": {"include_usage": true}}', "only allowed with stream: true",
             "stream_options"),
            (b'{"prompt": [' + b"9" * 5000 + b']}', "an integer of 5000 digits", None),
            (b'{"prompt": [1], "max_tokens": ' + b"9" * 5000 + b'}', "an integer of 5000 digits", None),
            (b'{"prompt": ' + b"[" * 3000 + b"]" * 3000 + b'}', "nests arrays or objects too deeply", None),
        ]
        async with serve_in_loop(tiny_engine(num_blocks=80)) as (url, app), \
                httpx.AsyncClient(timeout=HANG_S) as client:
            scheduler: Scheduler = app.state.scheduler
            # Decode steps pass only when the test says so: the three streams cannot finish (each needs 84 steps)
            # before every refusal is in, however fast or slow this host is; one step passes between refusals.
            with StepGate(scheduler.model) as gate:
                streams = [asyncio.create_task(stream_tokens(client, url, {"prompt": [i + 1] * 7, "max_tokens": 85}))
                           for i in range(3)]
                await eventually(lambda: scheduler.counters.submitted >= 3, "the three streams to be submitted")
                if len(scheduler.running) < 3:  # some were admitted before the others arrived: one step more
                    await eventually(lambda: gate.holding, "a decode step to wait at the gate")
                    gate.step()
                await eventually(lambda: len(scheduler.running) >= 3,  # 23 blocks each: all three fit the 80-block pool
                                 "all three streams to be running")
                running_at_reply = []
                for raw, reason, param in bad:
                    reply = await client.post(f"{url}/v1/completions", content=raw,
                                              headers={"content-type": "application/json"})
                    running_at_reply.append(len(scheduler.running))
                    gate.step()
                    with self.subTest(body=raw[:80]):
                        self.assertEqual(reply.status_code, 400)
                        error = reply.json()["error"]
                        self.assertIn(reason, error["message"])
                        self.assertEqual((error["type"], error["param"]), ("invalid_request_error", param))
                gate.open()
                results = await within(asyncio.gather(*streams), "the three streams to finish")
        self.assertEqual(running_at_reply, [3] * len(bad), "every refusal came while all three streams decoded")
        for tokens, lines in results:
            self.assertEqual((len(tokens), lines[-1]), (85, "[DONE]"))

    async def test_streams_keep_their_tokens_alone_past_an_unknown_model_bad_bodies_and_a_client_that_leaves(
            self) -> None:
        prompts = [[5, 9, 2], [7] * 11, [1, 2, 3, 4, 5, 6]]
        bad = [  # (body, status, the error's param)
            ({"model": "gpt-9", "prompt": [1], "max_tokens": 2}, 404, "model"),
            ({"model": "tiny", "max_tokens": 2}, 400, "prompt"),
            ({"model": "tiny", "prompt": [1, "two"]}, 400, "prompt"),
        ]
        async with serve_in_loop(tiny_engine(num_blocks=80)) as (url, app), \
                httpx.AsyncClient(timeout=HANG_S) as client:
            scheduler: Scheduler = app.state.scheduler
            alone = []  # each prompt's greedy tokens from one causal pass over its own prefix, no batch, no server
            for prompt in prompts:
                ids = list(prompt)
                for _ in range(20):
                    ids.append(int(scheduler.model.reference_logits(ids).argmax()))
                alone.append(ids[len(prompt):])
            # Decode steps pass only when the test says so, one at a time: nothing below finishes (20 tokens each)
            # before every refusal is in and the leaver has gone, however fast or slow this host is. The leaver
            # comes once the three are running, so it cannot reach its third token before it runs beside them.
            with StepGate(scheduler.model) as gate:
                streams = [asyncio.create_task(stream_tokens(client, url, {"prompt": p, "max_tokens": 20}))
                           for p in prompts]

                def running(count: int) -> Callable[[], bool]:
                    def admitted() -> bool:  # a held step passes only while some are still to be admitted
                        if len(scheduler.running) < count:
                            gate.step_if_held()
                        return len(scheduler.running) >= count
                    return admitted

                await eventually(running(3), "the three streams to be running")
                leaver = asyncio.create_task(stream_tokens(client, url, {"prompt": [8] * 5, "max_tokens": 60},
                                                           leave_after=3))
                await eventually(lambda: scheduler.counters.submitted >= 4, "the leaver to be submitted")
                await eventually(running(4), "the leaver to run beside the three (the pool holds them all)")
                await eventually(lambda: gate.holding, "the first step of all four to wait at the gate")
                running_at_reply = []
                for body, status, param in bad:  # no step passes: a refusal needs none
                    reply = await client.post(f"{url}/v1/completions", json=body)
                    running_at_reply.append(len(scheduler.running))
                    with self.subTest(param=param, body=body):
                        self.assertEqual((reply.status_code, reply.json()["error"]["param"]), (status, param))

                def leaver_gone() -> bool:  # its client leaves at its third token
                    gate.step_if_held()
                    return leaver.done()

                await eventually(leaver_gone, "the leaver's client to leave at its third token")
                self.assertFalse(any(stream.done() for stream in streams))
                gate.open()
                results = await within(asyncio.gather(*streams), "the three streams to finish")
            await eventually(lambda: not scheduler.running and not scheduler.waiting, "the scheduler to be idle")
            counters = scheduler.counters
            self.assertEqual((counters.cancelled, counters.completed), (1, 3))
            self.assertEqual(scheduler.pool.num_used_blocks, 0)
        self.assertEqual(running_at_reply, [4] * len(bad), "every refusal came while all four streams decoded")
        self.assertEqual(len(leaver.result()[0]), 3)
        self.assertEqual([tokens for tokens, _ in results], alone)
        self.assertEqual({lines[-1] for _, lines in results}, {"[DONE]"})

    async def test_bodies_must_be_utf8_json_with_unicode_strings_and_each_key_once(self) -> None:
        async with serve_in_loop(tiny_engine()) as (url, _), httpx.AsyncClient(timeout=HANG_S) as client:
            completions = f"{url}/v1/completions"
            body = '{"prompt": [1], "max_tokens": 1}'
            replies = {
                "lone surrogate": await client.post(completions, headers=JSON,
                                                    content=b'{"prompt": [1], "max_tokens": 1, "model": "\\ud800"}'),
                "kept alive": await client.post(completions, json={"prompt": [1], "max_tokens": 1}),
                "surrogate key": await client.post(completions, headers=JSON,
                                                   content=b'{"prompt": [1], "\\udc00": 1}'),
                "BOM": await client.post(completions, headers=JSON, content=b"\xef\xbb\xbf" + body.encode()),
                "UTF-16": await client.post(completions, headers=JSON, content=body.encode("utf-16")),
                "latin-1": await client.post(completions, content=body.encode(),
                                             headers={"content-type": "application/json; charset=latin-1"}),
                "utf-8 charset": await client.post(completions, content=body.encode(),
                                                   headers={"content-type": "application/json; charset=UTF-8"}),
                "duplicate key": await client.post(completions, headers=JSON,
                                                   content=b'{"prompt": [1], "max_tokens": 1, "max_tokens": 9}'),
            }
        expected = {
            "lone surrogate": (400, "model holds a lone surrogate", "model"),
            "kept alive": (200, None, None),
            "surrogate key": (400, "a field name holds a lone surrogate", None),
            "BOM": (400, "starts with a UTF-8 byte order mark; a JSON body is UTF-8 without one (RFC 8259)", None),
            "UTF-16": (400, "the request body is not UTF-8 (byte 0 of 66); a JSON body must be UTF-8", None),
            "latin-1": (415, "content-type charset=latin-1: a JSON body must be UTF-8 (RFC 8259)", None),
            "utf-8 charset": (200, None, None),
            "duplicate key": (400, 'holds key "max_tokens" twice in one object', "max_tokens"),
        }
        for name, (status, message, param) in expected.items():
            with self.subTest(name):
                self.assertEqual(replies[name].status_code, status, replies[name].text)
                if message is not None:
                    self.assertIn(message, replies[name].json()["error"]["message"])
                    self.assertEqual(replies[name].json()["error"]["param"], param)

    async def test_headers_or_a_body_that_do_not_arrive_within_the_request_timeout_get_408(self) -> None:
        async def trickle(port: int, start: bytes) -> tuple[bytes, int]:
            """Send ``start``, then a header whose value never ends, a byte per 50 ms, until the server answers;
            the whole reply and the bytes sent. The headers never finish, however fast or slow the host."""
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            reply = asyncio.create_task(reader.read())  # to the end: the server closes after its 408
            sent = 0
            try:
                for byte in itertools.chain(start, b"x-pad: ", itertools.repeat(ord("a"))):
                    if reply.done():
                        break
                    writer.write(bytes([byte]))
                    sent += 1
                    await asyncio.sleep(0.05)
                return await reply, sent
            finally:
                writer.close()

        body = b'{"prompt": [1], "max_tokens": 1}'
        headers = (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                   b"content-length: " + str(len(body)).encode() + b"\r\n")
        async with serve_in_loop(tiny_engine(), request_timeout_s=0.5) as (url, _):
            port = int(url.rsplit(":", 1)[1])
            slow_headers = asyncio.create_task(trickle(port, headers))
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(headers + b"\r\n" + body[:5])  # headers at once, the body never finished
            slow_body = await within(reader.read(), "the server's 408 to a body that never finishes")
            writer.close()
            header_reply, sent = await within(slow_headers, "the server's 408 to a client trickling its headers")
            async with httpx.AsyncClient(timeout=HANG_S) as client:
                after = await despite_stalls(client, "POST", f"{url}/v1/completions", content=body, headers=JSON)
        self.assertTrue(header_reply.startswith(b"HTTP/1.1 408 "), header_reply[:80])
        self.assertIn(b'"message": "the request headers did not arrive within 0.5 s"', header_reply)
        self.assertGreater(sent, 1)  # bytes kept coming, and the deadline held all the same
        self.assertTrue(slow_body.startswith(b"HTTP/1.1 408 "), slow_body[:80])
        self.assertIn(b"the request body did not arrive within 0.5 s", slow_body)
        self.assertEqual(after.status_code, 200)  # a request sent at once is served as before

    async def test_a_connection_that_sends_nothing_is_answered_408_and_closed_after_the_request_timeout(self) -> None:
        async with serve_in_loop(tiny_engine(), request_timeout_s=0.5) as (url, _):
            port = int(url.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:  # nothing is sent: the deadline runs from the accept, not from a first byte that never comes
                reply = await within(reader.read(), "the server to close a connection that sent nothing")
            finally:
                writer.close()
            async with httpx.AsyncClient(timeout=HANG_S) as client:
                after = await despite_stalls(client, "POST", f"{url}/v1/completions",
                                             json={"prompt": [1], "max_tokens": 1})
        self.assertTrue(reply.startswith(b"HTTP/1.1 408 "), reply[:80])
        self.assertIn(b"no request arrived within 0.5 s of the connection opening", reply)
        self.assertEqual(after.status_code, 200)  # a client that sends at once is served as before

    async def test_a_stream_whose_writes_never_complete_is_cancelled_after_the_stall_timeout_and_frees_its_blocks(
            self) -> None:
        async with serve_in_loop(tiny_engine(), stall_timeout_s=0.2) as (url, app):
            scheduler: Scheduler = app.state.scheduler
            with StepGate(scheduler.model):  # no step runs until the stall is seen: it cannot finish first
                async with unread_stream(app, "/v1/completions", {"prompt": [1] * 4, "max_tokens": 80, "stream": True}):
                    await eventually(lambda: scheduler.running and scheduler.running[0].client_gone,
                                     "the stalled stream to be cancelled")
                    self.assertIn("took nothing of its stream for 0.2 s", scheduler.running[0].gone_reason)
            await eventually(lambda: scheduler.counters.cancelled == 1, "the request to be retired as cancelled")
            await eventually(lambda: not scheduler.pool.num_used_blocks, "its blocks to return to the pool")
            self.assertLess(scheduler.counters.tokens_generated, 80)  # stopped long before its last token
            self.assertEqual((scheduler.running, list(scheduler.waiting)), ([], []))

    async def test_a_client_that_keeps_taking_bytes_is_never_cut_however_long_each_write_waits(self) -> None:
        """No write ever completes, but the bytes not yet taken fall at every look: the client reads, so it stays,
        for as many looks as five stall timeouts hold. Then it stops taking anything, and it is cut."""
        taking = True

        class Draining(asyncio.WriteTransport):  # the connection as the server sees it: bytes not yet taken
            def __init__(self) -> None:
                super().__init__()
                self.unsent, self.looks = 1_000_000, 0

            def get_write_buffer_size(self) -> int:
                self.looks += 1
                self.unsent -= 1 if taking else 0
                return self.unsent

            def get_extra_info(self, name: str, default: object = None) -> object:
                return default  # no socket: the transport's buffer alone

        transport, stall_s = Draining(), 0.2
        async with serve_in_loop(tiny_engine(), stall_timeout_s=stall_s) as (_, app):
            scheduler: Scheduler = app.state.scheduler
            with StepGate(scheduler.model):
                async with unread_stream(app, "/v1/completions", {"prompt": [1] * 4, "max_tokens": 80, "stream": True},
                                         state={TRANSPORT: transport}):
                    await eventually(lambda: transport.looks >= 50, "five stall timeouts' worth of looks (10 each)")
                    self.assertFalse(scheduler.running[0].client_gone)
                    taking = False
                    await eventually(lambda: scheduler.running[0].client_gone, "the stalled stream to be cut")
        self.assertEqual(scheduler.counters.cancelled, 1)

    async def test_a_cut_stream_ends_with_an_error_event_and_the_end_of_its_chunked_body(self) -> None:
        """A real socket that reads nothing is cut; what it then reads is every event sent before the cut, whole,
        a last error event naming the stall, ``[DONE]`` and the chunked body's end, not a reply broken off."""
        body = {"prompt": [1] * 4, "max_tokens": 91, "stream": True}
        # the connection is aborted if nothing is read for another stall timeout after the cut: 3 s for this test's
        # first read, which follows the cut at once, on however loaded a host
        async with serve_in_loop(tiny_engine(num_blocks=24), stall_timeout_s=3.0, send_buffer_bytes=1024) as (url, app):
            scheduler: Scheduler = app.state.scheduler
            with StepGate(scheduler.model) as gate:
                async with never_reading_stream(url, "/v1/completions", body) as client:
                    await eventually(lambda: scheduler.running, "the unread stream to start")
                    await eventually(stepping_until_stalled(scheduler, gate, cancelled=1),
                                     "the unread stream to back up, stall and be cut")
                    loop, received = asyncio.get_running_loop(), bytearray()
                    while part := await within(loop.sock_recv(client, 65536), "the rest of the cut stream"):
                        received += part
        head, _, chunked = bytes(received).partition(b"\r\n\r\n")
        self.assertIn(b"transfer-encoding: chunked", head.lower())
        payload, rest = bytearray(), chunked
        while True:  # the chunks, whole, up to the zero-length last one
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            payload += rest[:size]
            self.assertEqual(rest[size:size + 2], b"\r\n")
            rest = rest[size + 2:]
        self.assertEqual(rest, b"\r\n")  # nothing after the body's end
        events = [line[6:] for line in payload.decode().split("\n\n") if line]
        self.assertEqual(events[-1], "[DONE]")
        error = json.loads(events[-2])["error"]
        self.assertEqual(error["code"], "client_stalled")
        self.assertIn("took nothing of its stream for 3 s", error["message"])
        tokens = [json.loads(e)["choices"][0]["token_ids"] for e in events[:-2]]
        self.assertTrue(tokens and len(tokens) < body["max_tokens"])  # cut before its end, each event whole
        await eventually(lambda: not server.CLOSING, "the cut connection's watch to end, and to be let go")

    async def test_a_socket_that_is_never_read_gets_its_request_cancelled_and_another_client_is_served_meanwhile(
            self) -> None:
        """A real socket with the smallest receive buffer, which never reads: its reply backs up through the kernel's
        buffers into the server's writes, the stall cancels it, and its blocks serve a well-behaved client."""
        body = {"prompt": [1] * 4, "max_tokens": 91, "stream": True}  # 95 of the tiny model's 96 positions
        async with serve_in_loop(tiny_engine(num_blocks=24), stall_timeout_s=0.5, send_buffer_bytes=1024) as (url, app):
            scheduler: Scheduler = app.state.scheduler
            with StepGate(scheduler.model) as gate:
                async with never_reading_stream(url, "/v1/completions", body):
                    await eventually(lambda: scheduler.running, "the unread stream to start")
                    request = scheduler.running[0]
                    await eventually(stepping_until_stalled(scheduler, gate, cancelled=1),
                                     "the unread stream to back up, stall and be cancelled")
                    gate.open()
                    await eventually(lambda: not scheduler.pool.num_used_blocks, "its blocks back in the pool")
                    async with httpx.AsyncClient(timeout=HANG_S) as client:  # the unread socket is still open
                        reply = await client.post(f"{url}/v1/completions", json={"prompt": [1], "max_tokens": 4})
                    self.assertEqual(reply.status_code, 200, reply.text)
                    self.assertEqual(len(reply.json()["choices"][0]["token_ids"]), 4)
        self.assertIn("took nothing of its stream for 0.5 s", request.gone_reason)
        self.assertLess(len(request.output), body["max_tokens"])

    async def test_a_burst_past_the_prefill_bound_gets_503_at_once_with_retry_after_and_the_rest_are_served(
            self) -> None:
        """10 prompt tokens/s for 3 s: 30 tokens may wait. While the first request's step is held, nine prompts of
        8 tokens arrive: three wait (24 tokens), the other six are refused at once, naming the bound."""
        engine = tiny_engine(num_blocks=40, policy=MaxRunning(1), ttft_target_s=3.0, prefill_rate=10.0)
        async with serve_in_loop(engine) as (url, app), httpx.AsyncClient(timeout=HANG_S) as client:
            scheduler: Scheduler = app.state.scheduler
            with StepGate(scheduler.model) as gate:
                first = asyncio.ensure_future(client.post(f"{url}/v1/completions", json={"prompt": [1] * 8,
                                                                                          "max_tokens": 2}))
                await eventually(lambda: gate.holding, "the first request's decode step to be held")
                burst = [asyncio.ensure_future(client.post(f"{url}/v1/completions",
                                                           json={"prompt": [2] * 8, "max_tokens": 2}))
                         for _ in range(9)]
                await eventually(lambda: scheduler.counters.refused_prefill_bound + len(scheduler.waiting) == 9,
                                 "every request of the burst to be queued or refused")
                await eventually(lambda: sum(task.done() for task in burst) == 6,
                                 "the six refusals to be answered while the step is still held")
                refused = [task for task in burst if task.done()]
                self.assertEqual(len(scheduler.waiting), 3)
                for reply in [task.result() for task in refused]:
                    error = reply.json()["error"]
                    self.assertEqual((reply.status_code, error["code"], error["type"]),
                                     (503, "prefill_queue_full", "server_overloaded"))
                    # 2.4 s of prefill ahead and 0.8 s of its own: it fits once 0.2 s of the work ahead is done
                    self.assertEqual(reply.headers["retry-after"], "1")
                    self.assertIn("3 prefills (24 prompt tokens) wait ahead", error["message"])
                gate.open()
                served = [await first, *[await task for task in burst if task not in refused]]
            self.assertEqual([reply.status_code for reply in served], [200] * 4)

    async def test_a_prompt_whose_own_prefill_passes_the_target_is_refused_and_the_others_run_on(self) -> None:
        """10 prompt tokens/s for 3 s: a 40-token prompt alone would take 4 s. Beside a running request it gets a
        400 naming the target and the field, no Retry-After (no wait makes it fit), and nothing of it is queued; a
        small request right after it is taken, and the running one finishes every token."""
        engine = tiny_engine(num_blocks=40, ttft_target_s=3.0, prefill_rate=10.0)
        async with serve_in_loop(engine) as (url, app), httpx.AsyncClient(timeout=HANG_S) as client:
            scheduler: Scheduler = app.state.scheduler
            with StepGate(scheduler.model) as gate:
                running = asyncio.ensure_future(client.post(f"{url}/v1/completions",
                                                            json={"prompt": [1] * 8, "max_tokens": 6}))
                await eventually(lambda: gate.holding, "the running request's decode step to be held")
                long = await client.post(f"{url}/v1/completions", json={"prompt": [2] * 40, "max_tokens": 2})
                error = long.json()["error"]
                self.assertEqual((long.status_code, error["code"], error["param"]),
                                 (400, "prompt_over_ttft_target", "prompt"))
                self.assertNotIn("retry-after", long.headers)
                self.assertIn("beyond its 3 s time-to-first-token target even with nothing queued", error["message"])
                self.assertEqual(len(scheduler.waiting), 0)
                small = asyncio.ensure_future(client.post(f"{url}/v1/completions",
                                                          json={"prompt": [3] * 8, "max_tokens": 2}))
                await eventually(lambda: len(scheduler.waiting) + len(scheduler.running) == 2,
                                 "the small request to be taken")
                gate.open()
                replies = [await running, await small]
            self.assertEqual([reply.status_code for reply in replies], [200, 200])
            self.assertEqual(replies[0].json()["usage"]["completion_tokens"], 6)

    async def test_a_client_that_reads_slowly_gets_its_whole_stream_and_is_never_cancelled(self) -> None:
        """The same small buffers, a reader taking 256 bytes every 20 ms: every write waits for it, none for long."""
        body = {"prompt": [1] * 4, "max_tokens": 91, "stream": True}
        async with serve_in_loop(tiny_engine(), stall_timeout_s=5.0, send_buffer_bytes=1024) as (url, app):
            scheduler: Scheduler = app.state.scheduler
            received = await read_slowly(url, "/v1/completions", body, chunk_bytes=256, pause_s=0.02)
        self.assertIn(b"data: [DONE]", received)
        events = [json.loads(line[6:]) for line in received.split(b"\n") if line.startswith(b"data: {")]
        self.assertEqual(sum(len(c["token_ids"]) for e in events for c in e["choices"]), body["max_tokens"])
        self.assertEqual((scheduler.counters.cancelled, scheduler.counters.completed), (0, 1))
        self.assertGreater(len(received), 8 * 1024)  # more than the buffers hold: the reader set the pace

    async def test_greedy_n_and_temperature_are_accepted_and_include_usage_adds_a_last_usage_chunk(self) -> None:
        async with serve_in_loop(tiny_engine()) as (url, _), httpx.AsyncClient(timeout=HANG_S) as client:
            body = {"prompt": [2, 7], "max_tokens": 3, "n": 1, "temperature": 0,
                    "stream_options": {"include_usage": True}}
            tokens, lines = await stream_tokens(client, url, body)
        chunks = [json.loads(line) for line in lines[:-1]]
        self.assertEqual((len(tokens), lines[-1]), (3, "[DONE]"))
        self.assertTrue(all(c["usage"] is None for c in chunks[:-1]))  # as OpenAI: null on every other chunk
        self.assertEqual(chunks[-1]["choices"], [])
        self.assertEqual(chunks[-1]["usage"], {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5,
                                             "prompt_tokens_details": {"cached_tokens": 0}})
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")

    async def test_wrong_media_type_oversized_bodies_and_unknown_routes_get_openai_error_objects(self) -> None:
        limit = max_body_bytes(TINY_MODEL.max_positions)

        async def in_parts() -> AsyncIterator[bytes]:  # no Content-Length: the server counts while it reads
            yield b'{"prompt": [' + b"1," * limit
            yield b"1]}"

        async with serve_in_loop(tiny_engine()) as (url, app), httpx.AsyncClient(timeout=HANG_S) as client:
            completions = f"{url}/v1/completions"
            replies = {
                "text/plain": await client.post(completions, content=b'{"prompt": [1]}',
                                                 headers={"content-type": "text/plain"}),
                "no content-type": await client.post(completions, content=b'{"prompt": [1]}'),
                "declared too large": await client.post(completions, content=b" " * (limit + 1), headers=JSON),
                "read too large": await client.post(completions, content=in_parts(), headers=JSON),
                "unknown route": await client.get(f"{url}/v1/nothing"),
                "wrong method": await client.get(completions),
            }
            after = await client.post(completions, json={"prompt": [1], "max_tokens": 2})  # the refusals left no mess
            app.state.scheduler.submit = None  # a bug in the server: calling it raises TypeError
            with self.assertLogs("uvicorn.error", "ERROR"):  # uvicorn still logs the traceback of a 500
                replies["server bug"] = await client.post(completions, json={"prompt": [1]})
        expected = {
            "text/plain": (415, "content-type must be application/json, got text/plain"),
            "no content-type": (415, "content-type must be application/json, got none"),
            "declared too large": (413, f"the request body is {limit + 1} bytes; this server reads at most {limit} "
                                        f"bytes (32 per position for the model's {TINY_MODEL.max_positions} positions"),
            "read too large": (413, f"the request body is more than {limit} bytes"),
            "unknown route": (404, "Not Found: GET /v1/nothing"),
            "wrong method": (405, "Method Not Allowed: GET /v1/completions"),
            "server bug": (500, "internal error: TypeError"),
        }
        for name, (status, message) in expected.items():
            with self.subTest(name):
                self.assertEqual(replies[name].status_code, status)
                error = replies[name].json()["error"]
                self.assertEqual(set(error), {"message", "type", "param", "code"})
                self.assertIn(message, error["message"])
                self.assertIsNone(error["param"])
        self.assertEqual(replies["server bug"].json()["error"]["type"], "server_error")
        self.assertEqual(after.status_code, 200)

    async def test_a_failing_decode_step_fails_its_requests_with_the_error_and_the_server_goes_on(self) -> None:
        async with serve_in_loop(tiny_engine()) as (url, app), httpx.AsyncClient(timeout=HANG_S) as client:
            scheduler: Scheduler = app.state.scheduler
            decode = scheduler.model.decode

            def failing_decode(*args: object) -> object:
                raise RuntimeError("simulated decode failure")

            scheduler.model.decode = failing_decode  # type: ignore[method-assign]
            body = {"prompt": [1, 2, 3], "max_tokens": 10}
            with self.assertLogs("llm_models.serving.scheduler", "ERROR") as logs:
                (tokens, lines), plain = await within(asyncio.gather(
                    stream_tokens(client, url, body), client.post(f"{url}/v1/completions", json=body)),
                    "both requests to fail at the decode step")
            self.assertIn("RuntimeError: simulated decode failure", logs.output[0])
            failed = (scheduler.counters.failed_for_error, scheduler.pool.num_used_blocks)
            healthy = await client.get(f"{url}/health")
            scheduler.model.decode = decode  # type: ignore[method-assign]
            after = await client.post(f"{url}/v1/completions", json=body)
            # if the loop itself ends, /health says so and new requests are refused rather than left hanging
            assert scheduler._task is not None
            scheduler._task.cancel()
            async def unhealthy() -> bool:
                nonlocal dead
                dead = await client.get(f"{url}/health")
                return dead.status_code != 200

            dead = None
            await eventually(unhealthy, "/health to report the stopped scheduler loop")
            refused = await client.post(f"{url}/v1/completions", json=body)
        message = "internal error in the decode step: RuntimeError: simulated decode failure"
        self.assertEqual(len(tokens), 1)  # the prefill's token; the first decode step failed
        self.assertEqual(lines[-1], "[DONE]")
        self.assertEqual(json.loads(lines[-2])["error"]["message"], message)
        self.assertEqual((plain.status_code, plain.json()["error"]["message"]), (500, message))
        self.assertEqual(plain.json()["error"]["code"], "internal_error")
        self.assertEqual(failed, (2, 0))  # both failed, every block back in the pool
        self.assertEqual((healthy.status_code, healthy.json()), (200, {"status": "ok"}))
        self.assertEqual(len(after.json()["choices"][0]["token_ids"]), 10)
        self.assertEqual(dead.status_code, 503)
        self.assertEqual(dead.json(), {"status": "unavailable", "reason": "the scheduler loop has stopped"})
        self.assertEqual((refused.status_code, refused.json()["error"]["code"]), (503, "scheduler_stopped"))

    async def test_never_fitting_request_gets_400_with_numbers_and_a_full_queue_503(self) -> None:
        config = tiny_engine(num_blocks=16, policy=KVBudget(4 * tiny_engine().block_bytes), max_waiting=1)
        async with serve_in_loop(config) as (url, app), httpx.AsyncClient(timeout=HANG_S) as client:
            huge = await client.post(f"{url}/v1/completions", json={"prompt": [1] * 20, "max_tokens": 10})
            self.assertEqual(huge.status_code, 400)
            self.assertIn("8 blocks of 4", huge.json()["error"]["message"])
            self.assertIn("KV budget is 4 blocks", huge.json()["error"]["message"])
            long = await client.post(f"{url}/v1/completions", json={"prompt": [1] * 8, "max_tokens": 20})
            # the field to change is named: the prompt when it cannot fit even to generate one token, else max_tokens
            self.assertEqual([(r.json()["error"]["code"], r.json()["error"]["param"]) for r in (huge, long)],
                             [("kv_budget_exceeded", "prompt"), ("kv_budget_exceeded", "max_tokens")])
            # a paused scheduler admits nobody: the first request waits, the second finds the queue full
            scheduler: Scheduler = app.state.scheduler
            await scheduler.stop()
            body = {"prompt": [1] * 4, "max_tokens": 10}
            first = asyncio.create_task(client.post(f"{url}/v1/completions", json=body))
            await eventually(lambda: scheduler.waiting, "the first request to wait in the queue")
            second = await client.post(f"{url}/v1/completions", json=body)
            self.assertEqual(second.status_code, 503)
            self.assertIn("waiting queue is full (1 of 1)", second.json()["error"]["message"])
            self.assertEqual(second.headers["retry-after"], "1")
            scheduler.start()
            self.assertEqual((await within(first, "the queued request to be served")).status_code, 200)

    async def test_cancelling_many_streams_at_random_moments_leaves_no_block_and_no_task(self) -> None:
        rng = random.Random(7)
        plans = []  # drawn before any client runs: what each client does never depends on the order they wake in
        for _ in range(40):
            delay, max_tokens = rng.uniform(0, 0.3), rng.randint(5, 40)
            leave = rng.choice([None, 0, 1, rng.randint(1, max_tokens)])
            prompt = [rng.randrange(TINY_MODEL.vocab_size) for _ in range(rng.randint(1, 30))]
            plans.append((delay, {"prompt": prompt, "max_tokens": max_tokens}, leave, rng.uniform(0, 0.05)))
        async with serve_in_loop(tiny_engine(num_blocks=48)) as (url, app):
            scheduler: Scheduler = app.state.scheduler
            before = asyncio.all_tasks()  # this test, the server, its lifespan and the scheduler loop
            async with httpx.AsyncClient(timeout=HANG_S) as client:
                async def one(delay: float, body: dict[str, Any], leave: int | None, patience: float) -> int:
                    await asyncio.sleep(delay)
                    if leave == 0:  # leave before the first token, after a random delay
                        try:
                            await asyncio.wait_for(stream_tokens(client, url, body), patience)
                        except TimeoutError:
                            pass
                        return -1
                    tokens, _ = await stream_tokens(client, url, body, leave)
                    return len(tokens)

                received = await within(asyncio.gather(*(one(*plan) for plan in plans)), "the 40 clients to finish")
            await eventually(lambda: not scheduler.running and not scheduler.waiting,  # the last cancellations retire
                             "the scheduler to be idle")
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
            await eventually(lambda: asyncio.all_tasks() == before, "the closed connections' tasks to end")
        # the clients that left partway got exactly the tokens they waited for, and there were several of them
        partway = [(count, plan[2]) for count, plan in zip(received, plans)
                   if plan[2] is not None and 0 < plan[2] < plan[1]["max_tokens"]]
        self.assertGreater(len(partway), 5)
        self.assertEqual([count for count, _ in partway], [leave for _, leave in partway])

    async def test_a_plain_request_whose_client_gives_up_is_cancelled(self) -> None:
        async with serve_in_loop(tiny_engine(num_blocks=48)) as (url, app):
            scheduler: Scheduler = app.state.scheduler
            # Its first decode step is held at the gate until the server has seen the client go: the request
            # cannot finish first, whatever the host's speed.
            with StepGate(scheduler.model) as gate:
                async with httpx.AsyncClient(timeout=HANG_S) as client:
                    post = asyncio.create_task(client.post(f"{url}/v1/completions",
                                                           json={"prompt": [1] * 8, "max_tokens": 80}))
                    await eventually(lambda: scheduler.running and gate.holding,  # prefilled, first decode step held
                                     "the request to be prefilled with its first decode step held")
                    request = scheduler.running[0]
                    post.cancel()
                    await asyncio.gather(post, return_exceptions=True)
                await eventually(lambda: request.client_gone,  # the client and its connection are closed now
                                 "the server to see the client go")
                gate.open()
                await eventually(lambda: scheduler.counters.cancelled, "the request to be cancelled")
            counters = scheduler.counters
            self.assertEqual((counters.cancelled, counters.completed), (1, 0))
            self.assertEqual(len(request.output), 1)  # the prefill's token; the held step's row was dropped
            self.assertEqual((counters.decode_rows_after_disconnect, counters.rows_dropped), (1, 1))
            self.assertEqual(scheduler.pool.num_used_blocks, 0)

    async def test_health_and_metrics_describe_the_pool_and_queues(self) -> None:
        async with serve_in_loop(tiny_engine(num_blocks=20)) as (url, _), httpx.AsyncClient(timeout=HANG_S) as c:
            self.assertEqual((await c.get(f"{url}/health")).json(), {"status": "ok"})
            metrics = (await c.get(f"{url}/metrics")).json()
        self.assertEqual((metrics["num_blocks"], metrics["num_free_blocks"], metrics["num_used_blocks"]), (20, 20, 0))
        self.assertEqual((metrics["num_running"], metrics["num_waiting"]), (0, 0))
        self.assertEqual(metrics["admission"]["policy"], "kv_budget_bytes")


# The real server command, except that its decode steps wait: a step of one request waits until another request is
# queued behind it, and after the first step of two requests the next waits for the signal. When the test signals
# (two running, a decode step done, one waiting), no request can have finished, however fast or slow the host.
HELD_SERVER = """
import sys, threading
from kv_serving import server
from llm_models.serving import model, scheduler
signalled, schedulers, full_steps = threading.Event(), [], []
build, decode, handle_exit = scheduler.Scheduler.__init__, model.ServingModel.decode, server.Server.handle_exit
def remember(self, *args, **kwargs):
    build(self, *args, **kwargs)
    schedulers.append(self)
def held_decode(self, pool, tokens, positions, tables):  # on the scheduler's worker thread
    while not signalled.is_set() and (full_steps if len(tokens) > 1 else not schedulers[0].waiting):
        signalled.wait(0.005)
    full_steps.extend([1] if len(tokens) > 1 else [])
    return decode(self, pool, tokens, positions, tables)
def signalled_exit(self, sig, frame):
    signalled.set()
    handle_exit(self, sig, frame)
scheduler.Scheduler.__init__, model.ServingModel.decode, server.Server.handle_exit = remember, held_decode, signalled_exit
server.GRACE_S = 300  # a bound for a hang: the test asserts no reply was cut off by it, however loaded the host
sys.exit(server.main(sys.argv[1:]))
"""


class PageSettling(QuietLoopTestCase):
    async def test_only_an_app_built_for_the_server_command_settles_the_process_pages_at_startup(self) -> None:
        calls: list[int] = []
        original = server.huge_pages.settle
        server.huge_pages.settle = lambda: calls.append(1)  # the real one walks this whole process's memory
        try:
            for settle_pages in (False, True):
                app = server.create_app(tiny_engine(), settle_pages=settle_pages)
                async with app.router.lifespan_context(app):
                    pass
            default = server.create_app(tiny_engine())
            async with default.router.lifespan_context(default):
                pass
        finally:
            server.huge_pages.settle = original
        self.assertEqual(len(calls), 1)

    async def test_the_server_command_settles_unless_told_not_to(self) -> None:
        asked: list[bool] = []
        create_app = server.create_app

        def app_of(*args: object, settle_pages: bool = False) -> object:
            asked.append(settle_pages)
            return create_app(tiny_engine())

        with unittest.mock.patch.object(server, "create_app", app_of), \
                unittest.mock.patch.object(server, "Server") as served:
            for argv in ([], ["--no-settle-pages"]):
                self.assertEqual(server.main(["--port", "0", "--num-blocks", "8", *argv]), 0)
        self.assertEqual(asked, [True, False])
        self.assertEqual(served.return_value.run.call_count, 2)


class ShutdownTest(QuietLoopTestCase):
    async def stop_while_serving(self, sig: signal.Signals) -> dict[str, Any]:
        """Start the server, run two streams and queue a plain request, signal it; what each client saw."""
        with tempfile.TemporaryFile(mode="w+") as log:
            # no bound on time to first token: the plain request, behind two streams' 300 tokens, could pass the
            # default target and be refused instead of waiting
            process = subprocess.Popen([sys.executable, "-c", HELD_SERVER, "--port", "0", "--metrics", "--max-running", "2",
                                        "--ttft-target-s", "0"], stdout=log, stderr=subprocess.STDOUT)
            try:
                url = await asyncio.to_thread(serving_url, process, log, HANG_S)  # importing torch: most of a start
                async with httpx.AsyncClient(timeout=HANG_S) as client:
                    body = {"prompt": [1] * 10, "max_tokens": 300}
                    streams = [asyncio.create_task(stream_tokens(client, url, body)) for _ in range(2)]
                    plain = asyncio.create_task(client.post(f"{url}/v1/completions", json=body))

                    async def two_running_one_waiting() -> bool:
                        metrics = (await client.get(f"{url}/metrics")).json()
                        return (metrics["num_running"], metrics["num_waiting"], metrics["decode_steps"] > 0) == (2, 1, True)

                    await eventually(two_running_one_waiting, "two requests running (a token out) and one waiting")
                    process.send_signal(sig)
                    outcomes = await within(asyncio.gather(*streams, plain), "every client's answer after the signal")
                code = await within(asyncio.to_thread(process.wait), "the server to exit after the signal")
                return {"streams": [lines for _, lines in outcomes[:2]], "plain": outcomes[2], "code": code,
                        "tokens": [len(tokens) for tokens, _ in outcomes[:2]], "log": log_text(log)}
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()

    async def test_sigint_and_sigterm_end_every_stream_with_an_error_event_and_exit_cleanly(self) -> None:
        results = await asyncio.gather(self.stop_while_serving(signal.SIGINT), self.stop_while_serving(signal.SIGTERM))
        for sig, result in zip(("SIGINT", "SIGTERM"), results):
            with self.subTest(sig):
                for lines in result["streams"]:
                    self.assertEqual(lines[-1], "[DONE]")
                    self.assertEqual(json.loads(lines[-2])["error"]["message"], "the server is shutting down")
                self.assertTrue(all(count < 300 for count in result["tokens"]), result["tokens"])  # cut short
                self.assertEqual(result["plain"].status_code, 503)
                self.assertEqual(result["plain"].json()["error"],
                                 {"message": "the server is shutting down", "type": "server_error", "param": None,
                                  "code": "server_shutting_down"})
                self.assertEqual(result["code"], 0)
                self.assertNotIn("Traceback", result["log"])
                self.assertNotIn("graceful shutdown exceeded", result["log"])  # nobody was left to cancel
                self.assertIn("Application shutdown complete", result["log"])


# The interrupt lands exactly while the named module is being imported, whatever the machine's speed.
INTERRUPT_DURING_IMPORT = """
import os, runpy, signal, sys
module, signum = sys.argv[1], getattr(signal, sys.argv[2])
class InterruptDuringImport:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            os.kill(os.getpid(), signum)
        return None
sys.meta_path.insert(0, InterruptDuringImport())
sys.argv = ["kv_serving.server", "--port", "0"]
runpy.run_module("kv_serving.server", run_name="__main__", alter_sys=True)
"""


class StartupTest(unittest.TestCase):
    def test_ctrl_c_or_sigterm_while_the_server_starts_is_one_line_and_130_or_143(self) -> None:
        for module, name in (("torch", "SIGINT"), ("uvicorn", "SIGTERM"), ("fastapi", "SIGINT")):
            with self.subTest(module=module, signal=name):
                finished = run([sys.executable, "-c", INTERRUPT_DURING_IMPORT, module, name],
                               f"the server to stop at {name} while importing {module}", capture_output=True, text=True)
                self.assertEqual((finished.returncode, finished.stderr),
                                 (128 + getattr(signal, name),
                                  f"kv_serving.server: interrupted ({name}) while not serving; no request was open\n"))

    def test_a_pool_larger_than_the_memory_available_is_an_argument_error_with_both_sizes(self) -> None:
        original = server.available_memory
        server.available_memory = lambda: 2**30  # this host's memory must not decide the test
        try:
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr), self.assertRaises(SystemExit) as stop:
                server.parse_args(["--num-blocks", "100000"])
            self.assertEqual(server.parse_args(["--num-blocks", "256"]).num_blocks, 256)
        finally:
            server.available_memory = original
        self.assertEqual(stop.exception.code, 2)
        self.assertIn("error: --num-blocks 100000 of --block-size 16 needs 6553600000 bytes (6.1 GiB) of KV memory; "
                      "this machine has 1073741824 bytes (1.0 GiB) available", stderr.getvalue())


    def test_int8_weights_are_the_trained_models_in_float32_only(self) -> None:
        for argv in (["--weights", "int8"], ["--model", "smollm2", "--dtype", "bfloat16", "--weights", "int8"]):
            with self.subTest(argv=argv):
                stderr = io.StringIO()
                with contextlib.redirect_stderr(stderr), self.assertRaises(SystemExit) as stop:
                    server.parse_args(argv)
                self.assertEqual(stop.exception.code, 2)
                self.assertIn("--weights int8 is the trained model's in float32: use --model smollm2 --dtype float32",
                              stderr.getvalue())
        self.assertEqual(server.parse_args(["--model", "smollm2", "--weights", "int8"]).weights, "int8")
        self.assertEqual(server.parse_args([]).weights, "float32")


if __name__ == "__main__":
    unittest.main()
