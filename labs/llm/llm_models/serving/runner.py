"""What the scheduler's loop calls on the model it serves: ``ServedModel``.

Both serving models meet it by their shape (``model.ServingModel``, the random model; ``llama.LlamaServingModel``,
the trained decoder), and so does any stand-in a test builds: the scheduler names no model class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # types only: this module imports neither torch nor a model
    from torch import Tensor

    from .kernels import KernelTable
    from .pool import LayeredPool


class ModelShape(Protocol):
    """What a request is checked against before it is queued."""

    @property
    def max_positions(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...


class ServedModel(Protocol):
    """A decoder over a block pool: packed prefills, one batched decode step, and the two in one pass, each run on the
    scheduler's worker thread (so the loop looks ``prefill``, ``decode`` and ``mixed`` up on the model at every
    call)."""

    @property
    def config(self) -> ModelShape: ...

    @property
    def kernels(self) -> KernelTable | None:
        """The kernel each weight matrix is multiplied by, as timed when the model was arranged (the trained model);
        None where the model's own modules multiply (the random model)."""

    def prefill(self, pool: LayeredPool, prompts: list[list[int]], tables: list[list[int]],
                starts: list[int] | None = None) -> Tensor:
        """Each prompt's keys and values into its table's blocks, from position ``starts[i]`` on (the positions before
        it are cached; None: every position from 0); each prompt's last-position logits, (N, vocab)."""

    def decode(self, pool: LayeredPool, tokens: list[int], positions: list[int], tables: list[list[int]]) -> Tensor:
        """One step for B requests: ``tokens[b]`` at ``positions[b]``, keys and values in ``tables[b]``'s blocks;
        logits (B, vocab)."""

    def mixed(self, pool: LayeredPool, prompts: list[list[int]], tables: list[list[int]], starts: list[int] | None,
              tokens: list[int], positions: list[int], decode_tables: list[list[int]]) -> Tensor:
        """``prefill`` and ``decode`` in one forward pass (chunked prefill's mixed batch): the N prompts'
        last-position logits, then the B decode rows', (N + B, vocab)."""
