"""The floor a decode step cannot beat on a given machine: the bytes it must move ÷ sustained read bandwidth.

Bytes per step, from the configuration alone (the formulas are decode_bandwidth.figures', torch-free,
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
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from . import formulas
from .config import DecoderConfig
from .formulas import best_rate, square_matmul_flops

MIN_STREAM_BYTES = 256 * 2**20  # the buffer size when the last-level cache cannot be read
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
    """Every weight element a step reads whole, times its size (decode_bandwidth.formulas.weight_bytes)."""
    return formulas.weight_bytes(config.as_record(), config.bytes_per_element)


def step_bytes(config: DecoderConfig, batch: int, context: int) -> StepBytes:
    """What one decode step at ``context`` attended positions must move (decode_bandwidth.formulas.step_bytes)."""
    needed = formulas.step_bytes(config.as_record(), config.bytes_per_element, batch, context)
    return StepBytes(**{name: value for name, value in needed.items() if name != "total"})


def kv_crossover(config: DecoderConfig) -> float:
    """The B x T at which a step's KV reads equal its weight reads (decode_bandwidth.formulas.kv_crossover)."""
    return formulas.kv_crossover(config.as_record())


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


def stream_buffer_bytes(llc: int | None) -> int:
    """At least 4 x the last-level cache, and never under MIN_STREAM_BYTES."""
    return max(4 * (llc or 0), MIN_STREAM_BYTES)


def read_bandwidth(buffer_bytes: int, passes: int, device: torch.device | str = "cpu") -> dict[str, object]:
    """Sustained read bandwidth, STREAM-style: sum a float32 buffer far larger than any cache, best pass.

    The sum reads every byte once and writes one number, so the time is the read. It runs at the
    thread count in force, which the caller sets to that of the timed steps.
    """
    if passes < 1:
        raise ValueError(f"passes must be at least 1, got {passes}")
    buffer = torch.ones(buffer_bytes // 4, dtype=torch.float32, device=device)
    synchronize = torch.cuda.synchronize if buffer.is_cuda else (lambda: None)
    buffer.sum()  # first touch and warm-up, untimed
    durations = []
    for _ in range(passes):
        synchronize()
        start = time.perf_counter_ns()
        buffer.sum()
        synchronize()
        durations.append(time.perf_counter_ns() - start)
    read = buffer.numel() * buffer.element_size()
    best, bytes_per_s = best_rate(read, durations)
    return {"buffer_bytes": read, "passes": passes, "durations_ns": durations, "best_ns": best, "bytes_per_s": bytes_per_s}


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
