"""The lab's server on 127.0.0.1 driven by the official openai client, for either model.

The text model is a tiny random Llama behind SmolLM2's real tokenizer and chat template (what the client sees is
the HTTP layer, which the trained weights do not change); one test asks the trained model itself, with two
clients at once. The random model (token ids in and out) runs the tests' tiny engine.
"""

from __future__ import annotations

import threading
import unittest
from typing import Any, ClassVar

import httpx
import openai

from kv_serving.server import create_app
from kv_serving.testing import KERNEL_NS, StepGate, serve_in_thread, tiny_chat, tiny_chat_engine, tiny_engine
from labkit.waiting import HANG_S, until
from llm_models.llama.generate import ChatModel, smollm2
from llm_models.serving.admission import KVBudget
from llm_models.serving.engine import EngineConfig
from llm_models.serving.pool import pool_block_bytes
from llm_models.serving.scheduler import Scheduler

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
        cls.serving = serve_in_thread(create_app(tiny_chat_engine(cls.chat)))
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
        self.assertEqual(len(pieces), len(expected.ids), "one chunk per token")
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
    def test_two_official_clients_are_answered_in_one_batch_each_with_the_text_it_gets_alone(self) -> None:
        chat = smollm2()
        config = EngineConfig.for_chat(chat, 16, 64, policy_for(chat, 64), kernel_ns=KERNEL_NS)
        app = create_app(config, metrics=True)
        questions = [[{"role": "user", "content": "What is the capital of France?"}],
                     [{"role": "user", "content": "Name a primary colour."}]]
        with serve_in_thread(app) as url, client_for(url) as first, client_for(url) as second:
            scheduler: Scheduler = app.state.scheduler
            alone = [first.chat.completions.create(model="smollm2", messages=m, max_tokens=16).choices[0].message
                     .content for m in questions]
            with StepGate(scheduler.model) as gate:
                answers: list[str] = ["", ""]

                def ask(index: int, client: openai.OpenAI) -> None:
                    for chunk in client.chat.completions.create(model="smollm2", messages=questions[index],
                                                                max_tokens=16, stream=True):
                        answers[index] += chunk.choices[0].delta.content or ""

                threads = [threading.Thread(target=ask, args=(i, c)) for i, c in enumerate((first, second))]
                threads[0].start()
                until(lambda: gate.holding, "the first chat's decode step at the gate")
                threads[1].start()
                until(lambda: scheduler.waiting, "the second chat queued behind that step")
                gate.step()
                until(lambda: gate.holding and len(scheduler.running) == 2, "both chats in one decode step")
                metrics = httpx.get(f"{url}/metrics", timeout=CLIENT_TIMEOUT_S).json()
                gate.open()
                for thread in threads:
                    thread.join(CLIENT_TIMEOUT_S)
        self.assertEqual((metrics["num_running"], metrics["peak_running"]), (2, 2))
        self.assertEqual(answers, alone)
        self.assertIn("Paris", answers[0])


def policy_for(chat: ChatModel, blocks: int) -> KVBudget:
    return KVBudget(blocks * pool_block_bytes(chat.model.config, chat.model.config.layers, 16))


if __name__ == "__main__":
    unittest.main()
