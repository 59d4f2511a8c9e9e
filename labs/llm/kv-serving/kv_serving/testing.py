"""Fixtures for this lab's tests: a tiny engine, and a real uvicorn server on 127.0.0.1 in the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
import unittest
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import uvicorn

from kv_cache import ModelConfig

from .admission import AdmissionPolicy, KVBudget
from .engine import EngineConfig
from .pool import block_bytes
from .server import HOST, create_app

TINY_MODEL = ModelConfig(vocab_size=64, width=32, heads=4, kv_heads=2, max_positions=96, seed=3)
TINY_LAYERS = 2
TINY_BLOCK = 4


def tiny_engine(num_blocks: int = 32, policy: AdmissionPolicy | None = None, **changes: object) -> EngineConfig:
    """A two-layer, width-32 engine: every test runs in milliseconds per step."""
    budget = KVBudget(num_blocks * block_bytes(TINY_MODEL, TINY_LAYERS, TINY_BLOCK))
    config = EngineConfig(model=TINY_MODEL, layers=TINY_LAYERS, block_size=TINY_BLOCK, num_blocks=num_blocks,
                          policy=policy or budget, model_name="tiny")
    return replace(config, **changes)


@asynccontextmanager
async def serve_in_loop(config: EngineConfig, timeout_s: float = 10.0) -> AsyncIterator[tuple[str, object]]:
    """Start uvicorn on 127.0.0.1 with an ephemeral port inside the running loop; yield (base URL, app).

    The server stops when the block exits, by itself, within ``timeout_s``.
    """
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, host=HOST, port=0, log_level="warning", access_log=False,
                                           lifespan="on", timeout_graceful_shutdown=timeout_s / 2))
    server.capture_signals = contextlib.nullcontext  # the test runner owns signals
    task = asyncio.get_running_loop().create_task(server.serve(), name="uvicorn-under-test")
    try:
        async with asyncio.timeout(timeout_s):
            while not server.started:
                if task.done():
                    task.result()  # raises the startup error
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{HOST}:{port}", app
    finally:
        server.should_exit = True
        async with asyncio.timeout(timeout_s):
            await task


class QuietLoopTestCase(unittest.IsolatedAsyncioTestCase):
    """Asyncio tests without debug mode's slow-callback warnings: a decode step is meant to take time."""

    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().set_debug(False)
