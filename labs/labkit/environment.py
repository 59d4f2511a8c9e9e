"""What a measurement ran on: software, hardware and source state, without host or user names."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, or what platform reports elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_state(root: Path, ignore: tuple[str, ...] = (), sources: tuple[str, ...] = ()) -> dict[str, object]:
    """Commit, and whether the tree differs from it: a changed tracked file (the ``ignore``d records
    excepted) or an untracked file among the measured ``sources`` (it is in the fingerprint, not the commit)."""
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True
        ).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        lines = git("status", "--porcelain", "--untracked-files=all").splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    tracked = [line[3:] for line in lines if not line.startswith("??")]
    untracked = [line[3:] for line in lines if line.startswith("??")]
    dirty = any(path not in ignore and not is_record(path) for path in tracked) or any(path in sources for path in untracked)
    return {"commit": commit, "dirty": dirty}


def is_record(path: str) -> bool:
    """A measurement record (any machine's), which benchmarks rewrite: never what makes the code dirty."""
    return path.startswith("results/") and path.endswith(".json") and not path.endswith(".schema.json")


THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")  # e.g. "always [madvise] never"
HUGE_PAGES = ("THP_MEM_ALLOC_ENABLE", "1")  # PyTorch's switch and the value that asks (labkit.launch sets it)


def memory(mode_file: Path = THP_MODE) -> dict[str, object]:
    """Whether torch asked for huge pages for its large allocations, and the kernel's transparent huge page mode
    (the bracketed word of ``mode_file``; None where the kernel has no such file)."""
    try:
        found = re.search(r"\[(\w+)\]", mode_file.read_text(encoding="utf-8"))
    except OSError:
        found = None
    name, asks = HUGE_PAGES
    return {"torch_huge_pages": os.environ.get(name, "") == asks,
            "transparent_huge_pages": found.group(1) if found else None}


def capture_environment(root: Path, ignore: tuple[str, ...] = (), sources: tuple[str, ...] = ()) -> dict[str, object]:
    """The environment block of a measurement record."""
    import torch  # here, not at the top: the site hook uses this module's torch-free helpers

    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
        },
        "torch": {
            "version": torch.__version__,
            "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            "parallel_info": torch.__config__.parallel_info(),
            "build_config": torch.__config__.show(),
        },
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(), "machine": platform.machine()},
        "os": {"system": platform.system(), "release": platform.release(), "libc": "-".join(platform.libc_ver())},
        "memory": memory(),
        "git": git_state(root, ignore, sources),
    }
