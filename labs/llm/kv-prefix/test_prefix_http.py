"""The prefix cache behind the HTTP server: a second completion that starts with the first one's prompt finds its
full blocks, gets the tokens it gets without the cache, and /metrics counts the lookup; the server's command line
turns the cache on as the engine config describes it."""

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

    def test_the_command_line_turns_the_cache_on(self) -> None:
        config = engine_config(parse_args(["--prefix-caching", "radix", "--schedule", "longest-prefix", "--port", "0"]))
        self.assertEqual((config.prefix_index, config.order), ("radix", "longest-prefix"))
        self.assertEqual(config.as_record()["prefix_index"], "radix")
        self.assertIsNone(engine_config(parse_args(["--port", "0"])).prefix_index)
