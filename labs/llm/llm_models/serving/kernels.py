"""Which kernel multiplies each of the served Llama's weight matrices: the fastest on this machine, per matrix kind
and per number of rows, timed once when the model is arranged for serving.

A decode step alone multiplies one row by each matrix (a matrix-vector product: the matrix's bytes decide it); a
batch or a packed prefill multiplies several (the matrix is read once for all of them). Which kernel streams a
matrix fastest depends on the CPU, the BLAS, the shape and the number of rows: on one thread of a 2-core AMD EPYC
(Zen 4) ``addmm`` over an (in, out) copy multiplied one row by the (49152, 576) output head in 4.2 ms where
``F.linear`` over the (out, in) matrix took 9.3 ms, while on an Intel Xeon ``F.linear`` was the faster; with eight
rows oneDNN's packed copy beat both on both machines. So the server times the decode lab's kernels
(``llm_models.kernels.matvec``: ``out_in``, ``in_out``, ``onednn``) over every matrix of each fused kind at one row and
at ``SEVERAL`` rows, and each ``Weight`` keeps a copy only for the kernels chosen.

The choice is a timing, so it differs between machines and runs: ``kernel_table(..., supplied_ns=...)`` takes the
timings from a caller instead (a test fixing which kernel wins), and every kernel is checked against ``F.linear``
for any number of rows, whichever is chosen (test_serving_kernels).

A prefill of more than ``PREFILL_PACKED_ROWS`` rows is the exception: it multiplies by a BLAS kernel whatever the
table chose (``Weight.prefill``), because oneDNN's packed copy keeps state for every number of rows it has
multiplied, and prompts of ever-new lengths would grow the server's memory without end (test_serving_prefill_memory).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from llm_models.kernels import matvec, timing
from llm_models.kernels.choice import fastest
from llm_models.llama.kinds import MATRIX_KINDS

from .kernel_rows import PREFILL_PACKED_ROWS

# The row counts timed: one (a stream alone) and SEVERAL, whose pick serves every call of two rows or more, batches
# and packed prefills alike. NOTE: 8 sits inside the batches the benchmark serves (1 to 32 running requests); a
# kernel's ranking moved little between 4 and 32 rows on the machines tried, while between one row and two it
# flipped. Prefills of more rows than PREFILL_PACKED_ROWS do not follow this table (below).
ONE, SEVERAL = 1, 8
ROWS = (ONE, SEVERAL)
PASSES = 3  # passes per kernel over every matrix of a kind; the best is kept (llm_models.kernels.timing)
CANDIDATES = ("out_in", "in_out", "onednn")  # llm_models.kernels.matvec's kernels that multiply any number of rows
PACK_ROWS = 16  # the batch oneDNN lays out its packed copy for at several rows; any number of rows multiplies it
STATELESS = ("out_in", "in_out")  # the BLAS kernels: a prefill of more than PREFILL_PACKED_ROWS rows takes one


def pack_for_rows(weight: Tensor, bias: Tensor | None) -> timing.Prepared:
    """oneDNN's packed copy laid out for a batch of PACK_ROWS rows (matvec's own is laid out for one row)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS), bias


@dataclass(frozen=True)
class Way:
    """One kernel at one row count: how it copies a matrix, and how it multiplies rows by that copy."""

    kernel: str  # a llm_models.kernels.matvec.KERNELS name
    prepare: Callable[[Tensor, Tensor | None], timing.Prepared]
    multiply: Callable[..., Tensor]  # (x (N, in), *prepared) -> (N, out)


@functools.cache
def onednn_runs() -> bool:
    """Whether this PyTorch packs and multiplies a float32 matrix with oneDNN (asked once: a deliberate cache)."""
    return matvec.onednn_available() is None


