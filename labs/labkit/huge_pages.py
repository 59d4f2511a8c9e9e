"""Moving a process's memory onto 2 MiB pages before it is timed, and saying how much of it sits there.

Asking for huge pages at allocation (labkit.environment.HUGE_PAGES) is not enough: when the kernel finds no free
2 MiB run at the moment a page is first touched, it falls back to 4 KiB pages for it, silently, and how often that
happens depends on what ran before (a machine that just ran a benchmark of 15 minutes has fragmented memory). On a
2-core Xeon one float32 read of 1,920 MiB ran at 13.1 GB/s on 2 MiB pages and 10.6-11.1 GB/s on 4 KiB pages, and
two back-to-back benchmark runs disagreed by a fifth on every step-over-floor ratio because the floor's buffer had
fallen back in the second and the weights had not. ``settle`` asks the kernel to move the process's private
anonymous memory onto huge pages now, each aligned 2 MiB range that is already wholly resident (madvise(MADV_COLLAPSE),
Linux 6.1 and later, no privileges needed: it compacts memory to find the runs), and reports the coverage before and
after, which a record keeps. A tensor smaller than 2 MiB holds no aligned 2 MiB range of its own and stays on 4 KiB
pages; llm_models.gathered puts a model's many small tensors into one buffer for that reason.

Standard library only; where the call or /proc is missing (another OS, an older kernel) it reports that and moves
nothing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

HUGE = 2 * 2**20  # the x86-64 and arm64 transparent huge page
PAGE = os.sysconf("SC_PAGE_SIZE")  # the base page mincore reports on (4 KiB on x86-64)
MADV_COLLAPSE = 25  # include/uapi/asm-generic/mman-common.h, Linux 6.1
MAPS = Path("/proc/self/maps")
ROLLUP = Path("/proc/self/smaps_rollup")


@dataclass(frozen=True)
class Coverage:
    anonymous_bytes: int  # the process's anonymous memory in use (smaps_rollup "Anonymous")
    huge_bytes: int  # of which on transparent huge pages (smaps_rollup "AnonHugePages")


@dataclass(frozen=True)
class Settled:
    """What ``settle`` did: the coverage before and after, how many resident huge pages it asked for (one madvise
    call each), how many of those the kernel still refused after its tries (no free 2 MiB run it could make), the
    time it took, and why it moved nothing where it could not run (None where it ran)."""
    before: Coverage | None
    after: Coverage | None
    collapsed: int
    refused: int
    seconds: float
    unavailable: str | None

    def as_record(self) -> dict[str, object]:
        return asdict(self)


def coverage(rollup: Path = ROLLUP) -> Coverage | None:
    """This process's anonymous memory and its part on huge pages, from ``rollup``; None where it cannot be read."""
    try:
        fields = dict(line.split(":", 1) for line in rollup.read_text().splitlines() if ":" in line)
        return Coverage(int(fields["Anonymous"].split()[0]) * 1024, int(fields["AnonHugePages"].split()[0]) * 1024)
    except (OSError, KeyError, ValueError, IndexError):
        return None


def anonymous_ranges(maps: Path = MAPS) -> list[tuple[int, int]]:
    """The whole 2 MiB runs inside each private, writable, anonymous mapping of at least one such run, the
    [heap] included.

    NOTE: the heap too, because glibc serves an allocation below its mmap threshold (which rises to 32 MiB once a
    large block is freed) from the heap: a model's small tensors and, until they shared one allocation, every KV
    cache layer's keys and values (600 MB of a trained-model process, none of it on 2 MiB pages) lived there."""
    ranges = []
    for line in maps.read_text().splitlines():
        fields = line.split()
        if (len(fields) > 5 and fields[5] != "[heap]") or not fields[1].startswith("rw") or fields[1][3] != "p":
            continue  # a file, another named region ([stack], [vvar]), shared or read-only memory
        start, end = (int(value, 16) for value in fields[0].split("-"))
        first, last = -(-start // HUGE) * HUGE, end // HUGE * HUGE
        if last > first:
            ranges.append((first, last))
    return ranges


def resident_runs(first: int, last: int, resident: bytes) -> list[tuple[int, int]]:
    """The ranges of whole huge pages within [first, last) whose every 4 KiB page is resident, given ``resident``
    (mincore's vector: one byte per 4 KiB page of the range, bit 0 set where resident), joined where adjacent."""
    small = HUGE // PAGE
    runs: list[tuple[int, int]] = []
    for index in range((last - first) // HUGE):
        if all(byte & 1 for byte in resident[index * small:(index + 1) * small]):
            start = first + index * HUGE
            if runs and runs[-1][1] == start:
                runs[-1] = (runs[-1][0], start + HUGE)
            else:
                runs.append((start, start + HUGE))
    return runs


def collapse_each(pages: list[int], collapse: Callable[[int], int], tries: int) -> tuple[list[int], set[int]]:
    """``collapse(start)`` (0, or the errno it failed with) on each huge page, then again on those it refused, up to
    ``tries`` passes in all; the pages still refused and every errno seen."""
    errors: set[int] = set()
    for _ in range(tries):
        refused = []
        for start in pages:
            if code := collapse(start):
                refused.append(start)
                errors.add(code)
        pages = refused
        if not pages:
            break
    return pages, errors


def settle(tries: int = 3) -> Settled:
    """Collapse the resident part of this process's anonymous memory onto huge pages (see the module's note) and
    report the coverage; a huge page the kernel refuses is asked for again, up to ``tries`` times in all.

    NOTE: only huge pages whose every 4 KiB page is already resident are collapsed. MADV_COLLAPSE fills whatever it
    is given, and memory reserved but not yet touched (a server's KV pool sized for the machine, thread stacks) would
    become resident: a serving suite's process grew to 14 GB and was killed before this check.

    NOTE: one madvise call per huge page, not one per run of them. Over a range, the kernel (madvise_collapse in
    mm/khugepaged.c) gives up at the first huge page it cannot allocate, no free 2 MiB run even after compacting,
    and leaves the rest of the range as it was: one refusal early in a run of several gigabytes would leave every
    copy of the weights after it on 4 KiB pages, a different copy in each process. A refused page is asked for
    again once every other page has been, by which time compaction may have freed a run."""
    started = time.perf_counter()
    before = coverage()
    if not sys.platform.startswith("linux") or before is None:
        return Settled(before, before, 0, 0, 0.0, "no /proc/self/smaps_rollup: not Linux, or /proc is not mounted")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    pages = []
    for first, last in anonymous_ranges():
        vector = ctypes.create_string_buffer((last - first) // PAGE)
        if libc.mincore(first, last - first, vector) == 0:
            pages += [start for run_start, run_end in resident_runs(first, last, vector.raw)
                      for start in range(run_start, run_end, HUGE)]
    asked = len(pages)

    def collapse(start: int) -> int:
        return 0 if libc.madvise(start, HUGE, MADV_COLLAPSE) == 0 else ctypes.get_errno()

    pages, errors = collapse_each(pages, collapse, tries)
    if asked and len(pages) == asked:
        reasons = ", ".join(sorted(errno.errorcode.get(code, str(code)) for code in errors))
        return Settled(before, coverage(), 0, asked, time.perf_counter() - started,
                       f"madvise(MADV_COLLAPSE) refused every huge page ({reasons}): a kernel before 6.1, or huge "
                       f"pages off ({os.uname().release})")
    return Settled(before, coverage(), asked - len(pages), len(pages), time.perf_counter() - started, None)
