"""Whether this machine is quiet enough to make a reference record on: what other work used its CPUs just now.

A reference record is what every page of the site quotes, so it is made on a machine with nothing else running. A
load average says little about that (it counts waiting threads, not what they take, and it lags by a minute);
what matters is how much CPU time other work took while we watched, and how much the hypervisor gave to other
guests (steal). ``sample`` reads both from the kernel's counters (/proc/stat, Linux) over QUIET_SAMPLE_S, while
this process sleeps, so everything it counts is someone else's; ``refusal`` says, in one line, why a sample is too
busy, or nothing.

Thresholds, and why:
- QUIET_BUSY_CORES = 0.25: at most a quarter of one core's time busy with other work on average. An idle
  machine of the reference kind reads about 0.02 (a shell and the kernel's own threads); one other CPU-bound
  process reads 1.0. The benchmarks time steps of milliseconds on one or two threads, and another process shares
  the memory bus and the caches even on a core of its own, so anything near a whole core moves the cells.
- QUIET_STEAL_SHARE = 0.05: at most 5% of the CPU time taken by the hypervisor for other guests: on a shared
  host that time is gone from our threads in the middle of a timed step.
The same thresholds judge the samples every record keeps of its whole run (labkit.watch), on their mean.
Neighbours in other guests that share only the memory (not the CPUs) are invisible here; the records' floors,
measured beside the cells, are what show them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Two seconds: a few hundred clock ticks on two cores, enough to tell a quarter of a core busy from an idle machine;
# every benchmark of a reference run waits this long before it starts, so it counts seven times in a run's wall time.
QUIET_SAMPLE_S = 2.0
QUIET_BUSY_CORES = 0.25
QUIET_STEAL_SHARE = 0.05
STAT = Path("/proc/stat")
LOADAVG = Path("/proc/loadavg")


@dataclass(frozen=True)
class Sample:
    seconds: float
    cores: int
    busy_cores: float  # CPU time other work took, in cores (1.0: one core busy the whole time)
    steal_share: float  # the hypervisor's share of the CPU time, 0 to 1
    load_average: float  # the kernel's one-minute load average, for the message only


def counters(text: str) -> list[int]:
    """The aggregate line of /proc/stat: user nice system idle iowait irq softirq steal (guest time is already in
    user), as numbers of clock ticks."""
    first = text.splitlines()[0].split()
    if first[0] != "cpu" or len(first) < 9:
        raise ValueError(f"{STAT}: its first line is not the aggregate 'cpu' line with 8 counters: {text[:80]!r}")
    return [int(value) for value in first[1:9]]


def between(before: str, after: str, seconds: float, cores: int, load_average: float, own_ticks: int = 0) -> Sample:
    """What two readings of /proc/stat ``seconds`` apart say about other work on ``cores`` CPUs, less ``own_ticks``
    that this process and its descendants took meanwhile (labkit.watch, while a benchmark runs; none while it
    sleeps). Both count the same clock ticks (USER_HZ); the kernel rounds them apart, so the rest is at least 0."""
    delta = [b - a for a, b in zip(counters(before), counters(after), strict=True)]
    user, nice, system, _idle, _iowait, irq, softirq, steal = delta
    total = sum(delta)
    if total <= 0:
        return Sample(seconds, cores, 0.0, 0.0, load_average)
    busy = max(0, user + nice + system + irq + softirq - own_ticks)
    return Sample(seconds, cores, busy / total * cores, steal / total, load_average)


def sample(seconds: float = QUIET_SAMPLE_S, read: Callable[[], str] = STAT.read_text) -> Sample | None:
    """Other work on this machine over ``seconds`` while this process sleeps; None where /proc/stat is missing (not
    Linux), so nothing can be said."""
    try:
        before = read()
        time.sleep(seconds)
        after = read()
        load = float(LOADAVG.read_text().split()[0]) if LOADAVG.exists() else float("nan")
    except OSError:
        return None
    return between(before, after, seconds, os.cpu_count() or 1, load)


def busy_reasons(busy_cores: float, steal_share: float, cores: str, span: str, steal_span: str = "") -> list[str]:
    """What was busy beyond the thresholds, each reason worded with ``cores`` ('its 2'), ``span`` ('over 3 s') and
    ``steal_span`` (' on average'): the one check both the start-up sample and a run's stored samples are held to."""
    reasons = []
    if busy_cores > QUIET_BUSY_CORES:
        reasons.append(f"other work kept {busy_cores:.2f} of {cores} cores busy {span} (at most {QUIET_BUSY_CORES:g} "
                       f"for a reference record)")
    if steal_share > QUIET_STEAL_SHARE:
        reasons.append(f"the hypervisor took {steal_share:.0%} of the CPU time for other guests{steal_span} (at most "
                       f"{QUIET_STEAL_SHARE:.0%})")
    return reasons


def refusal(found: Sample) -> str | None:
    """Why ``found`` is too busy for a reference record, in one line naming what was busy and by how much, or None."""
    reasons = busy_reasons(found.busy_cores, found.steal_share, f"its {found.cores}", f"over {found.seconds:g} s")
    if not reasons:
        return None
    return (f"this machine is busy: {'; '.join(reasons)}; load average {found.load_average:.2f}. A reference record "
            "is made on a quiet machine: stop the other work, or run plain make bench for this machine's record")
