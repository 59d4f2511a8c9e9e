"""Continuous batching in one asyncio loop: admit what fits, one batched decode step, stream, retire.

Names follow vLLM's scheduler where they fit: a ``waiting`` queue (first
come, first served, or the longest cached prefix first), a ``running`` list,
``num_free_blocks``, and scheduling split from execution as vLLM v1 splits
them. Each iteration of ``run``:

1. ``schedule()``, synchronous, decides the pass without touching the model
   and returns a ``SchedulerOutput`` (llm_models.serving.output): it retires
   requests whose clients left (when disconnects are honoured), returning
   their blocks; admits from the head of ``waiting`` while the policy allows,
   reserving each request's blocks for every position it will ever hold; and
   packs the admitted prompts into prefill groups of up to ``PREFILL_TOKENS``,
   or, with ``prefill_chunk`` (chunked prefill, Sarathi-Serve's), gives the
   prompts still being prefilled at most that many tokens in all, so that a
   long prompt is prefilled over several passes, the running requests
   decoding in each;
2. the loop runs each group as one packed prefill on the model
   (``ServedModel.prefill``, llm_models.serving.runner) and streams each
   prompt's first token at once;
3. then one decode step for every running request together, whatever their
   lengths (``ServedModel.decode``), streaming each new token; with chunked
   prefill, a pass is one call: the decode rows of the requests whose prompt
   was whole before it ride in the chunks' call (``ServedModel.mixed``), so
   each weight matrix is read once for both, and a request whose last chunk
   runs in the pass decodes from the next one;
4. and retires finished requests, returning their blocks to the pool.

A model call that raises fails the requests it was computing for
(``Refusal.INTERNAL_ERROR``, with the error) and returns their blocks; the
loop goes on with the others (a packed prefill that raises is run again
prompt by prompt, so only the prompt whose own prefill fails is failed). On
shutdown, ``fail_all`` refuses new requests and fails every queued and
running one within one step, so each client gets an answer before its
connection closes.

Model work runs on one worker thread so the event loop keeps serving HTTP
while a step computes; every piece of scheduler state is touched only by
the event loop, between steps. Block bookkeeping therefore never races a
step: a request cancelled mid-step keeps its blocks until that step returns
and then loses them, so it stops within one iteration.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from llm_models.paged.pool import PoolExhausted

from .admission import AdmissionPolicy, kv_positions
from .output import ScheduledPrefill, SchedulerOutput
from .pool import LayeredPool
from .prefill_bound import PROBE_TOKENS, PrefillCost, over_bound
from .refusals import Refusal, RequestRefused
from .request import Failed, Finished, Request, Status, Token
from .runner import ServedModel
from .sizes import blocks_for
from .text import TextStream
from .waiting import WaitingQueue

if TYPE_CHECKING:  # a type only: the caching pool is built by whoever turns prefix caching on (engine.EngineConfig)
    from .prefix import CachingPool

logger = logging.getLogger(__name__)
T = TypeVar("T")
# Prompts admitted together are prefilled as one packed sequence of up to this many tokens (vLLM's
# max_num_batched_tokens): each weight matrix is read once for all of them, and one call stays short enough
# that the running requests' next step is not held back for long. A longer prompt is prefilled alone.
PREFILL_TOKENS = 2048
# The order ``waiting`` is admitted in: first come, first served, or, with a prefix cache, the request whose prompt
# finds the longest cached prefix first (SGLang's cache-aware "longest prefix match" schedule: requests that share a
# prefix run close together, before eviction can take it; a request that shares nothing may wait longer).
ORDERS = ("fcfs", "longest-prefix")


def prefill_groups(admitted: list[Request], budget: int) -> list[list[Request]]:
    """``admitted`` in order, cut into consecutive groups of at most ``budget`` prompt tokens (a prompt longer
    than the budget is a group of its own)."""
    groups: list[list[Request]] = []
    tokens = budget  # start a new group on the first request
    for request in admitted:
        if tokens + len(request.prompt) > budget:
            groups.append([])
            tokens = 0
        groups[-1].append(request)
        tokens += len(request.prompt)
    return groups


@dataclass
class Counters:
    iterations: int = 0
    submitted: int = 0
    decode_steps: int = 0
    decode_rows: int = 0  # requests summed over decode steps: decode_rows / decode_steps = mean batch
    prefills: int = 0  # requests prefilled
    prefill_tokens: int = 0  # prompt positions those prefills computed (prefix caching skips the cached ones)
    prefill_calls: int = 0  # packed prefills that did it: prefills / prefill_calls prompts per call
    tokens_generated: int = 0
    completed: int = 0
    cancelled: int = 0
    failed_for_memory: int = 0
    failed_for_error: int = 0  # a model call raised while computing for them
    refused_too_large: int = 0
    refused_queue_full: int = 0
    refused_prefill_bound: int = 0  # refused because the prompt tokens waiting would pass the prefill-time bound
    peak_used_blocks: int = 0
    peak_running: int = 0
    # Work for departed clients. A row (a prefill's or a decode step's token for one request) counts as "after
    # disconnect" when the server had noticed the disconnect by the time the row's step returned. Honoured, such a
    # row is dropped (at most one per cancelled request: the step already under way); ignored, it is streamed into
    # a connection nobody reads. Identities: decode_rows + prefills - tokens_generated == rows_dropped, and
    # decode_rows_after_disconnect + prefills_after_disconnect == tokens_after_disconnect + rows_dropped.
    decode_rows_after_disconnect: int = 0  # the sum of every request's decode_steps_after_gone
    prefills_after_disconnect: int = 0
    decode_steps_with_departed: int = 0  # decode steps that computed at least one row for a departed client
    rows_dropped: int = 0  # computed, then thrown away because the request was cancelled meanwhile
    tokens_after_disconnect: int = 0  # tokens streamed for clients that had already left (ignored disconnects)
    block_seconds_after_disconnect: float = 0.0  # blocks held x seconds, from when the server noticed the leave
    decode_seconds: float = 0.0  # time the worker spent in decode steps
    prefill_seconds: float = 0.0  # time the worker spent in prefills: no running request advances meanwhile
    # Chunked prefill's passes that carried decode rows in the chunks' call: counted in decode_steps, decode_rows and
    # prefill_tokens, never in prefill_calls; their time in mixed_seconds, in neither of the two above. NOTE: so the
    # per-step and per-call means of kv_serving.figures leave them out: the benchmark reads those from servers that
    # do not chunk.
    mixed_passes: int = 0
    mixed_seconds: float = 0.0


class Scheduler:
    def __init__(self, model: ServedModel, pool: LayeredPool, policy: AdmissionPolicy,
                 max_waiting: int = 256, honor_disconnect: bool = True, ttft_target_s: float | None = None,
                 prefill_cost: PrefillCost | None = None, order: str = "fcfs", prefix: CachingPool | None = None,
                 prefill_chunk: int | None = None) -> None:
        """``ttft_target_s``: bound the prefills a new request waits behind by what this scheduler prefills in that
        time (llm_models.serving.prefill_bound), at ``prefill_cost`` if given (never updated then), else at the cost
        it measures from a probe when it starts and from every prefill after; None: no such bound. ``prefix``: the
        prefix cache, which is the pool itself (a ``CachingPool`` keeps its freed blocks cached), or None for no
        prefix caching; ``order`` is one of ORDERS (longest-prefix needs the cache). ``prefill_chunk``: at most this
        many prompt tokens prefilled per pass, over every prompt still being prefilled (a whole number of blocks);
        None: each admitted prompt whole in the pass that admits it."""
        if max_waiting < 1:
            raise ValueError(f"max_waiting must be at least 1, got {max_waiting}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
        if prefix is not None and prefix is not pool:
            raise ValueError("the prefix cache caches the pool's own blocks: pass the CachingPool as both pool and "
                             "prefix")
        if order != "fcfs" and prefix is None:
            raise ValueError(f"order {order!r} ranks requests by their cached prefix: it needs a prefix cache")
        if prefill_chunk is not None and (prefill_chunk < pool.block_size or prefill_chunk % pool.block_size):
            # NOTE: a chunk that stops inside a block would start the next one off a block boundary, where the
            # prefill's attention (block_aligned_attention) would cut its queries differently from a whole prefill
            raise ValueError(f"prefill_chunk must be a whole number of blocks of {pool.block_size} tokens, got "
                             f"{prefill_chunk}")
        self.prefill_chunk = prefill_chunk
        self.model, self.pool, self.policy, self.prefix, self.order = model, pool, policy, prefix, order
        self.budget_blocks = policy.budget_blocks(pool)  # validates a byte budget against the pool
        self.max_waiting, self.honor_disconnect = max_waiting, honor_disconnect
        if ttft_target_s is not None and not 0 < ttft_target_s < float("inf"):
            raise ValueError(f"ttft_target_s must be a finite number of seconds above 0, got {ttft_target_s}")
        self.ttft_target_s, self.prefill_cost = ttft_target_s, prefill_cost
        self._prefill_started: float | None = None  # perf_counter at the start of the prefill call under way
        self._seeded = asyncio.Event()  # set once the bound has a rate (or needs none): a server opens after it
        self.waiting = WaitingQueue(prefix if order == "longest-prefix" else None)
        self.running: list[Request] = []
        # retired since the last pass, for the next one's SchedulerOutput.finished (an idle loop holds the last few)
        self._retired: list[Request] = []
        self.counters = Counters()
        self.closing: str | None = None  # set by fail_all: why new requests are refused
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set while nothing is queued or running (every request has had its last event)
        self._idle.set()
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- requests in -------------------------------------------------------------------------------
    def submit(self, prompt: list[int], max_tokens: int, text: TextStream | None = None,
               prompt_field: str = "prompt", cache_salt: str | None = None) -> Request:
        """Queue a request, or raise RequestRefused: one that can never run here (an invalid request, too long for
        the model or the KV budget), or one the engine is too loaded or stopping to take now (the queue full by count
        or by prefill time, a shutdown). With ``text``, its tokens stream as text and its stops end it.
        ``prompt_field`` is the request field a refusal of the prompt names (``messages`` for a chat).
        ``cache_salt``: the prefix cache shares blocks only among requests with the same salt (Request.cache_salt)."""
        config, size = self.model.config, self.pool.block_size
        if self.closing is not None:
            raise RequestRefused(self.closing, Refusal.SERVER_SHUTTING_DOWN)
        if self._task is not None and self._task.done():  # the loop ended without stop(): nothing would run it
            raise RequestRefused(f"{self.health()}; retry later", Refusal.SCHEDULER_STOPPED)
        if not prompt or max_tokens < 1:
            raise RequestRefused(f"need a non-empty prompt and max_tokens >= 1, got {len(prompt)} prompt "
                                 f"tokens and max_tokens={max_tokens}", Refusal.INVALID_REQUEST)
        if len(prompt) >= config.max_positions:
            raise RequestRefused(f"the prompt is {len(prompt)} tokens; the model has {config.max_positions} "
                                 f"positions, so a prompt may hold at most {config.max_positions - 1}",
                                 Refusal.CONTEXT_LENGTH_EXCEEDED, prompt_field)
        if len(prompt) + max_tokens > config.max_positions:
            raise RequestRefused(f"{len(prompt)} prompt tokens + max_tokens {max_tokens} = "
                                 f"{len(prompt) + max_tokens} positions, beyond the model's "
                                 f"{config.max_positions}", Refusal.CONTEXT_LENGTH_EXCEEDED, "max_tokens")
        outside = next((i for i, token in enumerate(prompt) if not 0 <= token < config.vocab_size), None)
        if outside is not None:
            raise RequestRefused(f"prompt[{outside}] = {prompt[outside]} is not a token id: ids must lie in "
                                 f"[0, {config.vocab_size})", Refusal.INVALID_TOKEN, prompt_field)
        needed = blocks_for(kv_positions(len(prompt), max_tokens), size)
        if needed > self.budget_blocks:
            self.counters.refused_too_large += 1
            raise RequestRefused(
                f"{len(prompt)} prompt tokens + max_tokens {max_tokens} need "
                f"{kv_positions(len(prompt), max_tokens)} cached positions = {needed} blocks of {size} "
                f"({needed * self.pool.block_bytes} bytes); the KV budget is {self.budget_blocks} blocks "
                f"({self.budget_blocks * self.pool.block_bytes} bytes)", Refusal.KV_BUDGET_EXCEEDED,
                # the field to change: max_tokens when the prompt with one token to generate would fit
                "max_tokens" if blocks_for(kv_positions(len(prompt), 1), size) <= self.budget_blocks else prompt_field)
        if len(self.waiting) >= self.max_waiting:
            self.counters.refused_queue_full += 1
            raise RequestRefused(f"the waiting queue is full ({len(self.waiting)} of {self.max_waiting}); "
                                 f"retry later", Refusal.QUEUE_FULL)
        request = Request(f"cmpl-{uuid.uuid4().hex}", list(prompt), max_tokens,  # unique across launches
                          text=text, cache_salt=cache_salt)
        if self.ttft_target_s is not None and self.prefill_cost is not None:  # no cost before the start-up probe
            running_s = 0.0 if self._prefill_started is None else time.perf_counter() - self._prefill_started
            # NOTE: the queue's and this request's prefixes matched once, for both the prefills and the blocks ahead
            queue = [(queued, self._hits(queued)) for queued in [*self.waiting, request]]
            refusal = over_bound(self._ahead(queue[:-1]), running_s, self._uncached(request, queue[-1][1]),
                                 self.ttft_target_s, self.prefill_cost, self._blocked_s(queue))
            if refusal is not None:
                self.counters.refused_prefill_bound += 1
                if refusal.retry_after_s is None:  # its own prefill passes the target: no wait makes it fit
                    raise RequestRefused(refusal.message, Refusal.PROMPT_OVER_TTFT_TARGET, prompt_field)
                raise RequestRefused(refusal.message, Refusal.PREFILL_QUEUE_FULL, retry_after_s=refusal.retry_after_s)
        self.counters.submitted += 1
        self.waiting.add(request)
        self._idle.clear()
        self._wake.set()
        return request

    def _uncached(self, request: Request, hits: list[int] | None = None) -> int:
        """The prompt tokens a prefill would compute now: all of them, less what the prefix cache holds (the rate the
        bound uses is measured in computed tokens too); ``hits``, its prefix's cached blocks if already matched."""
        return len(request.prompt) - len(self._hits(request) if hits is None else hits) * self.pool.block_size

    def _grows(self, request: Request, hits: list[int]) -> int:
        """The blocks admitting ``request`` now would add: all it reserves, less the cached blocks it finds (``hits``)
        that running requests hold (a block is stored once, however many hold it)."""
        needed = blocks_for(request.kv_positions, self.pool.block_size)
        return needed - (0 if self.prefix is None else self.prefix.shared(hits))

    def _hits(self, request: Request) -> list[int]:
        return [] if self.prefix is None else self.prefix.match(request.keys)

    def _blocked_s(self, queue: list[tuple[Request, list[int]]]) -> float:
        """Seconds until ``queue`` (the waiting requests, then the new one behind them, each with its prefix's cached
        blocks) could all hold their blocks, as the running requests
        finish and free theirs: nobody overtakes the queue's head, so whoever waits behind a head that waits for
        blocks waits that long too (a 2-token request once waited 164 s behind a long prompt so).

        Each running request is priced at every token its max_tokens still allows (it may stop sooner: an upper
        bound), a decode step at a prefill call of as many tokens as it has rows (the cost model's fixed part is the
        pass over every weight a step makes too), and each admitted request holds its blocks until its own last
        token. 0 where everyone fits now."""
        cost = self.prefill_cost
        if cost is None:
            return 0.0
        # (decode steps until it ends, blocks it frees then), the soonest on top; the step count is the whole batch's.
        # NOTE: a heap, so that a submit behind W waiting requests costs W log W, not W squared (it runs on the loop)
        ends = [(r.max_tokens - len(r.output), len(r.table)) for r in self.running]
        heapq.heapify(ends)
        running, used, now = len(self.running), self.pool.num_used_blocks, 0
        # NOTE: in the queue's order as it stands (longest-prefix may reorder it before the next admission)
        for queued, hits in queue:
            grows = self._grows(queued, hits)
            while ends and not self.policy.admits(running, used, grows, self.pool):
                steps, freed = heapq.heappop(ends)
                now, running, used = max(now, steps), running - 1, used - freed
            heapq.heappush(ends, (now + queued.max_tokens, grows))
            running, used = running + 1, used + grows
        return now * cost.call_s(max(len(self.running), 1))

    def _ahead(self, waiting: list[tuple[Request, list[int]]] | None = None) -> list[int]:
        """The prefills a new request waits behind, each as its tokens still to compute: admitted requests whose
        prompt is not whole yet (the one under way first), then the queue's, less what each finds cached
        (``waiting``: the queue with each prefix's cached blocks, if already matched)."""
        admitted = [len(r.prompt) - r.computed for r in self.running if len(r.prompt) > r.computed]
        if waiting is None:
            waiting = [(request, self._hits(request)) for request in self.waiting]
        return admitted + [self._uncached(request, hits) for request, hits in waiting]

    @property
    def waiting_prompt_tokens(self) -> int:
        """Prompt tokens not yet prefilled (``_ahead``'s sum): a new request waits behind all of them for its own
        first token."""
        return sum(self._ahead())

    def disconnect(self, request: Request, reason: str = "the client disconnected") -> None:
        """Its client left. Honoured: the request stops within one iteration. Ignored: it runs on."""
        if request.done or request.client_gone:
            return
        request.client_gone, request.gone_s, request.gone_reason = True, time.monotonic(), reason
        request.cancel_iteration = self.counters.iterations
        self._wake.set()

    def fail_all(self, reason: str) -> None:
        """Refuse new requests from now on and fail every queued and running one with ``reason``
        (``Refusal.SERVER_SHUTTING_DOWN``).

        Queued requests hold no blocks and fail at once; running ones fail when the step under way returns, so
        no block goes back to the pool while the worker writes into it. A stopped loop has no step under way.
        """
        self.closing = reason
        for request in list(self.waiting):
            self._retire(request, Status.FAILED, Failed(reason, Refusal.SERVER_SHUTTING_DOWN))
        if self._task is None or self._task.done():
            self._fail_running_if_closing()
        self._wake.set()

    async def settled(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or running, at most ``timeout_s``; whether that came. After ``fail_all``, it
        comes once the model call under way returns and its requests have their failure event (a server's shutdown
        waits for this, so a long prefill does not outlast the time it gives replies to go out)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def _fail_running_if_closing(self) -> None:
        if self.closing is not None:
            for request in list(self.running):
                self._retire(request, Status.FAILED, Failed(self.closing, Refusal.SERVER_SHUTTING_DOWN))

    def _cancelled(self, request: Request) -> bool:
        return self.honor_disconnect and request.client_gone

    # ---- the loop ----------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[None]:
        if self._task is not None:
            raise RuntimeError("the scheduler is already running")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
        self._task = asyncio.get_running_loop().create_task(self.run(), name="scheduler")
        return self._task

    async def stop(self) -> None:
        """Stop the loop, fail whatever is still queued or running, return every block."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:  # NOTE: only a failed start-up probe ends the loop so; seeded() has raised it already
                pass
        if self._executor is not None:  # a step still on the worker thread finishes before blocks go back
            await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)
        for request in [*self.waiting, *self.running]:
            self._retire(request, Status.FAILED, Failed("the server is shutting down", Refusal.SERVER_SHUTTING_DOWN))
        self.waiting.clear()
        self._retired.clear()
        self._task = self._executor = None

    # --8<-- [start:loop]
    async def seeded(self) -> None:
        """Return once the start-up probe has seeded the prefill rate (at once if the bound needs no probe): the
        server's lifespan waits for it, so no request arrives while the bound knows no rate. A probe that failed
        raises its error here, so the server stops at start-up naming it instead of waiting forever."""
        await self._seeded.wait()
        if self._task is not None and self._task.done():
            self._task.result()

    async def run(self) -> None:
        try:
            if self.ttft_target_s is not None and self.prefill_cost is None:
                await self._probe_prefill()
        finally:
            self._seeded.set()
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
            try:
                await self._execute(self.schedule())
            except Exception as error:  # a fault outside a model call: fail everyone rather than spin on it
                self._fail_for_error([*self.running, *self.waiting], "scheduler iteration", error)
            await asyncio.sleep(0)  # let the HTTP side run even when steps return at once

    def schedule(self) -> SchedulerOutput:
        """One pass's decisions, no model call: retire the requests whose clients left, admit from the head of
        ``waiting`` what the policy and the pool allow (each reserving its blocks), and pack the admitted prompts
        into prefill groups (or, with ``prefill_chunk``, the next chunk of every prompt still being prefilled).
        Synchronous: it runs between model calls, so nothing it touches is being computed."""
        self.counters.iterations += 1
        self._retire_cancelled()
        admitted = self._admit()
        if self.prefill_chunk is None:
            groups = tuple(tuple(ScheduledPrefill(r, r.computed, len(r.prompt) - r.computed) for r in group)
                           for group in prefill_groups(admitted, PREFILL_TOKENS))
        else:
            chunks = self._chunks(self.prefill_chunk)
            groups = (chunks,) if chunks else ()
        scheduled = {prefill.request: prefill.tokens for group in groups for prefill in group}
        finished, self._retired = tuple(self._retired), []
        if self.prefill_chunk is not None:
            # NOTE: one call a pass: the rows whose prompt was whole before it ride in the chunks' call (one read of
            # every weight for both); a prompt whose last chunk runs now needs that call's token first: it decodes
            # from the next pass on
            ridden = tuple(r for r in self.running if r.computed == len(r.prompt) and r not in scheduled)
            return SchedulerOutput(groups, ridden, finished, mixed=bool(groups and ridden))
        # the decode step advances the requests whose prompt is whole by then: prefilled before, or by this pass
        decodes = tuple(r for r in self.running if r.computed + scheduled.get(r, 0) == len(r.prompt))
        return SchedulerOutput(groups, decodes, finished)

    def _chunks(self, budget: int) -> tuple[ScheduledPrefill, ...]:
        """Chunked prefill: the prompts still being prefilled, oldest first, take at most ``budget`` tokens in all.
        A prompt whose rest does not fit takes what does, cut down to whole blocks (the next chunk then starts on a
        block boundary, as a prefix hit does), and the prompts after it wait for the next pass."""
        chunks, size = [], self.pool.block_size
        for request in self.running:
            rest = len(request.prompt) - request.computed
            if rest == 0:
                continue
            tokens = rest if rest <= budget else budget // size * size
            if tokens == 0:
                break
            chunks.append(ScheduledPrefill(request, request.computed, tokens))
            budget -= tokens
            if rest > tokens:  # first come, first prefilled: nobody overtakes a prompt the budget cut
                break
        return tuple(chunks)

    async def _execute(self, output: SchedulerOutput) -> None:
        """Run a pass on the model and apply what it returns: each prefill group, then one decode step for the
        requests still running (``output.decodes`` less any a prefill ended or whose client left meanwhile); or,
        ``output.mixed``, the chunks and that decode step in one call (``_mixed``)."""
        if output.mixed:
            (group,) = output.prefill_groups
            await self._mixed(group, output.decodes)
            self._retire_cancelled()
            return
        for group in output.prefill_groups:
            await self._prefill(group)
        self._retire_cancelled()
        batch = [request for request in output.decodes if request.status is Status.RUNNING]
        if batch:
            await self._decode_step(batch)
        self._retire_cancelled()
    # --8<-- [end:loop]

    # --8<-- [start:admit]
    def _admit(self) -> list[Request]:
        admitted = []
        self.waiting.reorder()  # longest-prefix: the cached prefixes as they are now (llm_models.serving.waiting)
        while self.waiting:
            request = self.waiting.head
            needed = blocks_for(request.kv_positions, self.pool.block_size)
            hits = self._hits(request)
            grows = self._grows(request, hits)
            if not self.policy.admits(len(self.running), self.pool.num_used_blocks, grows, self.pool):
                break  # nobody overtakes the head of the queue (its order: self.order)
            self.waiting.remove(request)
            try:
                if self.prefix is None:
                    request.table = self.pool.allocate(needed)
                else:
                    request.table = self.prefix.take(request.keys, hits, needed - len(hits))
                    request.cached_tokens = len(hits) * self.pool.block_size
                request.computed = request.cached_tokens
            except PoolExhausted as error:  # admitted by count, but the memory is not there
                self.counters.failed_for_memory += 1
                limit = ", ".join(f"{key}={value}" for key, value in self.policy.describe().items() if key != "policy")
                self._retire(request, Status.FAILED, Failed(
                    f"out of KV memory: admitted as running request {len(self.running) + 1} under {limit}, "
                    f"but {error}"))
                continue
            request.status = Status.RUNNING
            request.admitted_s = time.monotonic()
            self.running.append(request)
            admitted.append(request)
        self.counters.peak_used_blocks = max(self.counters.peak_used_blocks, self.pool.num_used_blocks)
        self.counters.peak_running = max(self.counters.peak_running, len(self.running))
        return admitted
    # --8<-- [end:admit]

    async def _prefill(self, group: tuple[ScheduledPrefill, ...]) -> None:
        """The group's prompts (or chunks of them) in one packed prefill; a prompt whose last position this computes
        gets its first token from it. If the packed call raises, each is prefilled again alone, so only a request
        whose own prefill fails is failed."""
        group = tuple(p for p in group if not (p.request.done or self._cancelled(p.request)))  # left meanwhile
        if not group:
            return
        requests = [p.request for p in group]
        started = time.perf_counter()
        call: tuple[Any, ...] = (self.model.prefill, self.pool, [p.request.prompt[:p.start + p.tokens] for p in group],
                                 [p.request.table for p in group])
        if any(p.start for p in group) or self.prefix is not None:  # where each computation starts: after what is cached
            call += ([p.start for p in group],)
        self._prefill_started = started  # the bound counts what the call under way has already run
        try:
            if len(group) == 1:
                logits = await self._on_worker(requests, "prefill", *call)
            else:
                logits = await asyncio.get_running_loop().run_in_executor(self._executor, *call)
        except Exception as error:  # a packed call only: _on_worker fails its request and returns None
            logger.warning("a packed prefill of %d prompts failed (%s: %s); each is prefilled alone",
                           len(group), type(error).__name__, error)
            self._prefill_started = None
            for prefill in group:
                await self._prefill((prefill,))
            return
        finally:
            self._prefill_started = None
        if logits is None:
            return
        seconds = time.perf_counter() - started
        self.counters.prefill_seconds += seconds
        self.counters.prefill_calls += 1
        self._prefilled(group, logits, seconds)

    async def _mixed(self, group: tuple[ScheduledPrefill, ...], decodes: tuple[Request, ...]) -> None:
        """The group's chunks and one decode step for ``decodes`` in one call (``ServedModel.mixed``). If the call
        raises, the two run apart, so only a request whose own prefill or step fails is failed."""
        group = tuple(p for p in group if not (p.request.done or self._cancelled(p.request)))  # left meanwhile
        batch = [r for r in decodes if r.status is Status.RUNNING and not self._cancelled(r)]
        if not group or not batch:
            if group:
                await self._prefill(group)
            if batch:
                await self._decode_step(batch)
            return
        started = time.perf_counter()
        self._prefill_started = started  # the bound counts what the call under way has already run
        try:
            logits = await asyncio.get_running_loop().run_in_executor(
                self._executor, self.model.mixed, self.pool, [p.request.prompt[:p.start + p.tokens] for p in group],
                [p.request.table for p in group], [p.start for p in group], [r.output[-1] for r in batch],
                [r.length for r in batch], [r.table for r in batch])
        except Exception as error:
            logger.warning("a mixed pass of %d prompts and %d decode rows failed (%s: %s); they run apart",
                           len(group), len(batch), type(error).__name__, error)
            self._prefill_started = None
            await self._prefill(group)
            self._retire_cancelled()
            batch = [r for r in batch if r.status is Status.RUNNING]
            if batch:
                await self._decode_step(batch)
            return
        finally:
            self._prefill_started = None
        seconds = time.perf_counter() - started
        self.counters.mixed_passes += 1
        self.counters.mixed_seconds += seconds
        # the decode rows are tokens through the same weight products: the bound's cost counts them with the chunks
        self._prefilled(group, logits[:len(group)], seconds, rows=len(batch))
        self._decoded(batch, logits[len(group):])

    def _prefilled(self, group: tuple[ScheduledPrefill, ...], logits: Any, seconds: float, rows: int = 0) -> None:
        """Apply a prefill's logits (N, vocab) to its group; ``rows``, decode rows that rode in the same call."""
        computed = sum(p.tokens for p in group)
        self.counters.prefill_tokens += computed
        if self.prefill_cost is not None:
            self.prefill_cost.observe(computed + rows, seconds)
        for prefill in group:
            prefill.request.computed = prefill.start + prefill.tokens
        whole = [(p.request, token) for p, token in zip(group, logits.argmax(-1).tolist()) if p.request.prefilled]
        if self.prefix is not None:  # before any first token: one that finishes its request returns its blocks
            for request, _ in whole:
                self.prefix.offer(request.keys, request.table)
        for request, token in whole:  # a chunk that leaves part of its prompt for later passes streams nothing yet
            self.counters.prefills += 1
            if request.client_gone:
                self.counters.prefills_after_disconnect += 1
            self._emit(request, token)

    async def _probe_prefill(self) -> None:
        """Seed the prefill cost: a one-token prefill (a call's fixed part), then one of PROBE_TOKENS tokens (fewer if
        the pool is smaller), into blocks taken and given back at once, before any request is admitted
        (llm_models.serving.prefill_bound)."""
        size = self.pool.block_size
        tokens = min(PROBE_TOKENS, self.pool.num_blocks * size, self.model.config.max_positions - 1)
        ids = [index % self.model.config.vocab_size for index in range(1, tokens + 1)]
        table = self.pool.allocate(blocks_for(tokens, size))
        loop = asyncio.get_running_loop()
        try:
            timed = []
            for length in (1, tokens):
                started = time.perf_counter()
                await loop.run_in_executor(self._executor, self.model.prefill, self.pool, [ids[:length]], [table])
                timed.append(max(time.perf_counter() - started, 1e-9))
            self.prefill_cost = PrefillCost.probed(timed[0], tokens, timed[1])
        finally:
            self.pool.release(table)

    async def _decode_step(self, batch: list[Request]) -> None:
        tokens = [r.output[-1] for r in batch]
        positions = [r.length for r in batch]  # the fed-back token's position: positions continue per request
        tables = [r.table for r in batch]
        started = time.perf_counter()
        logits = await self._on_worker(batch, "decode step", self.model.decode, self.pool, tokens, positions, tables)
        if logits is None:
            return
        self.counters.decode_seconds += time.perf_counter() - started
        self._decoded(batch, logits)

    def _decoded(self, batch: list[Request], logits: Any) -> None:
        """Apply a decode step's logits (B, vocab) to its batch."""
        self.counters.decode_steps += 1
        self.counters.decode_rows += len(batch)
        if self.prefix is not None:  # a block the fed-back tokens just filled is cached too (a chat's next turn)
            for request in batch:
                stored = request.stored_keys()  # every position written so far
                if len(stored) % self.pool.block_size == 0 and request.table:
                    self.prefix.offer(stored, request.table)
        departed = 0
        for request, token in zip(batch, logits.argmax(-1).tolist()):
            request.decode_steps += 1
            if request.client_gone:  # computed for nobody: dropped if honoured, streamed into the void if not
                request.decode_steps_after_gone += 1
                departed += 1
            if not request.done:
                self._emit(request, token)
        self.counters.decode_rows_after_disconnect += departed
        self.counters.decode_steps_with_departed += departed > 0

    async def _on_worker(self, requests: list[Request], what: str, call: Callable[..., T], *args: object) -> T | None:
        """``call(*args)`` on the worker thread; if it raises, ``requests`` fail with the error and None returns."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call, *args)
        except Exception as error:
            self._fail_for_error(requests, what, error)
            return None

    def _fail_for_error(self, requests: list[Request], what: str, error: Exception) -> None:
        """Fail ``requests`` with an internal error that names the error, and return their blocks (no step is under
        way)."""
        logger.error("the %s failed for %d request(s)", what, len(requests), exc_info=error)
        message = f"internal error in the {what}: {type(error).__name__}: {error}"
        for request in requests:
            if not request.done:
                self.counters.failed_for_error += 1
                self._retire(request, Status.FAILED, Failed(message, Refusal.INTERNAL_ERROR))

    def _emit(self, request: Request, token: int) -> None:
        if self._cancelled(request):
            self.counters.rows_dropped += 1  # computed before the cancellation was seen; the request retires next
            return
        request.output.append(token)
        self.counters.tokens_generated += 1
        if request.client_gone:
            self.counters.tokens_after_disconnect += 1
        last = len(request.output) == request.max_tokens
        if request.text is None:
            piece, stopped = None, False
        else:  # a stop token or string ends it now, and its blocks go back in this iteration
            piece, stopped = request.text.push(token)
            piece += request.text.flush() if last and not stopped else ""
        listed = request.text is None or token not in request.text.stop_ids  # an end-of-turn id is not listed
        request.events.put_nowait(Token(token, piece, listed))
        if stopped or last:
            self.counters.completed += 1
            self._retire(request, Status.FINISHED, Finished("stop" if stopped else "length"))

    def _retire_cancelled(self) -> None:
        for request in [r for r in (*self.waiting, *self.running) if self._cancelled(r)]:
            self.counters.cancelled += 1
            self._retire(request, Status.CANCELLED, Failed(f"cancelled: {request.gone_reason}"))
        self._fail_running_if_closing()

    def _retire(self, request: Request, status: Status, event: Finished | Failed) -> None:
        if request.gone_s is not None and request.table:
            held = time.monotonic() - request.gone_s
            self.counters.block_seconds_after_disconnect += len(request.table) * held
        if request in self.running:
            self.running.remove(request)
        if request in self.waiting:
            self.waiting.remove(request)
        self.pool.release(request.table)
        request.table = []
        request.status = status
        request.events.put_nowait(event)
        self._retired.append(request)
        if not self.running and not self.waiting:
            self._idle.set()

    # ---- observation -------------------------------------------------------------------------------
    def health(self) -> str | None:
        """None while the loop serves; otherwise why it cannot (shutting down, never started, stopped, crashed)."""
        if self.closing is not None:
            return self.closing
        if self._task is None:
            return "the scheduler loop is not running"
        if self._task.done():
            error = None if self._task.cancelled() else self._task.exception()
            return "the scheduler loop has stopped" + (f": {type(error).__name__}: {error}" if error else "")
        return None

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def metrics(self) -> dict[str, Any]:
        """What /metrics serves: pool occupancy, queues and counters, all plain JSON values."""
        pool = self.pool
        return {
            "time_s": time.monotonic(),
            "num_blocks": pool.num_blocks,
            "budget_blocks": self.budget_blocks,
            "block_size": pool.block_size,
            "block_bytes": pool.block_bytes,
            "num_used_blocks": pool.num_used_blocks,
            "num_free_blocks": pool.num_free_blocks,
            "num_running": len(self.running),
            "num_waiting": len(self.waiting),
            "admission": self.policy.describe(),
            "honor_disconnect": self.honor_disconnect,
            "waiting_prompt_tokens": self.waiting_prompt_tokens,
            "ttft_target_s": self.ttft_target_s,  # None: the queue is bounded by count alone
            "prefill_tokens_per_s": None if self.prefill_cost is None else self.prefill_cost.tokens_per_s,
            "prefill_call_s": None if self.prefill_cost is None else self.prefill_cost.per_call_s,
            "prefix_caching": None if self.prefix is None else self.prefix_metrics(),
            # the trained model's kernel per matrix kind and row count, timed when it was arranged (llm_models.serving.kernels)
            "kernels": None if self.model.kernels is None else self.model.kernels.as_record(),
            **vars(self.counters),
        }

    def prefix_metrics(self) -> dict[str, Any]:
        """The prefix cache's counters (vLLM's prefix cache metrics: queries and hits in tokens) and its blocks now."""
        assert self.prefix is not None
        stats = self.prefix.stats
        return {"index": self.prefix.index.name, "order": self.order, **vars(stats), "hit_rate": stats.hit_rate,
                "cached_blocks": self.prefix.cached_blocks, "cached_free_blocks": self.prefix.cached_free_blocks}
