"""A client-side load generator that speaks only the OpenAI completions protocol.

    python -m kv_serving.loadgen --base-url http://127.0.0.1:8000 --requests 40 --rate 8

It knows nothing of this lab's server beyond ``POST /v1/completions`` with
``stream: true`` (and, when the server offers it, the JSON of ``GET
/metrics``), so the same seeded workload can be pointed at any compatible
server. Everything is measured from the client side: time to first token,
the gaps between tokens, end-to-end latency.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import ssl
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from .client_stats import client_summary, latency_summary
from .workload import WorkItem, WorkloadSpec, make_workload


@dataclass
class RequestResult:
    index: int
    prompt_tokens: int
    max_tokens: int
    outcome: str = "failed"  # completed | refused (4xx, 503) | failed | left (the client disconnected)
    status: int | None = None
    tokens: int = 0
    sent_s: float = 0.0  # seconds after the run started
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)  # gaps between consecutive tokens
    e2e_s: float | None = None
    error: str | None = None
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass
class RunResult:
    requests: list[RequestResult]
    duration_s: float  # first send to last response end
    occupancy: list[dict[str, float]]  # /metrics samples: t_s, used and budget blocks, running, waiting

    def summary(self) -> dict[str, Any]:
        """Counts, throughput and latency percentiles of one run (seconds), by kv_serving.client_stats, with which
        kv_serving.figures derives them from a record too; the gaps between tokens only the client has."""
        gaps = [gap for r in self.requests if r.outcome == "completed" for gap in r.itl_s]
        return {**client_summary([asdict(r) for r in self.requests]), "itl_s": latency_summary(gaps)}


async def send(client: httpx.AsyncClient, base_url: str, item: WorkItem, model: str, start: float,
               first_tokens: dict[int, asyncio.Event] | None = None) -> RequestResult:
    """One streamed completion, sent at its arrival time (counted from the first tokens of the items it waits for,
    ``item.after_first_tokens``); the client leaves early if the item says so. ``first_tokens``: each item's event,
    set at its first token or its end, whichever comes first."""
    first_tokens = first_tokens or {}
    result = RequestResult(item.index, len(item.prompt), item.max_tokens)
    try:
        await _send(client, base_url, item, model, start, first_tokens, result)
    finally:
        if item.index in first_tokens:  # an item that got no token still releases the ones waiting on it
            first_tokens[item.index].set()
    return result


async def _send(client: httpx.AsyncClient, base_url: str, item: WorkItem, model: str, start: float,
                first_tokens: dict[int, asyncio.Event], result: RequestResult) -> None:
    clock = start
    if item.after_first_tokens:
        await asyncio.gather(*(first_tokens[index].wait() for index in item.after_first_tokens))
        clock = time.perf_counter()
    await asyncio.sleep(max(0.0, clock + item.arrival_s - time.perf_counter()))
    sent = time.perf_counter()
    result.sent_s = sent - start
    last = sent
    if item.text_request is None:
        body = {"model": model, "prompt": item.prompt, "max_tokens": item.max_tokens, "stream": True}
    else:  # a text model: its usage says how many tokens the prompt became
        body = {"model": model, **item.text_request, "max_tokens": item.max_tokens, "stream": True,
                "stream_options": {"include_usage": True}}
    try:
        async with client.stream("POST", f"{base_url}{item.path}", json=body) as response:
            result.status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                result.outcome = "refused" if response.status_code in (400, 413, 422, 429, 503) else "failed"
                result.error = text[:300]
                return
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    if result.outcome != "failed" or result.error is None:
                        result.outcome = "completed"
                    break
                event = json.loads(data)
                if "error" in event:
                    result.outcome, result.error = "failed", str(event["error"].get("message"))[:300]
                    continue
                if not event.get("choices"):  # OpenAI's usage-only last chunk (stream_options.include_usage)
                    if event.get("usage"):
                        result.prompt_tokens = event["usage"]["prompt_tokens"]
                    continue
                choice = event["choices"][0]
                result.finish_reason = choice.get("finish_reason") or result.finish_reason
                result.token_ids += choice.get("token_ids", [])
                count = len(choice["token_ids"]) if "token_ids" in choice else int(bool(choice.get("text")))
                if count == 0:
                    continue
                now = time.perf_counter()
                if result.tokens == 0:
                    result.ttft_s = now - sent
                    if item.index in first_tokens:
                        first_tokens[item.index].set()
                else:
                    result.itl_s.append(now - last)
                last = now
                result.tokens += count
                if item.leave_after_tokens is not None and result.tokens >= item.leave_after_tokens:
                    result.outcome = "left"
                    break  # leaving the block closes the connection mid-stream: a disconnect
            if result.error is not None:
                result.outcome = "failed"
    except httpx.HTTPError as error:
        result.outcome, result.error = "failed", f"{type(error).__name__}: {error}"[:300]
    result.e2e_s = time.perf_counter() - sent


def waited_for(workload: list[WorkItem]) -> set[int]:
    """The indices of items others wait for (``WorkItem.after_first_tokens``); ValueError naming the item if one
    waits for an item the workload lacks or for one that waits itself (a chain could wait forever)."""
    items = {item.index: item for item in workload}
    waited = set()
    for item in workload:
        for index in item.after_first_tokens:
            if index not in items or items[index].after_first_tokens:
                why = "which the workload does not hold" if index not in items else "which waits itself"
                raise ValueError(f"work item {item.index} waits for the first token of item {index}, {why}")
            waited.add(index)
    return waited


async def sample_metrics(client: httpx.AsyncClient, base_url: str, start: float, interval_s: float,
                         samples: list[dict[str, float]]) -> None:
    """Poll /metrics until cancelled; a server without this lab's JSON metrics simply yields no samples."""
    while True:
        try:
            reply = await client.get(f"{base_url}/metrics")
            data = reply.json()
            samples.append({"t_s": time.perf_counter() - start, "used_blocks": data["num_used_blocks"],
                            "budget_blocks": data["budget_blocks"], "running": data["num_running"],
                            "waiting": data["num_waiting"]})
        except (httpx.HTTPError, ValueError, KeyError):
            return
        await asyncio.sleep(interval_s)


