"""Peak and total CPU allocation during a piece of work, from PyTorch's profiler memory accounting.

With ``profile_memory=True`` the profiler records every tensor allocation
and free made while it runs, each with the running "Total Allocated"
counter. Its maximum is the peak of memory allocated during the work
(tensors that existed before are not counted, and the counter is read
relative to its value when the work began); the sum of allocation sizes
is everything the work allocated, transient copies included.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torch.profiler import ProfilerActivity, profile


@dataclass(frozen=True)
class AllocationProfile:
    peak_bytes: int  # highest bytes allocated at once during the work, beyond what existed before
    allocated_bytes: int  # sum of every allocation made during the work
    allocations: int


def profile_allocations(work: Callable[[], object]) -> AllocationProfile:
    """Run ``work`` under the profiler and read its memory events."""
    with tempfile.TemporaryDirectory() as folder, _quiet_native_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
            work()
        trace = Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    memory = [e["args"] for e in events if e.get("name") == "[memory]"]
    if not memory:
        raise RuntimeError("the profiler recorded no memory events; is profile_memory supported here?")
    allocations = [m["Bytes"] for m in memory if m["Bytes"] > 0]
    # The counter runs on across profiler sessions in one process: measure from where this one began.
    baseline = memory[0]["Total Allocated"] - memory[0]["Bytes"]
    return AllocationProfile(
        peak_bytes=max(m["Total Allocated"] for m in memory) - baseline,
        allocated_bytes=sum(allocations),
        allocations=len(allocations),
    )


class _quiet_native_stderr:  # noqa: N801  (a context manager used like a function)
    """Kineto prints start/stop banners on fd 2; drop those lines and pass anything else through."""

    def __enter__(self) -> None:
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._capture = tempfile.TemporaryFile(mode="w+b")
        os.dup2(self._capture.fileno(), 2)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._capture.seek(0)
        for line in self._capture.read().decode(errors="replace").splitlines():
            if not line.startswith("USDT:"):
                print(line, file=sys.stderr)
        self._capture.close()
