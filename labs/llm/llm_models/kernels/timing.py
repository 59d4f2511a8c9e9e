"""How a kernel is timed: the one way for every table that chooses one (the decode lab's fast twin, the server's).

A kernel is timed over every matrix of one kind in a model, each pass multiplying each matrix once, so the weights
come from memory as they do in a step (a single matrix timed over and over would sit in the cache and flatter
whichever kernel reads it). The best of a few passes is kept: a pass can only be slowed by the machine, never
sped up. ``measure`` gives, per kind and number of rows, each kernel's ns per matrix; each table formats that as
its own record and takes the least (``llm_models.kernels.choice.fastest``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

Prepared = tuple[Tensor | None, ...]  # a kernel's own copy of one matrix (and its bias)
Prepare = Callable[[Tensor, Tensor | None], Prepared]  # (out, in) weight and bias -> the kernel's copy
Multiply = Callable[..., Tensor]  # (x (N, in), *prepared) -> (N, out)
Timings = dict[str, dict[int, dict[str, float]]]  # kind -> rows -> kernel -> ns per matrix


def best_pass_ns(work: Callable[[], object], passes: int) -> int:
    work()  # warm: first calls compile or pack
    best = None
    for _ in range(passes):
        start = time.perf_counter_ns()
        work()
        elapsed = time.perf_counter_ns() - start
        best = elapsed if best is None else min(best, elapsed)
    return int(best)  # type: ignore[arg-type]


def ns_per_matrix(multiply: Multiply, prepared: Sequence[Prepared], x: Tensor, passes: int) -> float:
    """ns per matrix of ``multiply(x, *copy)`` over every prepared copy of a kind's matrices, the best of ``passes``
    passes: each pass multiplies every matrix once."""
    def work() -> None:
        for tensors in prepared:
            multiply(x, *tensors)

    return best_pass_ns(work, passes) / len(prepared)


def measure(kinds: Mapping[str, Sequence[Tensor]], ways: Callable[[torch.dtype, int], Mapping[str, tuple[Prepare, Multiply]]],
            rows: Sequence[int], passes: int, seed: int = 0,
            supplied_ns: Mapping[str, Mapping[int, Mapping[str, float]]] | None = None) -> Timings:
    """Per kind and row count, the ns per matrix of each of ``ways(dtype, rows)`` (kernel -> how it copies a matrix
    and multiplies rows by the copy) over every (out, in) matrix of the kind, the best of ``passes`` passes, each
    copy made only for its timing. ``supplied_ns`` (kind -> rows -> kernel -> ns) stands in for the timing, so a
    test fixes which kernel wins on any CPU; it must give every kernel that runs here."""
    generator = torch.Generator().manual_seed(seed)
    found: Timings = {}
    for kind, matrices in kinds.items():
        dtype, inner = matrices[0].dtype, matrices[0].shape[1]
        for count in rows:
            candidates = ways(dtype, count)
            if supplied_ns is not None:
                given = supplied_ns.get(kind, {}).get(count, {})
                missing = [name for name in candidates if name not in given]
                if missing:
                    raise ValueError(f"the supplied kernel timings give no ns for {missing} at kind {kind!r}, "
                                     f"{count} row(s); every kernel that runs here needs one")
                found.setdefault(kind, {})[count] = {name: float(given[name]) for name in candidates}
                continue
            x = torch.randn(count, inner, generator=generator).to(dtype)
            ns = {}
            for name, (prepare, multiply) in candidates.items():
                prepared = [prepare(matrix, None) for matrix in matrices]
                with torch.inference_mode():
                    ns[name] = ns_per_matrix(multiply, prepared, x, passes)
                del prepared
            found.setdefault(kind, {})[count] = ns
    return found
