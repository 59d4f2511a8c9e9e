"""C loops built at run time and called through ctypes: the one builder the labs' hand-written loops share.

The build uses ``CC``, else the first of gcc, cc and g++ (inductor's own builds need g++), ``-march=native`` (the
machine running it is the one it is for), and takes about a second and a half of a core; it happens once per process
and set of sources, and its seconds are kept (the decode lab records them). The library is kept in a cache folder
(``<repository>/.cache/native``, or ``$LAB_NATIVE_CACHE``; ``off`` builds afresh every time) under a key of
everything that decides its bytes: the compiler and its version, the flags, this CPU, and every C file beside the
sources (the headers they include live there). Every trained server a benchmark starts then loads the loops instead
of compiling them again; a cached file that does not load is rebuilt. Where the CPU cannot be named (no
/proc/cpuinfo: not Linux) nothing is cached, since a folder shared between two machines could hand one the other's
-march=native build.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "LAB_NATIVE_CACHE"  # a folder for the built libraries, or "off"; else <repository>/.cache/native
REPOSITORY = Path(__file__).resolve().parents[3]  # this file is <repository>/labs/llm/llm_models/native.py

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


def cache_folder() -> Path | None:
    """Where built libraries are kept: $LAB_NATIVE_CACHE, None where it says off, else <repository>/.cache/native."""
    value = os.environ.get(CACHE_ENV, "").strip()
    if value.lower() == "off":
        return None
    return Path(value) if value else REPOSITORY / ".cache" / "native"


def cpu_identity() -> str | None:
    """What -march=native builds for: the machine, and the first processor's model name and flags as Linux names
    them; None where it does not (no /proc/cpuinfo, or no flags in it)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return None
    wanted = [line for line in lines if line.startswith(("model name", "flags", "Features", "CPU part"))]
    if not any(line.startswith(("flags", "Features")) for line in wanted):
        return None
    return "\n".join([platform.machine(), *dict.fromkeys(wanted)])


def build_key(compiler: str, sources: tuple[Path, ...], flags: tuple[str, ...]) -> str | None:
    """A digest of everything that decides the library's bytes (the module's docstring lists them), or None where
    this CPU cannot be named (nothing is cached then)."""
    cpu = cpu_identity()
    if cpu is None:
        return None
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    digest = hashlib.sha256("\0".join([compiler, version, *flags, cpu]).encode())
    for folder in sorted({source.parent for source in sources}):
        for path in sorted([*folder.glob("*.c"), *folder.glob("*.h")]):
            digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    digest.update("\0".join(source.name for source in sources).encode())
    return digest.hexdigest()[:32]


def load_cached(path: Path) -> ctypes.CDLL | None:
    """The cached library at ``path``, or None where there is none or it does not load (a damaged file, or one
    another compiler's runtime cannot take): it is then built again and replaced. Files are only ever renamed into
    place whole (``build``), so a half-written one is never found here."""
    if not path.is_file():
        return None
    try:
        return ctypes.CDLL(str(path))
    except OSError:
        return None


@functools.cache
def build(sources: tuple[Path, ...], extra: tuple[str, ...] = ()) -> Build:
    """Compile and load ``sources`` into one library once per process (a deliberate cache: it stays loaded), from
    the cache folder where an identical build is kept there; ``extra`` flags follow the others (a test builds a
    loop's plain path with ``PLAIN``)."""
    started = time.perf_counter()
    names = " and ".join(source.name for source in sources)
    compiler = os.environ.get("CC") or next(filter(None, map(shutil.which, ("gcc", "cc", "g++"))), None)
    if compiler is None:
        return Build(None, 0.0, "no C compiler: set CC, or install gcc")
    flags = (*FLAGS, *extra)
    folder = cache_folder()
    key = None if folder is None else build_key(compiler, sources, flags)
    kept = None if key is None else folder / f"{sources[0].stem}-{key}.so"
    if kept is not None and (loaded := load_cached(kept)) is not None:
        return Build(loaded, time.perf_counter() - started, None)
    with tempfile.TemporaryDirectory(prefix="lab-loops-") as scratch:
        # NOTE: straight into the cache folder where there is one (a temporary name there, renamed whole once
        # built), else into the scratch folder
        library = writable_temporary(kept) or Path(scratch) / "loops.so"
        done = subprocess.run([compiler, *map(str, sources), *flags, "-o", str(library)], capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            if kept is not None:
                library.unlink(missing_ok=True)
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            return Build(None, time.perf_counter() - started, f"{compiler} could not build {names}: {first}")
        loaded = ctypes.CDLL(str(library))  # stays mapped once the file is renamed or its folder is gone
        if kept is not None and library.parent == kept.parent:
            publish(library, kept)
    return Build(loaded, time.perf_counter() - started, None)


def writable_temporary(kept: Path | None) -> Path | None:
    """A fresh, empty file beside ``kept`` for the compiler to write, or None where there is no cache or its folder
    cannot be written (that only costs the next process a build)."""
    if kept is None:
        return None
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=kept.parent, prefix=f".{kept.stem}-", suffix=".tmp")
    except OSError:
        return None
    os.close(descriptor)
    return Path(temporary)


def publish(library: Path, kept: Path) -> None:
    """Rename a fresh build into its cached name once its bytes are on disk (a reader sees the whole file or none,
    even after a crash); where that fails the file is removed and the next process builds again."""
    try:
        with library.open("rb") as written:
            os.fsync(written.fileno())
        os.replace(library, kept)
    except OSError:
        library.unlink(missing_ok=True)
