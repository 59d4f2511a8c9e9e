"""One workload through the serving scheduler, in process: every request's time to first token, what it found
cached, what it generated, and the scheduler's counters.

The engine is the serving lab's (``llm_models.serving.engine.EngineConfig.for_chat``): the trained model, a pool of
``num_blocks`` blocks admitted by KV bytes, no bound on the waiting queue by time (a request waits as long as it
must; the wait is what TTFT measures). Sessions start ``gap_s`` apart; a session's later turn is sent as soon as its
previous reply has ended (a chat client with no think time). Requests stop at the model's end of turn or at
``max_tokens``. Times come from ``time.perf_counter`` on the event loop, the side a client sees.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from labkit import huge_pages
from llm_models.serving.admission import KVBudget
from llm_models.serving.engine import EngineConfig
from llm_models.serving.request import Failed, Finished, Request, Token
from llm_models.serving.sizes import blocks_for
from llm_models.serving.text import TextStream

from .workloads import Workload

BLOCK_SIZE = 16  # the serving lab's default: one block is 16 positions of every layer's keys and values


@dataclass(frozen=True)
class Setting:
    caching: str  # "off", or the index: "hash" (vLLM) or "radix" (SGLang)
    order: str  # "fcfs" or "longest-prefix"
    pool: str  # "holds" (the whole working set fits) or "evicts" (it does not)
    num_blocks: int

    def as_record(self) -> dict[str, Any]:
        return {"caching": self.caching, "order": self.order, "pool": self.pool, "num_blocks": self.num_blocks}


def pool_sizes(workload: Workload, max_tokens: int) -> dict[str, int]:
    """Blocks of the two pools: ``holds`` has room for every request's blocks at once, shared or not (nothing need
    ever be evicted); ``evicts`` for 1.25 times the largest request alone, so a run's distinct blocks cannot all
    stay cached. A later turn's prompt is bounded by its session's first prompt, every follow-up and every reply."""
    largest = [blocks_for(len(s.prompt) + sum(map(len, s.follow_ups)) + s.turns * (max_tokens + 2), BLOCK_SIZE)
               for s in workload.sessions]
    holds = sum(largest[i] * s.turns for i, s in enumerate(workload.sessions))
    return {"holds": holds, "evicts": -(-5 * max(largest) // 4)}


def settings(sizes: dict[str, int]) -> list[Setting]:
    """Caching off (first come, first served: with nothing cached the cache-aware order has nothing to rank), then
    each index under both orders, each at both pool sizes."""
    runs = [Setting("off", "fcfs", pool, blocks) for pool, blocks in sizes.items()]
    for caching in ("hash", "radix"):
        runs += [Setting(caching, order, pool, blocks) for pool, blocks in sizes.items()
                 for order in ("fcfs", "longest-prefix")]
    return runs


def engine(chat: Any, setting: Setting, threads: int) -> EngineConfig:
    from llm_models.serving.pool import pool_block_bytes

    size = pool_block_bytes(chat.model.config, chat.model.config.layers, BLOCK_SIZE)
    return EngineConfig.for_chat(chat, BLOCK_SIZE, setting.num_blocks, KVBudget(setting.num_blocks * size),
                                 ttft_target_s=None, threads=threads, max_waiting=1024,
                                 prefix_index=None if setting.caching == "off" else setting.caching,
                                 order=setting.order)


async def await_end(request: Request) -> tuple[float | None, float]:
    """Wait for the request's end: the time of its first token and of its end."""
    first = None
    while True:
        event = await request.events.get()
        if isinstance(event, Token):
            first = time.perf_counter() if first is None else first
        elif isinstance(event, Finished):
            return first, time.perf_counter()
        else:
            assert isinstance(event, Failed)
            raise RuntimeError(f"a request of the prefix benchmark failed: {event.message}")


async def serve(chat: Any, workload: Workload, setting: Setting, max_tokens: int, gap_s: float,
                threads: int) -> dict[str, Any]:
    """Run ``workload`` once at ``setting``: the requests, in the order they were sent, and the counters."""
    scheduler = engine(chat, setting, threads).build()
    scheduler.start()
    await scheduler.seeded()
    huge_pages.settle()  # the model and this run's pool on 2 MiB pages before the clock starts, as a server does
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()

    async def session(index: int) -> None:
        await asyncio.sleep(max(0.0, index * gap_s - (time.perf_counter() - start)))
        prompt, output = list(workload.sessions[index].prompt), []
        for turn in range(workload.sessions[index].turns):
            if turn:
                prompt = workload.next_prompt(prompt, output, index, turn)
            sent = time.perf_counter()
            request = scheduler.submit(prompt, max_tokens, TextStream(chat.tokenizer, chat.stop_ids))
            first, end = await await_end(request)
            output = list(request.output)
            rows.append({"session": index, "turn": turn, "prompt_tokens": len(prompt),
                         "cached_tokens": request.cached_tokens, "sent_s": sent - start,
                         # the scheduler's own clock, both ends: how long it waited before admission
                         "waited_s": request.admitted_s - request.arrival_s,
                         "ttft_s": None if first is None else first - sent, "end_s": end - start,
                         "output": output})

    try:
        await asyncio.gather(*(session(i) for i in range(len(workload.sessions))))
        metrics = scheduler.metrics()
    finally:
        await scheduler.stop()
    counters = {key: metrics[key] for key in ("prefill_tokens", "prefill_calls", "prefill_seconds", "decode_steps",
                                              "decode_rows", "decode_seconds", "tokens_generated",
                                              "peak_used_blocks", "peak_running", "num_used_blocks")}
    return {**setting.as_record(), "wall_s": time.perf_counter() - start, "requests": rows, "server": counters,
            "prefix": metrics["prefix_caching"]}


def run(chat: Any, workload: Workload, setting: Setting, max_tokens: int, gap_s: float,
        threads: int) -> dict[str, Any]:
    return asyncio.run(serve(chat, workload, setting, max_tokens, gap_s, threads))
