"""Warm against cold: a request served from cached blocks gives the logits of the same request computed from
nothing, at its first token and at every step after.

One scenario, built so that each way a prefix cache can go wrong changes the warm request's keys (the broken
variants in ``broken`` each fail it; the tests show it):

1. a decoy ``X + P[S:] + d``, computed, cached and released: its blocks after the first hold the same tokens as the
   shared prefix ``P``'s, computed after another first block (a hash without the parent takes them for ``P``'s);
2. ``A = P + a``, computed and cached, still running while
3. ``B = P + b`` finds ``P``'s full blocks cached and computes only the rest, from position len(found) on
   (a prefill that restarted its positions at 0 would rotate them wrongly);
4. ``A`` ends, and a filler prompt then takes every free block and writes into it (a pool that freed a block ``B``
   still holds would hand it out here);
5. ``B`` decodes ``steps`` tokens, fed the tokens of its own cold run (teacher forcing), so every step compares
   the same inputs.

The cold run is ``B`` alone in a fresh uncached pool (``llm_models.serving.model.greedy_together``): no cache, no sharing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from llm_models.serving.model import greedy_together
from llm_models.serving.pool import LayeredPool
from llm_models.serving.prefix import CachingPool
from llm_models.serving.sizes import blocks_for


@dataclass(frozen=True)
class Prompts:
    shared: list[int]  # P: at least two full blocks
    decoy_head: list[int]  # X: one block's worth of tokens unlike P's first block
    suffixes: tuple[list[int], list[int], list[int]]  # a, b, d
    filler: int  # the token the filler prompt repeats


@dataclass(frozen=True)
class Compared:
    cached_tokens: int  # of B's prompt, found cached
    prompt_tokens: int
    steps: int  # logits rows compared: the prefill's and each decode step's
    max_abs_difference: float  # over every element of every compared row
    allowed_there: float  # what the tolerance allows at that element (atol + rtol |cold|)
    worst_excess: float  # the largest |difference| - allowed over all elements: <= 0 when every element is within
    worst_step: int  # the row of that largest excess (0: the prefill's logits)

    @property
    def equal(self) -> bool:
        return self.worst_excess <= 0

    def as_record(self) -> dict[str, Any]:
        return {"cached_tokens": self.cached_tokens, "prompt_tokens": self.prompt_tokens, "steps": self.steps,
                "max_abs_difference": self.max_abs_difference, "allowed_there": self.allowed_there,
                "worst_excess": self.worst_excess, "worst_step": self.worst_step}


def allowed(cold: Tensor, atol: float, rtol: float) -> Tensor:
    """The largest |warm - cold| each element may show: atol + rtol |cold| (torch.allclose's rule)."""
    return atol + rtol * cold.abs()


def warm_against_cold(model: Any, prompts: Prompts, steps: int, atol: float, rtol: float, block_size: int = 16,
                      pool_type: Callable[..., CachingPool] = CachingPool, index: str = "hash") -> Compared:
    """Run the scenario above on ``model`` (a serving model: ``prefill``, ``decode``, ``config``, ``layers``) with a
    ``pool_type`` pool (a broken variant's, in the tests) and compare B's warm logits with its cold ones."""
    config, layers, size = model.config, model.layers, block_size
    shared, (a, b, d) = prompts.shared, prompts.suffixes
    if len(shared) < 2 * size or len(prompts.decoy_head) != size or prompts.decoy_head == shared[:size]:
        raise ValueError(f"the scenario needs a shared prefix of at least two blocks of {size} and a decoy head of "
                         f"one block unlike its first, got {len(shared)} and {len(prompts.decoy_head)} tokens")
    decoy, first, target = [*prompts.decoy_head, *shared[size:], *d], [*shared, *a], [*shared, *b]

    cold_pool = LayeredPool(config, layers, blocks_for(len(target) + steps, size), size)
    forced, cold = greedy_together(model, cold_pool, [target], steps)
    forced_tokens, cold_logits = forced[0], cold[0]  # (steps + 1, vocab)

    need = [blocks_for(len(p) + steps, size) for p in (decoy, first, target)]
    pool = pool_type(config, layers, sum(need) + 2, size, index)

    def admit(prompt: list[int]) -> tuple[list[int], int]:
        hits = pool.match(prompt)
        table = pool.take(prompt, hits, blocks_for(len(prompt) + steps, size) - len(hits))
        return table, len(hits) * size

    def prefill(prompt: list[int], table: list[int], start: int) -> Tensor:
        logits = model.prefill(pool, [prompt], [table], [start])[0]
        pool.offer(prompt, table)
        return logits

    table, start = admit(decoy)
    prefill(decoy, table, start)
    pool.release(table)
    first_table, start = admit(first)
    prefill(first, first_table, start)
    target_table, cached = admit(target)
    warm = [prefill(target, target_table, cached)]
    pool.release(first_table)
    free = pool.num_free_blocks
    if free:  # the filler: every free block taken and written, then given back
        filler_table = pool.allocate(free)
        per = max(1, (config.max_positions - 1) // size)  # blocks one prompt may fill within the model's positions
        tables = [filler_table[i:i + per] for i in range(0, free, per)]
        model.prefill(pool, [[prompts.filler] * (len(t) * size) for t in tables], tables, [0] * len(tables))
        pool.release(filler_table)
    position = len(target)
    for step in range(steps):
        warm.append(model.decode(pool, [forced_tokens[step]], [position], [target_table])[0])
        position += 1
    # B's blocks are not released: the pool ends here (and a pool that freed them too early could not release them).

    warm_logits = torch.stack(warm).float()
    cold_logits = cold_logits.float()
    difference = (warm_logits - cold_logits).abs()
    bound = allowed(cold_logits, atol, rtol)
    excess = difference - bound  # > 0 where an element is beyond its bound
    largest = int(difference.flatten().argmax())
    worst = int(excess.amax(dim=-1).argmax())
    return Compared(cached, len(target), steps + 1, float(difference.flatten()[largest]),
                    float(bound.flatten()[largest]), float(excess.max()), worst)


def trained_prompts(chat: Any, shared_tokens: int = 80) -> Prompts:
    """The scenario's prompts for a trained model, from the repository's real text (llm_models.texts): the shared
    prefix is its first ``shared_tokens`` tokens, the decoy head and the suffixes later stretches of it."""
    from llm_models.texts import PYTHON_REFERENCE

    ids = chat.encode(PYTHON_REFERENCE.read())
    shared = ids[:shared_tokens]
    return Prompts(shared=shared, decoy_head=ids[200:216], suffixes=(ids[300:311], ids[400:417], ids[500:509]),
                   filler=ids[600])
