"""The trained-model server: OpenAI-shaped chat and completion requests answered in text, bad fields named.

Most tests run a tiny random decoder with SmolLM2's real tokenizer (the vocabulary size of the trained model,
2 layers of width 64): the HTTP layer is what they check. One test runs the server's own command, the trained model
behind it, on a port it picks itself.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

import httpx
from fastapi.testclient import TestClient

from kv_serving.launch import serving_url
from kv_serving.trained import create_chat_app
from kv_serving.trained.testing import tiny_chat
from labkit.waiting import HANG_S, communicate, read_until_closed

CHAT = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 24}


def events(lines: list[str]) -> list[dict | str]:
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    return [item if item == "[DONE]" else json.loads(item) for item in data]


class TinyServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.chat = tiny_chat()
        cls.client = TestClient(create_chat_app(lambda: cls.chat))
        cls.client.__enter__()  # runs the lifespan: the model is loaded once

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.__exit__(None, None, None)

    def post(self, path: str, body: dict) -> dict:
        response = self.client.post(path, json=body)
        self.assertEqual(response.status_code, 200, response.text)
        return response.json()

    def test_models_lists_what_is_served(self) -> None:
        listed = self.client.get("/v1/models").json()
        self.assertEqual([m["id"] for m in listed["data"]], ["tiny"])

    def test_a_chat_completion_is_the_greedy_text_of_the_templated_prompt(self) -> None:
        answer = self.post("/v1/chat/completions", CHAT)
        expected = self.chat.generate(self.chat.chat_ids(CHAT["messages"]), 24)
        self.assertEqual(answer["object"], "chat.completion")
        self.assertEqual(answer["choices"][0]["message"], {"role": "assistant", "content": expected.text})
        self.assertEqual(answer["choices"][0]["finish_reason"], expected.finish_reason)
        self.assertEqual(answer["usage"]["prompt_tokens"], len(expected.prompt_ids))
        self.assertEqual(answer["usage"]["completion_tokens"], len(expected.ids))

    def test_a_streamed_chat_sends_the_role_then_pieces_that_join_to_the_same_text(self) -> None:
        plain = self.post("/v1/chat/completions", CHAT)["choices"][0]["message"]["content"]
        with self.client.stream("POST", "/v1/chat/completions",
                                json=CHAT | {"stream": True, "stream_options": {"include_usage": True}}) as response:
            self.assertEqual(response.headers["content-type"].split(";")[0], "text/event-stream")
            received = events(list(response.iter_lines()))
        self.assertEqual(received[-1], "[DONE]")
        chunks = [c for c in received[:-1] if c["choices"]]
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual("".join(c["choices"][0]["delta"].get("content", "") for c in chunks), plain)
        self.assertIsNotNone(chunks[-1]["choices"][0]["finish_reason"])
        self.assertEqual(received[-2]["usage"]["completion_tokens"], len(chunks) - 2)  # minus role and final chunks

    def test_a_completion_prompt_may_be_a_string_or_its_token_ids(self) -> None:
        text = "The capital of France is"
        by_text = self.post("/v1/completions", {"prompt": text, "max_tokens": 6})
        by_ids = self.post("/v1/completions", {"prompt": self.chat.encode(text), "max_tokens": 6})
        self.assertEqual(by_text["choices"][0]["text"], by_ids["choices"][0]["text"])
        self.assertEqual(len(by_ids["choices"][0]["token_ids"]), 6)
        self.assertEqual(by_text["choices"][0]["text"], self.chat.decode(by_ids["choices"][0]["token_ids"]))

    def test_bad_fields_get_an_openai_error_naming_the_field(self) -> None:
        user = {"role": "user", "content": "hi"}
        cases = [
            ("/v1/chat/completions", CHAT | {"model": "gpt-9"}, 404, "model"),
            ("/v1/chat/completions", {"messages": []}, 400, "messages"),
            ("/v1/chat/completions", {"messages": [user, {"role": "wizard", "content": "x"}]}, 400,
             "messages[1].role"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": ["a"]}]}, 400, "messages[0].content"),
            ("/v1/chat/completions", CHAT | {"max_tokens": 0}, 400, "max_tokens"),
            ("/v1/chat/completions", CHAT | {"max_tokens": 10_000}, 400, "max_tokens"),
            ("/v1/completions", {"prompt": [1, 49_152]}, 400, "prompt[1]"),
            ("/v1/completions", {"prompt": ""}, 400, "prompt"),
        ]
        for path, body, status, param in cases:
            with self.subTest(param=param, body=body):
                response = self.client.post(path, json=body)
                self.assertEqual(response.status_code, status, response.text)
                self.assertEqual(response.json()["error"]["param"], param)
        response = self.client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        self.assertEqual((response.status_code, response.json()["error"]["code"]), (400, "invalid_json"))


class TrainedServer(unittest.TestCase):
    def test_the_trained_server_command_answers_a_chat_in_words_and_closes_a_connection_that_sends_nothing(
            self) -> None:
        with tempfile.TemporaryFile(mode="w+") as log:
            process = subprocess.Popen([sys.executable, "-m", "kv_serving.trained", "--port", "0",
                                        "--request-timeout-s", "0.5"], stdout=log, stderr=subprocess.STDOUT)
            try:
                url = serving_url(process, log, HANG_S)  # loading the model is most of a start
                with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as silent:
                    silent_reply = read_until_closed(silent, "the server to close a connection that sent nothing")
                answer = httpx.post(f"{url}/v1/chat/completions", json=CHAT | {"model": "smollm2"},
                                    timeout=HANG_S).json()
            finally:
                process.send_signal(signal.SIGINT)
                communicate(process, "the trained server to stop on Ctrl-C")
        self.assertIn("Paris", answer["choices"][0]["message"]["content"])
        self.assertEqual(answer["choices"][0]["finish_reason"], "stop")
        self.assertTrue(silent_reply.startswith(b"HTTP/1.1 408 "), silent_reply[:80])
        self.assertIn(b"no request arrived within 0.5 s of the connection opening", silent_reply)


if __name__ == "__main__":
    unittest.main()
