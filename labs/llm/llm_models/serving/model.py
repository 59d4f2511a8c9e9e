"""A small stack of the first lab's decoder blocks, decoding many requests of different lengths at once.

Layer ``i`` is ``llm_models.toy.model.DecoderBlock`` seeded ``seed + i`` (its weights,
not a copy of its code); the token and position tables come from layer 0
and the final norm and output head from the last layer, so a one-layer
stack is exactly the first lab's model. Four paths share those weights:

* ``reference_logits``: the full prefix, no cache at all (the oracle);
* ``prefill``: one new request's prompt, keys and values written into its blocks;
* ``decode``: one new token for each of B requests, each at its own position,
  attending over its own blocks through its block table, read where they lie
  (``PagedRows``, ``llm_models.paged``);
* ``mixed``: a prefill (chunks of prompts) and a decode step in one forward
  pass (``MixedPass``): the weight products run once over the prompts' tokens
  and the decode rows together, each attends as it would alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from llm_models import paged
from llm_models.attention import causal_attention
from llm_models.toy.config import ModelConfig
from llm_models.toy.model import DecoderBlock

from .pool import LayeredPool
from .sizes import blocks_for


class PacksPrompts:
    """What both serving models (this one and ``llm_models.serving.llama``'s) share: how a prefill packs its prompts,
    and a prefill and a decode step run as one pass (``mixed``) over each model's ``_packed_forward``."""

    def packing(self, pool: LayeredPool, prompts: list[list[int]], tables: list[list[int]],
                check_ids: Callable[[list[int]], None], starts: list[int] | None) -> PackedPrompts:
        """The prefill's packed prompts (a method: the prefix lab's broken variant restarts their positions)."""
        return PackedPrompts(pool, prompts, tables, check_ids, starts)

    def _packed_forward(self, packed: PackedPrompts | MixedPass) -> Tensor:
        raise NotImplementedError  # each model's own layers

    @torch.inference_mode()
    def mixed(self, pool: LayeredPool, prompts: list[list[int]], tables: list[list[int]], starts: list[int] | None,
              tokens: list[int], positions: list[int], decode_tables: list[list[int]]) -> Tensor:
        """``prefill(pool, prompts, tables, starts)`` and ``decode(pool, tokens, positions, decode_tables)`` in one
        forward pass (Sarathi-Serve's mixed batch): (N + B, vocab), the N prompts' last-position logits, then the B
        decode rows'. Each weight matrix is read once for both, so the decode rows ride on a prefill chunk for
        little more than its own cost; each row attends as it would alone (``MixedPass``)."""
        check_ids = self.check_ids  # type: ignore[attr-defined]  # both models have it
        check_ids(tokens)
        return self._packed_forward(MixedPass(self.packing(pool, prompts, tables, check_ids, starts),
                                              PagedRows(pool, tokens, positions, decode_tables), tokens))


class ServingModel(PacksPrompts):
    kernels = None  # its layers' own nn.Linear modules multiply; the trained model times a kernel table (KernelTable)

    def __init__(self, config: ModelConfig, layers: int) -> None:
        if layers < 1:
            raise ValueError(f"layers must be at least 1, got {layers}")
        self.config, self.layers = config, layers
        self.blocks = [DecoderBlock(replace(config, seed=config.seed + i)) for i in range(layers)]

    def _embed(self, ids: Tensor, positions: Tensor) -> Tensor:
        first = self.blocks[0]
        return first.token(ids) + first.position(positions)  # (B, T, C)

    def _head(self, x: Tensor) -> Tensor:
        last = self.blocks[-1]
        return last.head(last.norm_final(x))  # (B, T, vocab)

    @staticmethod
    def _project(block: DecoderBlock, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # the block's own fused projection and head split: q (B, H, T, D), k and v (B, Hkv, T, D)
        return block._split_heads(block.qkv(block.norm_attention(x)))

    @staticmethod
    def _finish(block: DecoderBlock, x: Tensor, attended: Tensor) -> Tensor:
        batch, length, width = x.shape
        x = x + block.out(attended.transpose(1, 2).reshape(batch, length, width))
        return x + block.ffn(block.norm_ffn(x))


    def check_ids(self, ids: list[int]) -> None:
        vocab = self.config.vocab_size
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise ValueError(f"token ids must lie in [0, {vocab}), got {bad[:5]}")

    @torch.inference_mode()
    def reference_logits(self, ids: list[int]) -> Tensor:
        """Last-position logits (vocab,) of the whole prefix, recomputed without any cache."""
        self.check_ids(ids)
        tokens = torch.tensor([ids])
        x = self._embed(tokens, torch.arange(len(ids)))
        for block in self.blocks:
            q, k, v = self._project(block, x)
            x = self._finish(block, x, causal_attention(q, k, v, 0))
        return self._head(x)[0, -1]

    @torch.inference_mode()
    def prefill(self, pool: LayeredPool, prompts: list[list[int]], tables: list[list[int]],
                starts: list[int] | None = None) -> Tensor:
        """Each prompt's keys and values into its table's blocks; each one's last-position logits (N, vocab).
        The prompts are packed into one sequence for the weight products (``PackedPrompts``); each attends over
        its own keys only. ``starts``: positions of each prompt already in its blocks (prefix caching), not
        computed again."""
        return self._packed_forward(self.packing(pool, prompts, tables, self.check_ids, starts))

    def _packed_forward(self, packed: PackedPrompts | MixedPass) -> Tensor:
        x = self._embed(packed.ids, packed.positions)  # (1, sum T, C)
        for layer, block in enumerate(self.blocks):
            q, k, v = self._project(block, x)
            x = self._finish(block, x, packed.attend(layer, q, k, v))
        return self._head(x)[0, packed.last]  # (N, vocab)

    # --8<-- [start:decode]
    @torch.inference_mode()
    def decode(self, pool: LayeredPool, tokens: list[int], positions: list[int],
               tables: list[list[int]]) -> Tensor:
        """One step for B requests: token b sits at position b, keys in tables[b]; logits (B, vocab)."""
        self.check_ids(tokens)
        rows = PagedRows(pool, tokens, positions, tables)  # each row's write slot, its blocks and its mask
        x = self._embed(torch.tensor(tokens)[:, None], rows.position[:, None])  # (B, 1, C)
        for layer, block in enumerate(self.blocks):
            q, k, v = self._project(block, x)  # q (B, H, 1, D), k and v (B, Hkv, 1, D)
            x = self._finish(block, x, rows.attend(layer, q, k, v))
        return self._head(x)[:, -1]
    # --8<-- [end:decode]


class PromptSlots:
    """Where a new request's prompt positions ``start`` .. T-1 live in its blocks: ``write`` stores a layer's keys and
    values there, ``cached`` reads back positions 0 .. start-1, which an earlier request computed (both models'
    prefill; ``start`` > 0 only with prefix caching, ``llm_models.serving.prefix``)."""

    def __init__(self, pool: LayeredPool, length: int, table: list[int], start: int = 0) -> None:
        if blocks_for(length, pool.block_size) > len(table):
            raise ValueError(f"a prompt of {length} positions needs {blocks_for(length, pool.block_size)} "
                             f"blocks of {pool.block_size}, the table has {len(table)}")
        if not 0 <= start < length:
            raise ValueError(f"a prompt of {length} positions can start computing at 0 .. {length - 1}, got {start}")
        self.pool, self.start = pool, start
        every = torch.arange(length)  # (T,): block and slot of each position, split at ``start`` below
        blocks, slots = torch.tensor(table)[every // pool.block_size], every % pool.block_size
        self.positions = every[start:]  # (T - start,): the positions this prefill computes
        self.blocks, self.slots = blocks[start:], slots[start:]
        self.cached_blocks, self.cached_slots = blocks[:start], slots[:start]  # (start,): the positions found cached

    def write(self, layer: int, k: Tensor, v: Tensor) -> None:
        """k and v (1, Hkv, T - start, D) into their slots."""
        self.pool.layer_keys(layer)[self.blocks, :, self.slots] = k[0].transpose(0, 1)  # (T - start, Hkv, D)
        self.pool.layer_values(layer)[self.blocks, :, self.slots] = v[0].transpose(0, 1)

    def cached(self, layer: int) -> tuple[Tensor, Tensor]:
        """Keys and values of positions 0 .. start-1, each (1, Hkv, start, D), read from the pool."""
        keys = self.pool.layer_keys(layer)[self.cached_blocks, :, self.cached_slots]  # (start, Hkv, D)
        values = self.pool.layer_values(layer)[self.cached_blocks, :, self.cached_slots]
        return keys.transpose(0, 1)[None], values.transpose(0, 1)[None]


class PackedPrompts:
    """N new prompts as one sequence of their uncomputed tokens (both models' prefill; vLLM's batched prefill): the
    weight products run once over every token, while ``attend`` stores each prompt's keys and values in its own
    blocks and lets each prompt's queries see its own keys only. ``starts[i]`` positions of prompt i were found
    cached (prefix caching): its tokens from there on are computed, at their own positions, over the cached keys."""

    def __init__(self, pool: LayeredPool, prompts: list[list[int]], tables: list[list[int]],
                 check_ids: Callable[[list[int]], None], starts: list[int] | None = None) -> None:
        starts = [0] * len(prompts) if starts is None else starts
        if not len(prompts) == len(tables) == len(starts) > 0:
            raise ValueError(f"need one table and one start per prompt, got {len(prompts)} prompts, "
                             f"{len(tables)} tables and {len(starts)} starts")
        for ids in prompts:
            check_ids(ids)
        self.slots = [PromptSlots(pool, len(ids), table, start) for ids, table, start in zip(prompts, tables, starts)]
        ends = torch.tensor([len(ids) - start for ids, start in zip(prompts, starts)]).cumsum(0)
        self.bounds = list(zip([0, *ends[:-1].tolist()], ends.tolist()))  # each prompt's slice of the sequence
        self.last = ends - 1  # (N,): each prompt's last token in the sequence
        self.ids = torch.tensor([[i for ids, start in zip(prompts, starts) for i in ids[start:]]])  # (1, sum T - start)
        self.positions = torch.cat([slot.positions for slot in self.slots])  # (sum T - start,): each from its start

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q (1, H, sum T, D), k and v (1, Hkv, sum T, D) -> (1, H, sum T, D): each prompt causal over its own."""
        attended = []
        for slot, (start, end) in zip(self.slots, self.bounds):
            own_k, own_v = k[:, :, start:end], v[:, :, start:end]
            slot.write(layer, own_k, own_v)
            if slot.start:  # its first positions were cached: their keys come from the pool
                cached_k, cached_v = slot.cached(layer)
                own_k, own_v = torch.cat([cached_k, own_k], dim=2), torch.cat([cached_v, own_v], dim=2)
            attended.append(block_aligned_attention(q[:, :, start:end], own_k, own_v, slot.start, slot.pool.block_size))
        return torch.cat(attended, dim=2)


class MixedPass:
    """A packed prefill and a decode step as one sequence (``PacksPrompts.mixed``): the prompts' uncomputed tokens,
    then one token per decode row, through every weight product together. Attention splits them again: the prompts
    attend as ``PackedPrompts`` does, each decode row as ``PagedRows`` does (over its own blocks, read where they
    lie), so every row gets the keys it would alone."""

    def __init__(self, packed: PackedPrompts, rows: PagedRows, tokens: list[int]) -> None:
        self.packed, self.rows = packed, rows
        self.prompt_rows = packed.ids.shape[1]  # S: the prompts' tokens come first
        self.ids = torch.cat([packed.ids, torch.tensor([tokens])], dim=1)  # (1, S + B)
        self.positions = torch.cat([packed.positions, rows.position])  # (S + B,): each row at its own position
        self.last = torch.cat([packed.last, torch.arange(self.prompt_rows, self.prompt_rows + len(tokens))])

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q (1, H, S + B, D), k and v (1, Hkv, S + B, D) -> (1, H, S + B, D)."""
        s = self.prompt_rows
        prompts = self.packed.attend(layer, q[:, :, :s], k[:, :, :s], v[:, :, :s])  # (1, H, S, D)

        def as_rows(x: Tensor) -> Tensor:  # (1, heads, B, D) -> (B, heads, 1, D): one row per request
            return x[0, :, s:].transpose(0, 1)[:, :, None]

        rows = self.rows.attend(layer, as_rows(q), as_rows(k), as_rows(v))  # (B, H, 1, D)
        return torch.cat([prompts, rows[:, :, 0].transpose(0, 1)[None]], dim=2)


def block_aligned_attention(q: Tensor, k: Tensor, v: Tensor, offset: int, block_size: int) -> Tensor:
    """``causal_attention`` of q (1, H, T, D) at positions offset.. over k, v (1, Hkv, offset + T, D), one call per
    block of the pool: each call takes the queries of positions [b * block_size, (b + 1) * block_size) and the keys
    up to its last. NOTE: the result for a row depends on which rows are computed with it (the fused kernel cuts
    queries into tiles and a lone query takes the one-query path; in bfloat16 that moves logits and can change a
    greedy token). A prefix-cache hit always starts on a block boundary, so cutting at the boundaries gives the rows
    after a hit exactly the calls a cold prefill of the whole prompt gives them: a hit changes no bit."""
    if offset % block_size:
        raise ValueError(f"a prefill starts on a block boundary, got position {offset} with blocks of {block_size}")
    rows = q.shape[-2]
    if rows <= block_size:
        return causal_attention(q, k, v, offset)
    return torch.cat([causal_attention(q[:, :, c:c + block_size], k[:, :, :offset + c + block_size],
                                       v[:, :, :offset + c + block_size], offset + c)
                      for c in range(0, rows, block_size)], dim=2)  # (1, H, T, D)


class PagedRows:
    """One decode step's bookkeeping for B requests at their own positions (both models' decode): each row's
    new key and value go into its own slot, and its query attends over its own blocks only, read where they lie
    through its block table (``llm_models.paged.in_place``), or, where no C compiler is found, gathered into one
    padded tensor and masked (``llm_models.paged.gathered``, the reference both are tested against)."""

    def __init__(self, pool: LayeredPool, tokens: list[int], positions: list[int], tables: list[list[int]]) -> None:
        if not len(tokens) == len(positions) == len(tables) > 0:
            raise ValueError(f"need one token, position and table per request, got "
                             f"{len(tokens)}, {len(positions)} and {len(tables)}")
        size = pool.block_size
        needed = [blocks_for(p + 1, size) for p in positions]  # blocks that hold positions 0..p
        for b, (count, table) in enumerate(zip(needed, tables)):
            if count > len(table):
                raise ValueError(f"request {b} at position {positions[b]} needs {count} blocks, has {len(table)}")
        self.pool, self.batch, self.width = pool, len(tokens), max(needed)
        self.position = torch.tensor(positions)  # (B,)
        self.lengths = self.position + 1  # (B,): each row reads its positions 0 .. p
        # (B, width): each request's block table, padded with its own first block, which no row reads past its length
        self.index = torch.tensor([table[:count] + [table[0]] * (self.width - count)
                                   for table, count in zip(tables, needed)])
        self.write_block = self.index[torch.arange(self.batch), self.position // size]  # (B,)
        self.write_slot = self.position % size
        self.way = "gathered" if paged.unavailable() else "in place"
        # NOTE: the tables are checked and laid out once here: every layer of the step reads the same ones
        self.step = None if self.way == "gathered" else paged.step_tables(self.index, self.lengths, pool.num_blocks,
                                                                          size)

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Store k and v (B, Hkv, 1, D) in each row's slot, then q (B, H, 1, D) over each row's keys."""
        keys, values = self.pool.layer_keys(layer), self.pool.layer_values(layer)
        keys[self.write_block, :, self.write_slot] = k[:, :, 0]  # (B, Hkv, D): each row into its own slot
        values[self.write_block, :, self.write_slot] = v[:, :, 0]
        if self.step is None:
            return paged.gathered(q, keys, values, self.index, self.lengths)  # (B, H, 1, D)
        return paged.in_place_over(q, keys, values, self.step)


def greedy_together(model: ServingModel, pool: LayeredPool, batch: list[list[int]], steps: int,
                    forced: list[list[int]] | None = None) -> tuple[list[list[int]], list[Tensor]]:
    """Greedy decoding of every prompt together, then their blocks released: (tokens per request, logits per
    request (steps + 1, vocab)). Run with one prompt, it is that request alone: the equivalence the scheduler
    relies on compares the two. With ``forced`` (steps + 1 tokens per request), each step is fed those tokens
    instead of its own choices (teacher forcing), so two runs are compared on the same inputs; the tokens
    returned are still the argmax of each step's logits."""
    if forced is not None and [len(f) for f in forced] != [steps + 1] * len(batch):
        raise ValueError(f"forced needs {steps + 1} tokens for each of {len(batch)} requests, got "
                         f"{[len(f) for f in forced]}")
    tables = [pool.allocate(blocks_for(len(p) + steps, pool.block_size)) for p in batch]
    logits = [[row] for row in model.prefill(pool, batch, tables)]  # every prompt in one packed prefill
    tokens = [[int(row[0].argmax())] for row in logits]
    fed = tokens if forced is None else forced
    positions = [len(p) for p in batch]
    for step_index in range(steps):
        step = model.decode(pool, [f[step_index] for f in fed], positions, tables)
        for b in range(len(batch)):
            logits[b].append(step[b])
            tokens[b].append(int(step[b].argmax()))
        positions = [p + 1 for p in positions]
    for table in tables:
        pool.release(table)
    return tokens, [torch.stack(row) for row in logits]
