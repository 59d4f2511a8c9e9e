"""C loops built at run time and called through ctypes: the one builder the labs' hand-written loops share.

The build uses ``CC``, else the first of gcc, cc and g++ (inductor's own builds need g++), ``-march=native`` (the
machine running it is the one it is for), and takes well under a second; it happens once per process and set of
sources, into a temporary folder, and its seconds are kept (the decode lab records them).
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

# -O3 vectorises the inner loops; -fassociative-math (with the two flags it needs) lets a loop keep partial sums
# in vector lanes. Not -ffast-math: linking with it would switch the whole process's float mode to flush
# subnormals to zero.
FLAGS = ("-O3", "-march=native", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-fopenmp",
         "-shared", "-fPIC", "-lm")

# Flags that take the vector instructions the loops test for away again, so that their plain loops are built
# (on x86; elsewhere there is nothing to take away and the loops are plain already).
PLAIN = ("-mno-avx2", "-mno-fma", "-mno-avx512f") if os.uname().machine in ("x86_64", "AMD64") else ()


@dataclass(frozen=True)
class Build:
    library: ctypes.CDLL | None  # the loops, or None when they could not be built
    seconds: float
    reason: str | None  # why they could not be built, in one line

    def require(self, what: str) -> ctypes.CDLL:
        """The loaded loops, or a RuntimeError saying why ``what`` cannot run."""
        if self.library is None:
            raise RuntimeError(f"{what} cannot run: {self.reason}")
        return self.library


@functools.cache
def build(sources: tuple[Path, ...], extra: tuple[str, ...] = ()) -> Build:
    """Compile and load ``sources`` into one library once per process (a deliberate cache: it stays loaded);
    ``extra`` flags follow the others (a test builds a loop's plain path with ``PLAIN``)."""
    started = time.perf_counter()
    names = " and ".join(source.name for source in sources)
    compiler = os.environ.get("CC") or next(filter(None, map(shutil.which, ("gcc", "cc", "g++"))), None)
    if compiler is None:
        return Build(None, 0.0, "no C compiler: set CC, or install gcc")
    with tempfile.TemporaryDirectory(prefix="lab-loops-") as folder:
        library = Path(folder) / "loops.so"
        done = subprocess.run([compiler, *map(str, sources), *FLAGS, *extra, "-o", str(library)], capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            return Build(None, time.perf_counter() - started, f"{compiler} could not build {names}: {first}")
        loaded = ctypes.CDLL(str(library))  # stays mapped once the folder is gone
    return Build(loaded, time.perf_counter() - started, None)
