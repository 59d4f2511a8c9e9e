"""The servers on 127.0.0.1 driven by the official openai client, and streams on the trained-model server that
keep going past bad requests and a client that leaves (kv_serving.server's own are in test_serving_http.py).

The trained-model server runs a tiny random Llama behind SmolLM2's real tokenizer and chat template (what the
client sees is the HTTP layer, which the trained weights do not change); one test asks the trained model itself.
The load experiments' server (kv_serving.server, token ids in and out) runs the tests' tiny engine.
"""

from __future__ import annotations

import asyncio
import json
import unittest
from typing import Any, ClassVar

import httpx
import openai

from kv_serving.server import create_app
from kv_serving.testing import serve_in_thread, tiny_engine
from kv_serving.trained import create_chat_app
from kv_serving.trained.testing import TokenGate, tiny_chat
from labkit.waiting import HANG_S, eventually, within
from llm_models.llama.generate import ChatModel, smollm2

CLIENT_TIMEOUT_S = HANG_S  # a reply may be slow on a loaded machine: this bound is for a hang, never for speed
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def client_for(url: str) -> openai.OpenAI:
    """The official client pointed at a server under test: no retries, so a refusal is seen once, as sent."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=CLIENT_TIMEOUT_S)


class OpenAIClientOnTheTrainedServer(unittest.TestCase):
    chat: ClassVar[ChatModel]
    client: ClassVar[openai.OpenAI]

    @classmethod
    def setUpClass(cls) -> None:
        cls.chat = tiny_chat()
        cls.serving = serve_in_thread(create_chat_app(lambda: cls.chat))
        cls.client = client_for(cls.serving.__enter__())

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()
        cls.serving.__exit__(None, None, None)

    def test_models_list_names_the_served_model(self) -> None:
        self.assertEqual([model.id for model in self.client.models.list()], ["tiny"])

    def test_a_streamed_chat_completion_arrives_in_chunks_that_join_to_the_greedy_text(self) -> None:
        expected = self.chat.generate(self.chat.chat_ids(QUESTION), 12)
        chunks = list(self.client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=12,
                                                          stream=True))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        pieces = [c.choices[0].delta.content for c in chunks[1:-1]]
        self.assertEqual(len(pieces), 12, "one chunk per token")
        self.assertEqual("".join(p or "" for p in pieces), expected.text)
        self.assertEqual(chunks[-1].choices[0].finish_reason, expected.finish_reason)
        self.assertEqual({c.id for c in chunks}, {chunks[0].id})

    def test_a_completion_with_a_string_prompt_is_the_greedy_text_of_its_tokens(self) -> None:
        prompt = "The capital of France is"
        expected = self.chat.generate(self.chat.encode(prompt), 6)
        answer = self.client.completions.create(model="tiny", prompt=prompt, max_tokens=6)
        self.assertEqual(answer.choices[0].text, expected.text)
        self.assertEqual(answer.choices[0].finish_reason, expected.finish_reason)
        self.assertEqual((answer.usage.prompt_tokens, answer.usage.completion_tokens), (len(expected.prompt_ids), 6))

    def test_the_client_raises_the_openai_error_naming_the_field(self) -> None:
        cases: list[tuple[dict[str, Any], type[openai.APIStatusError], str]] = [
            ({"model": "gpt-9", "messages": QUESTION}, openai.NotFoundError, "model"),
            ({"model": "tiny", "messages": []}, openai.BadRequestError, "messages"),
            ({"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}]}, openai.BadRequestError,
             "messages[0].role"),
            ({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
             openai.BadRequestError, "messages[0].content"),
        ]
        for arguments, error, param in cases:
            with self.subTest(param=param), self.assertRaises(error) as raised:
                self.client.chat.completions.create(max_tokens=4, **arguments)
            self.assertEqual(raised.exception.param, param)


class OpenAIClientOnTheLoadServer(unittest.TestCase):
    def test_streamed_and_plain_completions_of_token_ids_agree_and_refusals_name_the_field(self) -> None:
        with serve_in_thread(create_app(tiny_engine())) as url, client_for(url) as client:
            listed = [model.id for model in client.models.list()]
            prompt = [3, 1, 4, 1, 5]
            chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=9, stream=True))
            plain = client.completions.create(model="tiny", prompt=prompt, max_tokens=9)
            with self.assertRaises(openai.NotFoundError) as unknown:
                client.completions.create(model="gpt-9", prompt=prompt, max_tokens=2)
            with self.assertRaises(openai.BadRequestError) as text:  # this model has random weights, no tokenizer
                client.completions.create(model="tiny", prompt="Hello", max_tokens=2)
        self.assertEqual(listed, ["tiny"])
        streamed = "".join(c.choices[0].text for c in chunks)
        self.assertEqual(len(chunks), 10, "one chunk per token, then the finish_reason")
        self.assertEqual((streamed, chunks[-1].choices[0].finish_reason), (plain.choices[0].text, "length"))
        self.assertEqual(len(plain.choices[0].text.split()), 9)
        self.assertEqual((unknown.exception.param, text.exception.param), ("model", "prompt"))


class TrainedModelThroughTheClient(unittest.TestCase):
    def test_the_trained_model_streams_a_chat_answer_in_words(self) -> None:
        with serve_in_thread(create_chat_app(smollm2)) as url, client_for(url) as client:
            chunks = list(client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=24,
                                                         stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        self.assertIn("Paris", text)
        self.assertGreater(len(chunks), 3)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")


async def chat_stream(client: httpx.AsyncClient, url: str, messages: list[dict[str, str]], max_tokens: int,
                      started: asyncio.Event, leave_after: int | None = None) -> tuple[list[str], str | None]:
    """The content pieces of one streamed chat completion and its finish_reason; ``started`` is set at the first
    chunk (the role, sent before the request waits its turn); leaves after ``leave_after`` pieces."""
    pieces: list[str] = []
    reason = None
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, "stream": True}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.status_code
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            started.set()
            choice = json.loads(line[6:])["choices"][0]
            if "content" in choice["delta"] and "role" not in choice["delta"]:
                pieces.append(choice["delta"]["content"])
            reason = choice["finish_reason"] or reason
            if leave_after is not None and len(pieces) >= leave_after:
                break
    return pieces, reason


class StreamsKeepGoing(unittest.IsolatedAsyncioTestCase):
    async def test_bad_requests_and_a_client_that_leaves_do_not_change_the_other_streams(self) -> None:
        chat = tiny_chat()
        questions = [[{"role": "user", "content": text}] for text in ("Name a colour.", "Count to three.", "Hi!")]
        alone = [chat.generate(chat.chat_ids(messages), 10) for messages in questions]
        bad = [  # (body, status, the error's param): each answered while another request decodes
            ({"model": "gpt-9", "messages": QUESTION}, 404, "model"),
            ({"messages": []}, 400, "messages"),
            ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role"),
            ({"messages": [{"role": "user", "content": 7}]}, 400, "messages[0].content"),
        ]
        with serve_in_thread(create_chat_app(lambda: chat)) as url, TokenGate(chat) as gate:
            async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client:
                # The leaver goes first and holds the model (one request decodes at a time); its first token
                # waits at the gate, so nothing below can finish before the test says, however fast the host.
                leaver_started = asyncio.Event()
                leaver = asyncio.create_task(chat_stream(client, url, QUESTION, 40, leaver_started, leave_after=1))
                await eventually(lambda: gate.holding, "the leaver's first token to wait at the gate")
                started = [asyncio.Event() for _ in questions]
                streams = [asyncio.create_task(chat_stream(client, url, messages, 10, event))
                           for messages, event in zip(questions, started)]
                await within(asyncio.gather(*(event.wait() for event in started)),  # all three in, waiting their turn
                             "the first event of each of the three streams")
                for body, status, param in bad:
                    reply = await client.post(f"{url}/v1/chat/completions", json=body | {"max_tokens": 4})
                    with self.subTest(param=param):
                        self.assertEqual((reply.status_code, reply.json()["error"]["param"]), (status, param))
                        self.assertEqual(reply.json()["error"]["type"], "invalid_request_error")
                self.assertTrue(gate.holding and not any(stream.done() for stream in streams))
                gate.step()  # the leaver's first token goes out, and its client leaves on it
                left_with, _ = await within(leaver, "the leaver's stream to end at its first token")
                await eventually(lambda: len(gate.produced) >= 2,  # the server saw the leaver go: the next stream runs
                                 "the model to pass from the leaver to the next stream")
                gate.open()
                results = await within(asyncio.gather(*streams), "the three streams to finish")
        self.assertEqual(len(left_with), 1)
        self.assertLessEqual(gate.produced[0], 3, "the leaver's decoding stopped soon after it left, not at 40")
        for (pieces, reason), expected in zip(results, alone):
            self.assertEqual(("".join(pieces), len(pieces), reason), (expected.text, 10, expected.finish_reason))


if __name__ == "__main__":
    unittest.main()