@functools.cache
def tls() -> ssl.SSLContext:
    """One verifying TLS context for every run's client: httpx reads the system's certificates for each client it
    makes (25 ms, 63 times in a quick run of the benchmark) unless handed one."""
    return ssl.create_default_context()


async def run_load(base_url: str, workload: list[WorkItem], model: str = "kv-serving-random",
                   metrics_interval_s: float = 0.05, timeout_s: float = 600.0) -> RunResult:
    """Send every item at its arrival time (counted from the first tokens it waits for, if any); bounded by ``timeout_s`` per request, a bound for a hang: a request
    queued behind a one-at-a-time server hears nothing until its turn (on a machine at load 17, the trained serial
    run's last request waited past 120 s and was recorded as failed)."""
    first_tokens = {index: asyncio.Event() for index in waited_for(workload)}
    limits = httpx.Limits(max_connections=len(workload) + 2, max_keepalive_connections=len(workload) + 2)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits, verify=tls()) as client:
        samples: list[dict[str, float]] = []
        start = time.perf_counter()
        poller = asyncio.create_task(sample_metrics(client, base_url, start, metrics_interval_s, samples))
        try:
            results = await asyncio.gather(*(send(client, base_url, item, model, start, first_tokens)
                                             for item in workload))
        finally:
            poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)
        ends = [r.sent_s + r.e2e_s for r in results if r.e2e_s is not None]
        first = min(r.sent_s for r in results)
        return RunResult(list(results), max(ends, default=first) - first, samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Seeded OpenAI-completions load against a base URL.")
    add = parser.add_argument
    add("--base-url", default="http://127.0.0.1:8000")
    add("--requests", type=int, default=40)
    add("--rate", type=float, default=8.0, help="mean arrivals per second (Poisson)")
    add("--seed", type=int, default=0)
    add("--vocab-size", type=int, default=512, help="token ids are drawn below this")
    add("--model", default="kv-serving-random")
    add("--details", action="store_true", help="print every request's result too")
    args = parser.parse_args(argv)
    if not args.base_url.startswith(("http://", "https://")):
        parser.error(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    try:
        spec = WorkloadSpec(args.requests, args.rate, args.seed, args.vocab_size)
    except ValueError as error:
        parser.error(str(error))
    run = asyncio.run(run_load(args.base_url, make_workload(spec), args.model))
    report: dict[str, Any] = {"summary": run.summary()}
    if args.details:
        report["requests"] = [asdict(r) for r in run.requests]
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    if all(r.outcome == "failed" for r in run.requests):  # nothing was measured: no server, or not this protocol
        sys.stderr.write(f"loadgen: every one of the {len(run.requests)} requests to {args.base_url} failed; the "
                         f"first: {run.requests[0].error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
