"""The int8 weight-only product in C (``int8_rows.c``), built at run time and called through ctypes.

Why a hand-written loop: at batch 1 an int8 weight-only step is as fast as the loop that widens each code to
float32 while it streams. The pinned PyTorch has two such products on a CPU, ``torch._weight_int8pack_mm`` and
the loop inductor generates for ``(x * codes.float()).sum(-1) * scale``; on an AVX2 CPU both stream well under a
gigabyte per second (the kernel table measures them beside this one), slower than the float32 matrix they stand
in for. Twenty lines of C that the compiler vectorises read several times faster.

The build uses ``CC``, else the first of gcc, cc and g++ (inductor's own builds need g++), ``-march=native`` (the machine
running it is the one it is for), and takes well under a second; it happens once per process, into a temporary
folder, and its seconds are recorded.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("int8_rows.c")
# -O3 vectorises the inner loop; -fassociative-math (with the two flags it needs) lets that loop keep partial sums
# in vector lanes. Not -ffast-math: linking with it would switch the whole process's float mode to flush
# subnormals to zero.
FLAGS = ("-O3", "-march=native", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-fopenmp",
         "-shared", "-fPIC")


@dataclass(frozen=True)
class Build:
    function: ctypes._CFuncPtr | None  # int8_rows, or None when it could not be built
    seconds: float
    reason: str | None  # why it could not be built, in one line


@functools.cache
def build() -> Build:
    """Compile and load ``int8_rows.c`` once per process (a deliberate cache: the library stays loaded)."""
    started = time.perf_counter()
    compiler = os.environ.get("CC") or next(filter(None, map(shutil.which, ("gcc", "cc", "g++"))), None)
    if compiler is None:
        return Build(None, 0.0, "no C compiler: set CC, or install gcc")
    with tempfile.TemporaryDirectory(prefix="int8-rows-") as folder:
        library = Path(folder) / "int8_rows.so"
        done = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(library)], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            return Build(None, time.perf_counter() - started, f"{compiler} could not build {SOURCE.name}: {first}")
        loaded = ctypes.CDLL(str(library))  # stays mapped once the folder is gone
    function = loaded.int8_rows
    function.restype = None
    function.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long, ctypes.c_long, ctypes.c_int]
    return Build(function, time.perf_counter() - started, None)


def unavailable() -> str | None:
    """None, or why the C loop cannot run here."""
    return build().reason


def int8_rows(x: Tensor, codes: Tensor, scale: Tensor, bias: Tensor | None) -> Tensor:
    """x (1, in) float32 times int8 ``codes`` (out, in) with row ``scale`` (out,): (1, out) float32."""
    rows, cols = codes.shape
    if x.dtype != torch.float32 or x.numel() != cols or codes.dtype != torch.int8 or scale.shape != (rows,):
        raise ValueError(f"int8_rows multiplies one float32 row of {cols} by int8 codes ({rows}, {cols}) with "
                         f"{rows} scales, got x {tuple(x.shape)} {x.dtype}, codes {codes.dtype}, "
                         f"scale {tuple(scale.shape)}")
    function = build().function
    if function is None:
        raise RuntimeError(f"int8_rows cannot run: {build().reason}")
    x = x.contiguous()
    out = torch.empty(1, rows)
    function(x.data_ptr(), codes.data_ptr(), scale.data_ptr(), out.data_ptr(), rows, cols, torch.get_num_threads())
    return out if bias is None else out + bias