def candidates(dtype: torch.dtype, rows: int) -> dict[str, Way]:
    """The kernels that can multiply ``rows`` rows by a ``dtype`` matrix here. oneDNN's packed copy is float32 only."""
    ways = {}
    for name in CANDIDATES:
        if name != "onednn":
            ways[name] = Way(name, matvec.KERNELS[name].prepare, matvec.KERNELS[name].eager)
        elif dtype == torch.float32 and onednn_runs():
            ways[name] = Way(name, matvec.onednn_pack if rows == ONE else pack_for_rows, matvec.onednn)
    return ways


@dataclass
class KernelTable:
    """Per kind and row count, each candidate's ns per matrix and the one chosen (the least; the first on a tie)."""

    dtype: str
    threads: int
    timings: str  # "timed" here, or "supplied" by the caller
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def chosen(self) -> dict[str, dict[int, str]]:
        picks: dict[str, dict[int, str]] = {}
        for row in self.rows:
            picks.setdefault(row["kind"], {})[row["rows"]] = fastest(row["ns"])
        return picks

    def as_record(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "threads": self.threads, "passes": PASSES, "timings": self.timings,
                "rows": self.rows, "chosen": {kind: {str(rows): name for rows, name in picks.items()}
                                              for kind, picks in self.chosen.items()}}


def kernel_table(kinds: Mapping[str, Sequence[Tensor]], supplied_ns: Mapping[str, Mapping[int, Mapping[str, float]]]
                 | None = None, seed: int = 0) -> KernelTable:
    """Every candidate over every matrix of each kind, at one row and at SEVERAL, at the thread count in force
    (``llm_models.kernels.timing.measure``). ``supplied_ns`` (kind -> rows -> kernel -> ns) stands in for the
    timings (a test setting the winner)."""
    dtype = next(iter(kinds.values()))[0].dtype
    table = KernelTable(str(dtype).removeprefix("torch."), torch.get_num_threads(),
                        "timed" if supplied_ns is None else "supplied")

    def ways(dtype: torch.dtype, rows: int) -> dict[str, tuple[timing.Prepare, timing.Multiply]]:
        return {name: (way.prepare, way.multiply) for name, way in candidates(dtype, rows).items()}

    ns = timing.measure(kinds, ways, ROWS, PASSES, seed, supplied_ns)
    for kind, matrices in kinds.items():
        for rows in ROWS:
            table.rows.append({"kind": kind, "rows": rows, "shape_out_in": list(matrices[0].shape),
                               "matrices": len(matrices), "ns": ns[kind][rows]})
    return table


def ranking(one: str, several: str) -> dict[str, dict[int, dict[str, float]]]:
    """Timings that make ``one`` win at one row and ``several`` at several, for every kind: what
    ``kernel_table(supplied_ns=...)`` takes so a test runs each outcome of the choice on any CPU. A winner that cannot
    run here (oneDNN in bfloat16, or without oneDNN) leaves the choice to the runner-up, ``out_in``."""
    def times(winner: str) -> dict[str, float]:
        return {name: 1.0 if name == winner else 2.0 if name == "out_in" else 3.0 for name in CANDIDATES}
    return {kind: {ONE: times(one), SEVERAL: times(several)} for kind in MATRIX_KINDS}


