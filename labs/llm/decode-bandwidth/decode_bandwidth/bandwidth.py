"""The floor a decode step cannot beat on a given machine: the bytes it must move ÷ sustained read bandwidth.

Bytes per step, from the configuration alone (the formulas are decode_bandwidth.traffic's, torch-free,
so the site checks a record with the same code):

- every weight a step multiplies by, read once: each layer's matrices and
  biases and both layer norms, the final norm, and the output head (the tied
  token embedding, read whole by the head);
- the embedding *lookups*: one token row per sequence and one position row.
  The tables are not read whole, so only those rows count;
- the KV cache: at context T (the new token is position T - 1) attention
  reads T keys and T values per layer, head and sequence, and the step
  writes the new token's key and value.

Activations are left out. The largest is the logits, batch x vocabulary x
bytes written once per step; the page computes its size and its share of the
weight bytes from the record's config. The others are vectors of the model's
width or its MLP's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from llm_models.kernels.row_dot import compiled_row_dot

from . import traffic
from .config import DecoderConfig
from .floors import COMPILED_COLUMNS, MATVEC_COLUMNS, STREAMS, best_rate, kernel_bytes, square_matmul_flops

MIN_STREAM_BYTES = 256 * 2**20  # the buffer size when the last-level cache cannot be read
# --quick's buffer: a smoke run proves the floor's code runs, not what memory reads. Four times the last-level cache
# is 1,920 MiB on a large server CPU, and its passes were most of a quick run; a quick record says it is one.
QUICK_STREAM_BYTES = 16 * 2**20
CACHE_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class StepBytes:
    weights: int  # matrices, biases, norms and the output head, each read once
    embedding_rows: int  # B token rows + 1 position row, looked up
    kv_read: int  # 2 x layers x B x T x Hkv x D x bytes
    kv_written: int  # the new token's keys and values
    flops: int  # multiply-adds x 2: every matrix, plus scores and weighted values over T keys

    @property
    def total(self) -> int:
        return self.weights + self.embedding_rows + self.kv_read + self.kv_written

    def as_record(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}


def weight_bytes(config: DecoderConfig) -> int:
    """Every weight element a step reads whole, times its size (decode_bandwidth.traffic.weight_bytes)."""
    return traffic.weight_bytes(config.as_record(), config.bytes_per_element)


def step_bytes(config: DecoderConfig, batch: int, context: int) -> StepBytes:
    """What one decode step at ``context`` attended positions must move (decode_bandwidth.traffic.step_bytes)."""
    needed = traffic.step_bytes(config.as_record(), config.bytes_per_element, batch, context)
    return StepBytes(**{name: value for name, value in needed.items() if name != "total"})


def kv_crossover(config: DecoderConfig) -> float:
    """The B x T at which a step's KV reads equal its weight reads (decode_bandwidth.traffic.kv_crossover)."""
    return traffic.kv_crossover(config.as_record())


def last_level_cache_bytes(folder: Path = CACHE_SYSFS) -> tuple[int | None, str]:
    """The largest cache level's size and where it was read; (None, reason) when it cannot be."""
    best: tuple[int, int] | None = None
    for index in sorted(folder.glob("index*")):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        size = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
        if best is None or level > best[0]:
            best = (level, size)
    if best is not None:
        return best[1], f"sysfs {folder}, level {best[0]}"
    try:
        size = os.sysconf("SC_LEVEL3_CACHE_SIZE")
        if size > 0:
            return size, "os.sysconf('SC_LEVEL3_CACHE_SIZE')"
    except (ValueError, OSError):
        pass
    return None, "unavailable (no sysfs cache entries, no sysconf value)"


