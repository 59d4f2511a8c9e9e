"""Several prompts in one row: packed with a block-diagonal mask and positions restarting, or padded to the
longest.

Packing puts the prompts end to end (FlashAttention's varlen batches, transformers' flattening collator):
no position is computed for nothing, and the mask built from each slot's sequence id keeps every prompt to
its own tokens while its positions restart at 0. Padding lays them out as a (prompts, longest) batch: every
row computes the longest prompt's length; right padding needs no mask of its own, since a real token never
looks ahead to the padding after it. Both must give every prompt exactly the logits it gets alone.

The packed row's attention here is dense: one (N, N) score matrix with the off-diagonal blocks masked out, so
it computes N^2 scores where varlen kernels compute the sum of each prompt's square; the layers' matrix
products, which dominate at these lengths, see N tokens either way.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from llm_models.llama.model import LlamaDecoder

from .config import Policy
from .decoder import forward, new_cache
from .rules import packed_positions, packed_sequences


def check_prompts(prompts: Sequence[Sequence[int]]) -> None:
    if not prompts or any(len(prompt) < 1 for prompt in prompts):
        raise ValueError(f"packing needs at least one prompt of at least one token, got lengths "
                         f"{[len(prompt) for prompt in prompts]}")


def pack(prompts: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor, Tensor]:
    """(1, N) ids, positions restarting at 0 for each prompt, and each token's sequence id."""
    check_prompts(prompts)
    lengths = [len(prompt) for prompt in prompts]
    ids = torch.tensor([[token for prompt in prompts for token in prompt]])
    return ids, torch.tensor([packed_positions(lengths)]), torch.tensor([packed_sequences(lengths)])


def unpack(logits: Tensor, lengths: Sequence[int]) -> list[Tensor]:
    """The packed row's logits (1, N, V) cut back into each prompt's (T_i, V)."""
    return list(logits[0].split(list(lengths)))


def packed_logits(model: LlamaDecoder, prompts: Sequence[Sequence[int]]) -> list[Tensor]:
    """Every prompt's logits from one packed row through the full cache's metadata mask."""
    ids, positions, sequences = pack(prompts)
    logits = forward(model, ids, new_cache(model, Policy("full")), positions, sequences)
    return unpack(logits, [len(prompt) for prompt in prompts])


def padded_logits(model: LlamaDecoder, prompts: Sequence[Sequence[int]], pad_id: int) -> list[Tensor]:
    """Every prompt's logits from a right-padded (prompts, longest) batch through the model's own forward."""
    check_prompts(prompts)
    longest = max(len(prompt) for prompt in prompts)
    ids = torch.tensor([list(prompt) + [pad_id] * (longest - len(prompt)) for prompt in prompts])
    logits = model(ids)  # (P, longest, V): causal, so padding after a prompt never reaches it
    return [row[:len(prompt)] for row, prompt in zip(logits, prompts)]


def alone_logits(model: LlamaDecoder, prompts: Sequence[Sequence[int]]) -> list[Tensor]:
    """Every prompt's logits from a pass of its own: the reference."""
    check_prompts(prompts)
    return [model(torch.tensor([list(prompt)]))[0] for prompt in prompts]