def parse_timings(text: str, where: str = "--kernel-ns") -> dict[str, dict[int, dict[str, float]]]:
    """Kernel timings as JSON (kind -> rows -> kernel -> ns, rows as strings: what ``KernelTable.timings`` gives,
    dumped), checked; a clear error naming ``where`` and the field otherwise."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object of kinds, got {type(data).__name__}")
    found: dict[str, dict[int, dict[str, float]]] = {}
    for kind, counts in data.items():
        if kind not in MATRIX_KINDS or not isinstance(counts, dict):
            raise ValueError(f"{where}: {kind!r} is not one of {list(MATRIX_KINDS)} with an object of row counts")
        for rows, times in counts.items():
            if rows not in {str(count) for count in ROWS} or not isinstance(times, dict):
                raise ValueError(f"{where}: {kind}.{rows}: row counts are {list(map(str, ROWS))}, each an object")
            for name, ns in times.items():
                if name not in CANDIDATES or isinstance(ns, bool) or not isinstance(ns, (int, float)) or not ns > 0:
                    raise ValueError(f"{where}: {kind}.{rows}.{name}: a kernel of {list(CANDIDATES)} with ns > 0, "
                                     f"got {ns!r}")
            found.setdefault(kind, {})[int(rows)] = {name: float(ns) for name, ns in times.items()}
    return found


def timings_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, dict[str, float]]]:
    """kind -> rows -> kernel -> ns of a table's rows (``KernelTable.rows``, or a record's): what
    ``kernel_table(supplied_ns=...)`` takes to choose as that table did."""
    found: dict[str, dict[int, dict[str, float]]] = {}
    for row in rows:
        found.setdefault(row["kind"], {})[row["rows"]] = dict(row["ns"])
    return found


def dump_timings(timings: Mapping[str, Mapping[int, Mapping[str, float]]]) -> str:
    """``timings`` as the JSON ``parse_timings`` reads (sorted keys: the same timings give the same text)."""
    return json.dumps({kind: {str(rows): dict(times) for rows, times in counts.items()}
                       for kind, counts in timings.items()}, sort_keys=True)


class Weight:
    """One (out, in) matrix as the server multiplies it: the kernel chosen for one row, or for several, over that
    kernel's own copy (one copy when both counts chose the same BLAS kernel, none when it is ``out_in``; oneDNN packs
    one copy for one row and another for several). A prefill of more than PREFILL_PACKED_ROWS rows takes a BLAS
    kernel (``prefill``): the several-row one if the table chose one, else the one-row one, else ``out_in`` over the
    matrix itself, which is then kept as well (the one case that holds one more copy: both counts chose oneDNN)."""

    def __init__(self, weight: Tensor, chosen: Mapping[int, str]) -> None:
        self.out_features = weight.shape[0]
        ways = {rows: candidates(weight.dtype, rows)[chosen[rows]] for rows in ROWS}
        copies: dict[tuple[str, Callable[..., Any]], timing.Prepared] = {}
        self.ways: dict[int, tuple[Callable[..., Tensor], timing.Prepared]] = {}
        for rows, way in ways.items():
            key = (way.kernel, way.prepare)
            if key not in copies:
                copies[key] = way.prepare(weight, None)
            self.ways[rows] = (way.multiply, copies[key])
        self.kernels = {rows: way.kernel for rows, way in ways.items()}
        # the kernel of a prefill of more than PREFILL_PACKED_ROWS rows: one that keeps nothing per number of rows
        blas = [rows for rows in (SEVERAL, ONE) if self.kernels[rows] in STATELESS]
        if blas:
            self.prefill_kernel, self.prefill_way = self.kernels[blas[0]], self.ways[blas[0]]
        else:
            out_in = matvec.KERNELS["out_in"]
            self.prefill_kernel, self.prefill_way = out_in.name, (out_in.eager, out_in.prepare(weight, None))

    def __call__(self, x: Tensor) -> Tensor:
        """x (..., in) -> (..., out)."""
        rows = x.reshape(-1, x.shape[-1])  # (N, in)
        multiply, prepared = self.ways[ONE if rows.shape[0] == 1 else SEVERAL]
        return multiply(rows, *prepared).view(*x.shape[:-1], self.out_features)

    def prefill(self, x: Tensor) -> Tensor:
        """x (..., in) -> (..., out) for a prefill: as ``__call__`` up to PREFILL_PACKED_ROWS rows, by
        ``prefill_kernel`` above, so prompts of ever-new lengths build no new oneDNN primitive (NOTE at
        PREFILL_PACKED_ROWS). A decode step calls ``__call__``, untouched."""
        rows = x.reshape(-1, x.shape[-1])  # (N, in)
        if rows.shape[0] <= PREFILL_PACKED_ROWS:
            return self(x)
        multiply, prepared = self.prefill_way
        return multiply(rows, *prepared).view(*x.shape[:-1], self.out_features)