def stream_buffer_bytes(llc: int | None, quick: bool = False, least: int | None = None) -> int:
    """At least 4 x the last-level cache, and never under MIN_STREAM_BYTES (QUICK_STREAM_BYTES for a smoke run); or,
    with ``least``, at least that many bytes (a buffer the size of a step's own); a whole number of float32 matrix
    rows for every read kernel's view of it."""
    unit = 4 * STREAMS * MATVEC_COLUMNS
    if least is None:
        least = QUICK_STREAM_BYTES if quick else max(4 * (llc or 0), MIN_STREAM_BYTES)
    return -(-least // unit) * unit


def read_kernels(buffer: torch.Tensor, row_dot: Callable[[torch.Tensor, torch.Tensor, None], torch.Tensor]
                 ) -> dict[str, Callable[[], object]]:
    """Five ways to read a float32 buffer once, each by a different kernel (floors.READ_KERNELS says how).
    The floor takes the fastest: a timed step whose kernels stream faster than a plain sum would otherwise
    beat its own floor. The last is ours-compiled's own one-row kernel, compiled here for this shape."""
    half = buffer.numel() // 2
    first, second = buffer[:half], buffer[half:2 * half]
    matrix = buffer[: buffer.numel() // MATVEC_COLUMNS * MATVEC_COLUMNS].view(-1, MATVEC_COLUMNS)
    vector = torch.ones(MATVEC_COLUMNS, dtype=buffer.dtype, device=buffer.device)
    streams = buffer[: buffer.numel() // STREAMS * STREAMS].view(STREAMS, -1)
    rows = buffer[: buffer.numel() // COMPILED_COLUMNS * COMPILED_COLUMNS].view(-1, COMPILED_COLUMNS)
    row = torch.ones(1, COMPILED_COLUMNS, dtype=buffer.dtype, device=buffer.device)
    return {
        "sum": lambda: buffer.sum(),
        "dot": lambda: torch.dot(first, second),
        "streams": lambda: streams.sum(dim=0),
        "matvec": lambda: torch.mv(matrix, vector),
        "compiled": lambda: row_dot(row, rows, None),
    }


class ReadProbe:
    """The read kernels over one buffer far larger than any cache, kept for the whole run: the floor is read
    before and after the timed steps and again beside every timed group, and a buffer of four times the
    last-level cache is too large to allocate and first-touch each time.

    Each kernel reads every byte once (the multi-stream sum also writes a sixteenth of them, counted in its
    bytes); it runs at the thread count in force, which the caller sets to that of the timed steps.
    """

    def __init__(self, buffer_bytes: int, device: torch.device | str = "cpu") -> None:
        self.buffer = torch.ones(buffer_bytes // 4, dtype=torch.float32, device=device)
        self.synchronize = torch.cuda.synchronize if self.buffer.is_cuda else (lambda: None)
        self.kernels = read_kernels(self.buffer, compiled_row_dot())
        self.warmed: set[int] = set()  # thread counts the kernels have run at (the compiled one builds per count)
        self.read = self.buffer.numel() * self.buffer.element_size()

    def durations(self, passes: int) -> dict[str, list[int]]:
        """``passes`` timed passes of each kernel, taking turns so none always runs on a warmer machine."""
        if passes < 1:
            raise ValueError(f"passes must be at least 1, got {passes}")
        if torch.get_num_threads() not in self.warmed:
            for kernel in self.kernels.values():
                kernel()  # first touch and warm-up, untimed
            self.warmed.add(torch.get_num_threads())
        durations: dict[str, list[int]] = {name: [] for name in self.kernels}
        for _ in range(passes):
            for name, kernel in self.kernels.items():
                self.synchronize()
                start = time.perf_counter_ns()
                kernel()
                self.synchronize()
                durations[name].append(time.perf_counter_ns() - start)
        return durations

    def one(self, kernel: str) -> int:
        """One timed pass of one read kernel, already warmed at this thread count by ``durations``: the floor read
        at the start of each paired round, the fastest kernel of the group's own passes."""
        if torch.get_num_threads() not in self.warmed:
            raise RuntimeError(f"read kernel {kernel!r} at {torch.get_num_threads()} thread(s) before its warm-up pass")
        run = self.kernels[kernel]
        self.synchronize()
        start = time.perf_counter_ns()
        run()
        self.synchronize()
        return time.perf_counter_ns() - start

    def passes(self, passes: int) -> dict[str, object]:
        """Sustained read bandwidth, STREAM-style: the passes only, with the bytes each kernel moves;
        ``figures.derive`` finds each kernel's best and the fastest kernel."""
        return {"buffer_bytes": self.read, "passes": passes,
                "kernels": {name: {"bytes": kernel_bytes(name, self.read), "durations_ns": times}
                            for name, times in self.durations(passes).items()}}


def read_bandwidth(buffer_bytes: int, passes: int, device: torch.device | str = "cpu") -> dict[str, object]:
    """``passes`` passes of each read kernel over a fresh buffer of ``buffer_bytes`` (ReadProbe)."""
    return ReadProbe(buffer_bytes, device).passes(passes)


def matmul_throughput(dtype: torch.dtype, passes: int, device: torch.device | str = "cpu",
                      size: int = 1024) -> dict[str, object]:
    """Sustained arithmetic: a square matmul (2 x n^3 flops), best pass: the other roof of the roofline."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    synchronize = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    a @ b
    durations = []
    for _ in range(passes):
        synchronize()
        start = time.perf_counter_ns()
        a @ b
        synchronize()
        durations.append(time.perf_counter_ns() - start)
    flops = square_matmul_flops(size)
    best, flops_per_s = best_rate(flops, durations)
    return {"size": size, "flops": flops, "passes": passes, "durations_ns": durations, "best_ns": best,
            "flops_per_s": flops_per_s}
