"""Whether one client can tell, from its own time to first token, that another client sent a prefix.

A shared prefix cache answers a prompt it has seen sooner than one it has not, and the client who asks sees the
difference. A prober who guesses another tenant's prompt (a system prompt, a document they are said to have sent)
sends the guess and a decoy nobody sent, and compares. ``cache_salt`` (vLLM's field, llm_models.serving.prefix
.hashing) starts a tenant's chain of block hashes from a root of its own, so a prober with another salt finds none of
the victim's blocks and both of its probes are prefilled cold.

Per condition, one engine (the hash index, a pool that never evicts during the experiment), then paired rounds: the
victim sends a fresh prefix of the long text; the prober sends that prefix and a decoy of the same length from
elsewhere in the text, each with one token of its own after it, in an order that alternates by round. Both probes
ask for one token; their times run from submission to the first token on the event loop. Every round uses prefixes
no earlier round sent, so nothing the earlier rounds cached can be found.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from labkit import huge_pages
from labkit.bench import run_order
from llm_models.serving.request import Request
from llm_models.serving.scheduler import Scheduler
from llm_models.serving.sizes import blocks_for, kv_positions

from .runs import BLOCK_SIZE, Setting, await_end, engine

# Eight blocks of 16: a guess short enough that prefilling it cold costs a fraction of a second on a 2-core CPU, so
# the gap a prober reads is the small one, not a long prompt's seconds.
PREFIX_TOKENS = 128
ROUNDS = 7  # odd, so the median is one round's ratio; the middle half is read over three rounds
QUICK_ROUNDS = 2
# What each condition's victim and prober send as cache_salt: none at all, or one salt per tenant.
CONDITIONS = {"shared": (None, None), "salted": ("tenant-victim", "tenant-prober")}
PROBES = ("guessed", "decoy")


def slices(text: Sequence[int], rounds: int, length: int = PREFIX_TOKENS) -> list[tuple[list[int], list[int]]]:
    """Per round, the victim's prefix and a decoy: consecutive, distinct slices of ``text``, each ``length``
    tokens and one more (the prober's own token, which the victim never sent)."""
    need = rounds * 2 * (length + 1)
    if len(text) < need:
        raise ValueError(f"the side-channel rounds need {need:,} tokens of text ({rounds} rounds of two "
                         f"{length + 1}-token slices); the text holds {len(text):,}")
    parts = [list(text[start:start + length + 1]) for start in range(0, need, length + 1)]
    return [(parts[2 * index], parts[2 * index + 1]) for index in range(rounds)]


def pool_blocks(rounds: int, length: int = PREFIX_TOKENS) -> int:
    """Room for every request of every round at once (three per round, one token each): nothing is evicted."""
    return 3 * rounds * blocks_for(kv_positions(length + 1, 1), BLOCK_SIZE)


async def first_token(request: Request) -> float:
    """The moment the request's first token arrived (it asks for one, so it then finishes)."""
    first, _ = await await_end(request)
    if first is None:
        raise RuntimeError("a side-channel probe finished without a token")
    return first


async def condition(scheduler: Scheduler, pairs: list[tuple[list[int], list[int]]],
                    salts: tuple[str | None, str | None]) -> list[dict[str, Any]]:
    """One engine's rounds (``scheduler`` started, its pool room for ``pool_blocks``): per round, the probes' times
    to first token and the tokens each found cached."""
    await scheduler.seeded()
    huge_pages.settle()
    victim, prober = salts
    rounds = []
    for index, (secret, decoy) in enumerate(pairs):
        await first_token(scheduler.submit(secret[:-1], 1, cache_salt=victim))  # the victim's, no prober's token
        row: dict[str, Any] = {"order": run_order(PROBES, index)}
        for probe in row["order"]:
            started = time.perf_counter()
            request = scheduler.submit(secret if probe == "guessed" else decoy, 1, cache_salt=prober)
            row[f"{probe}_ttft_s"] = await first_token(request) - started
            row[f"{probe}_cached_tokens"] = request.cached_tokens
        rounds.append(row)
    return rounds


async def on_trained(chat: Any, pairs: list[tuple[list[int], list[int]]], salts: tuple[str | None, str | None],
                     threads: int) -> list[dict[str, Any]]:
    """``condition`` on the trained model behind the serving engine: the hash index, no bound on the queue."""
    scheduler = engine(chat, Setting("hash", "fcfs", "side channel", pool_blocks(len(pairs), len(pairs[0][0]) - 1)),
                       threads).build()
    scheduler.start()
    try:
        return await condition(scheduler, pairs, salts)
    finally:
        await scheduler.stop()


def measure(chat: Any, text: Sequence[int], rounds: int, threads: int) -> dict[str, Any]:
    """Both conditions, the same prefixes in each (a fresh engine per condition, so none finds the other's)."""
    pairs = slices(text, rounds)
    return {"prefix_tokens": PREFIX_TOKENS, "rounds": rounds, "probes": list(PROBES),
            "conditions": {name: {"victim_salt": salts[0], "prober_salt": salts[1],
                                  "rounds": asyncio.run(on_trained(chat, pairs, salts, threads))}
                           for name, salts in CONDITIONS.items()}}
