"""Fixtures for this lab's tests: seeded tiny models whose every parameter matters."""

from __future__ import annotations

import torch
from torch import Tensor

from llm_models.llama.kinds import MATRIX_KINDS

from .config import DecoderConfig, preset
from .model import Decoder

TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}  # float32, two layers of width 32: cached vs full, ours vs transformers


def kernel_ranking(*names: str, attention: tuple[str, str]) -> dict[str, dict[str, float]]:
    """Kernel-table timings (kind -> kernel -> ns) in which ``names`` win in that order for every kind, and
    attention's (its "attention" entry: way -> ns per layer) in which the ways of ``attention`` win in that order:
    handed to llama.kernel_table and llama.attention_table (benchmark.main(kernel_ns=...)) in place of the timing,
    so a test fixes the outcome."""
    ranking = {kind: {name: float(rank + 1) for rank, name in enumerate(names)} for kind in MATRIX_KINDS}
    return {**ranking, "attention": {way: float(rank + 1) for rank, way in enumerate(attention)}}


# oneDNN fastest: the compiled layers, which cannot trace it, fall back to the next (in_out); int8pack over int8-c;
# attention by the two products.
ONEDNN_WINS = kernel_ranking("onednn", "in_out", "compiled", "out_in", "int8pack", "int8-c", "int8-compiled",
                             attention=("products", "c"))
# F.linear fastest, eager and compiled alike; the C loop over int8pack; attention by the C loop.
OUT_IN_WINS = kernel_ranking("out_in", "compiled", "onednn", "in_out", "int8-c", "int8pack", "int8-compiled",
                             attention=("c", "products"))


def tiny_model(seed: int = 0, **overrides: object) -> Decoder:
    """The tiny preset with biases and norm parameters moved off GPT-2's zeros and ones.

    GPT-2's init leaves every bias at 0 and every norm at (1, 0), so a model that dropped or swapped
    them would still agree; noise on them makes the parity tests see every parameter.
    """
    model = Decoder(preset("tiny", seed=seed, **overrides))
    generator = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model


def token_ids(config: DecoderConfig, batch: int, length: int, seed: int = 0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (batch, length), generator=generator)
