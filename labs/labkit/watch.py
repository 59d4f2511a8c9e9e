"""What the machine was doing while a benchmark measured: samples of other work's CPU time, kept in its record.

labkit.quiet looks for a few seconds before a reference benchmark starts; a benchmark measures for minutes, and a
build, a cron job or another guest can start in the middle. So every record carries samples of its whole run
(``Watch``, which labkit.writing puts around the measurement): one of WATCH_EDGE_S just before it, while this
process sleeps; one every WATCH_EVERY_S during it, from a thread that waits on an event (so it ends with the
measurement, not at its next wake-up); one of WATCH_EDGE_S just after it. During the measurement the machine's
busy time holds the benchmark's own, so each sample takes away what this process and its descendants (a lab's
server, a compiler) took meanwhile: the rest is other work. ``load_of`` reads a record's samples against
labkit.quiet's thresholds; labkit.writing refuses a reference record from a run under load, and a page says so.

Nothing here touches a measured number (labkit.closure counts this module on the record's side): it reads the
kernel's counters and sleeps. Its one cost to the measurement is the sampler's wake-up, a walk of /proc (about
2 ms for a hundred processes) once every WATCH_EVERY_S, holding the interpreter's lock for part of it. The edges
add 2 x WATCH_EDGE_S to a run's wall time, outside what any lab times.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from . import quiet

WATCH_EDGE_S = 1.0  # before and after the measurement: two hundred ticks on two cores, and little wall time
WATCH_QUICK_EDGE_S = 0.2  # --quick: the test suite runs many quick benchmarks, whose records no page quotes
WATCH_EVERY_S = 10.0  # during: a burst of a few seconds shows, and a run of minutes keeps a few dozen samples
WATCH_MIN_PARTIAL_S = 1.0  # the measurement's last, partial interval is kept from this long: shorter says little
PROC = Path("/proc")


@dataclass(frozen=True)
class Reading:
    """The kernel's counters at one moment."""

    at: float  # time.monotonic() when /proc/stat was read
    stat: str  # /proc/stat
    own_ticks: int  # CPU time this process and its descendants have taken so far, in clock ticks (USER_HZ)
    load_average: float  # the one-minute load average


def process_times(text: str) -> tuple[int, int]:
    """(parent pid, CPU time in clock ticks) from the text of /proc/<pid>/stat: utime + stime + cutime + cstime,
    fields 14 to 17. The last two are what its waited-for children took, so a descendant that ends between two
    readings moves its time to its parent instead of out of the sum. Read after the last ')': the command name
    before it, in parentheses, may itself hold spaces and parentheses."""
    fields = text[text.rindex(")") + 1:].split()  # fields[0] is field 3, the state
    return int(fields[1]), sum(int(value) for value in fields[11:15])


def tree_ticks(stats: Mapping[int, str], root: int) -> int:
    """CPU time of process ``root`` and every descendant, from each process's /proc/<pid>/stat text (by pid)."""
    times = {}
    for pid, text in stats.items():
        try:
            times[pid] = process_times(text)
        except (ValueError, IndexError):  # a process that ended mid-read leaves an empty or partial line
            continue
    if root not in times:
        raise ValueError(f"no readable {PROC}/{root}/stat for this process")
    children = defaultdict(list)
    for pid, (parent, _) in times.items():
        children[parent].append(pid)
    total, seen, waiting = 0, set(), [root]
    while waiting:
        pid = waiting.pop()
        if pid not in seen:  # NOTE: a pid reused during the walk could otherwise link back into the tree
            seen.add(pid)
            total += times[pid][1]
            waiting += children[pid]
    return total


def read_machine(proc: Path = PROC, root: int | None = None) -> Reading:
    """The counters now: /proc/stat, /proc/loadavg, and each process's stat for the tree of ``root`` (default: this
    process). OSError or ValueError where /proc cannot be read or is not Linux's."""
    at, stat = time.monotonic(), (proc / "stat").read_text()
    quiet.counters(stat)  # its aggregate line, or ValueError here rather than in a sample
    load_average = float((proc / "loadavg").read_text().split()[0])
    stats = {}
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (proc / entry.name / "stat").read_text()
            except OSError:  # ended between the listing and the read
                continue
    return Reading(at, stat, tree_ticks(stats, os.getpid() if root is None else root), load_average)


def sample(phase: str, began: float, first: Reading, last: Reading, cores: int) -> dict[str, Any]:
    """One sample of a record's machine_state: other work between two readings, this process tree's time taken away."""
    # NOTE: at least 0: a descendant that leaves the tree unreaped (a daemon that detached itself) takes its whole
    # past with it, which would otherwise read as our time going backwards and others' soaring
    seen = quiet.between(first.stat, last.stat, last.at - first.at, cores, last.load_average,
                         own_ticks=max(0, last.own_ticks - first.own_ticks))
    return {"phase": phase, "start_s": round(first.at - began, 3), "seconds": round(seen.seconds, 3),
            "other_busy_cores": round(seen.busy_cores, 4), "steal_share": round(seen.steal_share, 4),
            "load_average": seen.load_average}


