"""The prefix cache behind the HTTP server: a second completion that starts with the first one's prompt finds its
full blocks, gets the tokens it gets without the cache, its own reply says how many (and no other client's does),
/metrics counts the lookup only where the operator serves it; the server's command line turns the cache on as the
engine config describes it."""

from __future__ import annotations

import httpx

from kv_serving.server import engine_config, parse_args
from kv_serving.testing import TINY_BLOCK, QuietLoopTestCase, serve_in_loop, tiny_engine
from labkit.waiting import HANG_S

PROMPT = [(3 * i + 1) % 60 for i in range(3 * TINY_BLOCK + 2)]  # three full blocks and two positions


async def complete(client: httpx.AsyncClient, url: str, prompt: list[int]) -> list[int]:
    reply = await client.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 4})
    reply.raise_for_status()
    return reply.json()["choices"][0]["token_ids"]


class PrefixOverHttp(QuietLoopTestCase):
    async def test_a_second_request_finds_the_first_ones_blocks_and_metrics_count_it(self) -> None:
        answers, metrics = {}, {}
        for index in (None, "hash", "radix"):
            async with serve_in_loop(tiny_engine(num_blocks=40, prefix_index=index)) as (url, _), \
                    httpx.AsyncClient(timeout=HANG_S) as client:
                answers[index] = [await complete(client, url, PROMPT), await complete(client, url, PROMPT + [7, 8])]
                metrics[index] = (await client.get(f"{url}/metrics")).json()
        self.assertEqual(answers["hash"], answers[None])
        self.assertEqual(answers["radix"], answers[None])
        self.assertIsNone(metrics[None]["prefix_caching"])
        for index in ("hash", "radix"):
            found = metrics[index]["prefix_caching"]
            self.assertEqual((found["index"], found["requests"], found["query_tokens"], found["hit_tokens"]),
                             (index, 2, 2 * len(PROMPT) + 2, 3 * TINY_BLOCK))
            self.assertEqual(metrics[index]["prefill_tokens"], metrics[None]["prefill_tokens"] - 3 * TINY_BLOCK)

    async def test_a_hit_is_told_only_to_its_own_request_and_metrics_are_off_by_default(self) -> None:
        """The attack: read the hit counter around one probe to learn whether another client's prompt is cached.
        By default /metrics is not served at all; each reply's usage names its own hit (OpenAI's cached_tokens)."""
        async with serve_in_loop(tiny_engine(num_blocks=40, prefix_index="hash"), metrics=False) as (url, _), \
                httpx.AsyncClient(timeout=HANG_S) as client:
            closed = await client.get(f"{url}/metrics")
            usages = []
            for prompt in (PROMPT, PROMPT + [7, 8], [9] * len(PROMPT)):
                reply = await client.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 2})
                usages.append(reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(closed.status_code, 404)
        self.assertIn("start it with --metrics", closed.json()["error"]["message"])
        self.assertEqual(usages, [0, 3 * TINY_BLOCK, 0])  # the first prompt's three full blocks, found by the second

    def test_the_command_line_turns_the_cache_on(self) -> None:
        config = engine_config(parse_args(["--prefix-caching", "radix", "--schedule", "longest-prefix", "--port", "0"]))
        self.assertEqual((config.prefix_index, config.order), ("radix", "longest-prefix"))
        self.assertEqual(config.as_record()["prefix_index"], "radix")
        self.assertIsNone(engine_config(parse_args(["--port", "0"])).prefix_index)


class TenantsOverHttp(QuietLoopTestCase):
    """cache_salt (vLLM's field): a prompt cached under one salt is found only by requests with the same salt, so a
    tenant can neither reuse another's blocks nor learn from its own reply's cached_tokens that they exist."""

    async def test_a_salted_prefix_is_found_only_under_its_own_salt_and_the_answers_stay_the_same(self) -> None:
        for index in ("hash", "radix"):
            async with serve_in_loop(tiny_engine(num_blocks=40, prefix_index=index)) as (url, _), \
                    httpx.AsyncClient(timeout=HANG_S) as client:
                found, answers = [], []
                for salt in ("tenant-a", "tenant-b", None, "tenant-a"):
                    body = {"prompt": PROMPT, "max_tokens": 4} | ({} if salt is None else {"cache_salt": salt})
                    reply = (await client.post(f"{url}/v1/completions", json=body)).json()
                    found.append(reply["usage"]["prompt_tokens_details"]["cached_tokens"])
                    answers.append(reply["choices"][0]["token_ids"])
            with self.subTest(index=index):
                # another tenant's salt and no salt find nothing; the same tenant's second request finds its blocks
                self.assertEqual(found, [0, 0, 0, 3 * TINY_BLOCK])
                self.assertEqual(answers, [answers[0]] * 4)

    async def test_a_cache_salt_that_is_not_a_non_empty_string_is_refused_naming_the_field(self) -> None:
        async with serve_in_loop(tiny_engine(num_blocks=40, prefix_index="hash")) as (url, _), \
                httpx.AsyncClient(timeout=HANG_S) as client:
            for salt in ("", 7, None, ["a"], "x" * 1025):
                with self.subTest(salt=str(salt)[:12]):
                    reply = await client.post(f"{url}/v1/completions",
                                              json={"prompt": PROMPT, "max_tokens": 2, "cache_salt": salt})
                    self.assertEqual(reply.status_code, 400)
                    error = reply.json()["error"]
                    self.assertEqual(error["param"], "cache_salt")
                    self.assertIn("cache_salt must be a non-empty string of at most 1024 characters", error["message"])
