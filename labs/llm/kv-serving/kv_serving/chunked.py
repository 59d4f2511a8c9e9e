"""Chunked prefill on the trained model: running streams, and a long prompt that arrives among them.

Each round, at each of two servers (one prefills every prompt whole, the other at most CHUNK tokens a pass, in the
same forward pass as the running streams' decode rows, ``--prefill-chunk``): STREAMS text continuations start
together and decode; LONG_AFTER_S after the last of them has its first token, a completion whose prompt is the first
LONG_TOKENS tokens of the repository's long text arrives. The client times every gap between a stream's tokens, and
the long prompt's time to first token. The two servers alternate which
goes first, round by round (labkit.bench.run_order), so the page's figures are paired ratios, chunked over whole.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from labkit import bench
from llm_models.llama.generate import smollm2
from llm_models.texts import PYTHON_REFERENCE

from .loadgen import run_load
from .workload import WorkItem, real_prompts

MODEL = "smollm2"
# Sized to the benchmark's five minutes on two cores: a long prompt whose whole prefill (about 0.98 s on one thread of
# the 2-core Xeon) is many of the streams' steps (about 65 ms for four rows), cut into six chunks of four blocks, each
# in one pass with the streams' rows (1.4 to 1.6 s in all there). Cut finer, the same prompt's prefill costs more in
# all, since each pass reads every weight again.
CHUNK, QUICK_CHUNK = 64, 16  # tokens: four blocks of 16, one block of 16
LONG_TOKENS, QUICK_LONG_TOKENS = 384, 32
STREAMS, STREAM_TOKENS, QUICK_STREAM_TOKENS = 4, 32, 8
# NOTE: counted from the last stream's first token, not from the start: a fixed 0.8 s from the start came before the
# fourth stream's first token on the chunked server, whose budget prefills the streams' own prompts over several
# passes too (first tokens at 0.27, 0.52, 0.77 and 1.01 s), so its gaps could not cover the long prompt's prefill and
# the page drew no comparison. A few decode steps later, every stream is decoding on a machine of any speed.
LONG_AFTER_S = 0.3
LONG_MAX_TOKENS = 2
ROUNDS, QUICK_ROUNDS = 3, 2


def sizes(quick: bool) -> dict[str, int]:
    return {"chunk": QUICK_CHUNK if quick else CHUNK, "long_tokens": QUICK_LONG_TOKENS if quick else LONG_TOKENS,
            "streams": STREAMS, "stream_tokens": QUICK_STREAM_TOKENS if quick else STREAM_TOKENS,
            "long_max_tokens": LONG_MAX_TOKENS}


def server_arguments(common: list[str], quick: bool) -> dict[str, list[str]]:
    """The two servers' arguments, by the name the record gives each: ``common`` (the trained servers' own), and
    the same with --prefill-chunk."""
    return {"whole": common, "chunked": [*common, "--prefill-chunk", str(sizes(quick)["chunk"])]}


def long_prompt(tokens: int) -> str:
    """The first ``tokens`` tokens of the repository's long text, as text (the server reports what it became)."""
    chat = smollm2()
    return chat.decode(chat.encode(PYTHON_REFERENCE.read())[:tokens])


def workload(quick: bool) -> list[WorkItem]:
    """STREAMS continuations from the prompt file at once, then the long completion LONG_AFTER_S after the last of
    them has its first token."""
    size, (prompts, _) = sizes(quick), real_prompts()
    # NOTE: continuations, not chats: a chat's answer may end at a stop token before the long prompt is prefilled
    # (the file's first ends after 7 tokens), and a stream that has ended shows no gap
    texts = [p for p in prompts if p["kind"] == "continuation"][:STREAMS]
    streams = [WorkItem(index, 0.0, [], size["stream_tokens"], path="/v1/completions",
                        text_request={"prompt": p["prompt"]}) for index, p in enumerate(texts)]
    long = WorkItem(len(streams), LONG_AFTER_S, [], size["long_max_tokens"], path="/v1/completions",
                    text_request={"prompt": long_prompt(size["long_tokens"])},
                    after_first_tokens=tuple(stream.index for stream in streams))
    return [*streams, long]


def run(quick: bool, urls: dict[str, str]) -> dict[str, Any]:
    """ROUNDS paired rounds at the two servers (``urls``: server_arguments' names to base URLs); every request's
    client-side times kept (its sending, time to first token and each gap between tokens)."""
    size, items, count = sizes(quick), workload(quick), QUICK_ROUNDS if quick else ROUNDS
    rounds = []
    for number in range(count):
        order = bench.run_order(list(urls), number)
        bench.progress(f"trained model, chunked prefill: round {number + 1} of {count}, {STREAMS} streams and "
                       f"a {size['long_tokens']}-token prompt at {' then '.join(order)}")
        runs = {}
        for name in order:
            result = asyncio.run(run_load(urls[name], items, model=MODEL))
            runs[name] = [{key: value for key, value in asdict(r).items()
                           if key in ("outcome", "prompt_tokens", "tokens", "sent_s", "ttft_s", "itl_s", "error")}
                          for r in result.requests]
        rounds.append({"order": order, "runs": runs})
    return {**size, "long_after_s": LONG_AFTER_S, "text": PYTHON_REFERENCE.name, "rounds": rounds}