class Watch:
    """``with Watch(edge_s) as watch:`` around a measurement, then ``watch.state()`` is the record's machine_state.
    Where /proc cannot be read (not Linux) there are no samples, and the state says why; an exception leaving the
    block stops the sampling without the after sample, so a failed or interrupted run is not held up."""

    def __init__(self, edge_s: float = WATCH_EDGE_S, every_s: float = WATCH_EVERY_S,
                 read: Callable[[], Reading] | None = None, cores: int | None = None) -> None:
        self.edge_s, self.every_s = edge_s, every_s
        self.read = read or read_machine
        self.cores = cores or os.cpu_count() or 1
        self.samples: list[dict[str, Any]] = []
        self.unavailable: str | None = None
        self._began = 0.0
        self._last: Reading | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _reading(self) -> Reading | None:
        """The counters now, or None once they could not be read (and the state says why)."""
        if self.unavailable is not None:
            return None
        try:
            return self.read()
        except (OSError, ValueError) as error:
            after = f" after {len(self.samples)} samples" if self.samples else ""
            self.unavailable = f"{PROC} could not be read{after}: {error}"
            return None

    def _edge(self, phase: str) -> None:
        """A sample of ``edge_s`` while this process sleeps."""
        first = self._reading()
        if first is None:
            return
        if phase == "before":
            self._began = first.at
        time.sleep(self.edge_s)
        last = self._reading()
        if last is not None:
            self.samples.append(sample(phase, self._began, first, last, self.cores))
            self._last = last

    def _during(self) -> None:
        """Every ``every_s`` until the measurement ends, then its last, partial interval if long enough."""
        last, stopped = self._last, False
        while not stopped and last is not None:
            stopped = self._stop.wait(self.every_s)
            now = self._reading()
            if now is not None and (not stopped or now.at - last.at >= WATCH_MIN_PARTIAL_S):
                self.samples.append(sample("during", self._began, last, now, self.cores))
            last = now

    def __enter__(self) -> Watch:
        self._edge("before")
        if self._last is not None:
            self._thread = threading.Thread(target=self._during, name="labkit-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if kind is None:
            self._edge("after")

    def state(self) -> dict[str, Any]:
        """The record's machine_state (record-common.schema.json#/$defs/machine_state)."""
        state: dict[str, Any] = {"cores": self.cores, "every_s": self.every_s, "samples": list(self.samples)}
        return state if self.unavailable is None else state | {"unavailable": self.unavailable}


def for_run(quick: bool) -> Watch:
    """The watch labkit.writing puts around a benchmark's measurement: short edges for a --quick run."""
    return Watch(WATCH_QUICK_EDGE_S if quick else WATCH_EDGE_S)


@dataclass(frozen=True)
class Load:
    """What a record's samples say about other work through its run."""

    cores: int
    seconds: float  # the time the samples cover
    busy_cores: float  # other work's CPU time, in cores: the samples' mean, each weighted by its length
    steal_share: float  # the hypervisor's share of the CPU time, weighted the same way
    peak_busy_cores: float  # the busiest sample's
    peak_phase: str  # before, during or after the measurement
    peak_seconds: float  # that sample's length
    refusal: str | None  # why the run was under load for a reference record, in one line; None: a quiet run


def load_of(state: Mapping[str, Any] | None) -> Load | None:
    """The load over a record's run, from its machine_state; None where it holds no samples.

    A run is under load when other work's mean over the whole run exceeds labkit.quiet's thresholds. The mean, not
    the busiest sample: one 10 s sample of a cron job is not the run, whose repetitions rotate through all of it,
    so their medians pass over a burst that short; a rule on the peak would refuse most long runs for a blip that
    moved no median. A load that lasts moves the mean. The peak is kept, and the page states it beside the mean.
    """
    if not state or not state.get("samples"):
        return None
    samples, cores = state["samples"], state["cores"]
    seconds = sum(s["seconds"] for s in samples)
    busy = sum(s["other_busy_cores"] * s["seconds"] for s in samples) / seconds
    steal = sum(s["steal_share"] * s["seconds"] for s in samples) / seconds
    peak = max(samples, key=lambda s: s["other_busy_cores"])
    return Load(cores, seconds, busy, steal, peak["other_busy_cores"], peak["phase"], peak["seconds"],
                run_refusal(cores, seconds, busy, steal))


def run_refusal(cores: int, seconds: float, busy_cores: float, steal_share: float) -> str | None:
    """Why a run with these means is under load, in one line naming what was busy against labkit.quiet's
    thresholds, or None."""
    reasons = quiet.busy_reasons(busy_cores, steal_share, str(cores), f"on average over its {seconds:.0f} s",
                                 " on average")
    return "; ".join(reasons) or None
