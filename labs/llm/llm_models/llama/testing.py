"""What only the tests use with the Llama: seeded random token ids and the trained-weight tests' prompt."""

from __future__ import annotations

import torch
from torch import Tensor

from .tiny import TINY

# The trained-weight tests' conversation, short so the whole suite stays within its budget.
CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def random_ids(batch: int, length: int, seed: int, vocab_size: int = TINY.vocab_size) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, length), generator=generator)
