"""What every lab benchmark shares: progress lines, timing, run order, statistics and the safe write.

A benchmark builds its record in memory and hands it to ``write_record``,
which validates it against the lab's schema and replaces the old record in
one rename; any failure on the way, Ctrl-C and SIGTERM included, leaves the
old record byte-identical. ``labkit.harness`` builds a whole timing sweep on these.
"""

from __future__ import annotations

import gc
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .environment import capture_environment
from .fingerprint import lab_fingerprint
from .machines import derived_label
from .manifest import Lab, discover_labs
from .records import atomic_write_json, load_json, schema_registry, validate_record
from .signals import EXIT_INTERRUPTED, Terminated, exit_quietly_on_interrupt, signal_name

ORDER_POLICY = ("rotate: the first repetition runs the modes in the listed order, each later one starts "
                "with the next mode and wraps around; every mode leads equally often when the repetitions "
                "are a multiple of the modes, otherwise the earlier modes lead once more")
SCHEMA_VERSION = 3  # results/record-common.schema.json: bump both together


class EquivalenceError(RuntimeError):
    """The modes disagree: timing them would compare different computations."""


_STARTED = time.monotonic()  # when the benchmark's process imported labkit: progress lines count from here


def progress(message: str) -> None:
    """One line on stderr as a section starts, with the seconds since the benchmark started, so a slow section shows
    in the log; the site build streams these into its log."""
    print(stamped(message), file=sys.stderr, flush=True)


def stamped(message: str) -> str:
    """A progress line as printed: 'benchmark:', the seconds since the benchmark started, the message."""
    return f"benchmark: {time.monotonic() - _STARTED:6.1f} s  {message}"


def outcome(message: str) -> None:
    """One line on stderr saying what became of the run or the record, or a summary line: no clock."""
    print(f"benchmark: {message}", file=sys.stderr, flush=True)


def run_order(modes: Sequence[str], repetition: int) -> list[str]:
    shift = repetition % len(modes)
    return [*modes[shift:], *modes[:shift]]


def time_ns(work: Callable[[], object]) -> int:
    """Nanoseconds for one call, with garbage collection paused as timeit does."""
    gc.disable()
    try:
        start = time.perf_counter_ns()
        work()
        return time.perf_counter_ns() - start
    finally:
        gc.enable()


def command_line(script: str, root: Path, argv: Sequence[str] | None) -> str:
    """The command as a reader would retype it from the repository root, with no local paths."""
    relative = Path(script).resolve().relative_to(root).as_posix()
    return shlex.join(["python", relative, *(sys.argv[1:] if argv is None else argv)])


def record_header(lab: Lab, root: Path, script: str, argv: Sequence[str] | None, output: Path,
                  machine: str | None = None) -> dict[str, Any]:
    """The fields every record starts with: what, when, on which machine, how it was run, from which sources.

    ``script`` is the file a reader runs: the lab's benchmark.py launcher, named in its lab.toml;
    ``machine`` the record's machine label (default: derived from the CPU model, one thread).
    """
    output = output.resolve()
    # "dirty" is about the code: records that benchmarks (this one included) rewrite do not count.
    records = {other.record.as_posix() for other in discover_labs(root)}
    if output.is_relative_to(root):
        records.add(output.relative_to(root).as_posix())
    fingerprint = lab_fingerprint(lab, root)
    return {
        "schema_version": SCHEMA_VERSION,
        "lab": lab.name,
        "machine": machine or derived_label(),
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "command": command_line(script, root, argv),
        "environment": capture_environment(root, tuple(sorted(records)), tuple(fingerprint["files"])),
        "fingerprint": fingerprint,
    }


def write_record(output: Path, build: Callable[[], dict[str, Any]], schema: Path) -> int:
    """Build, validate and atomically write a record; on any failure say so and keep the old one. What
    an interrupt prints is decided with the rename (labkit.records): the record was replaced or not."""
    untouched = f"{output} was not written" + (" and still holds the previous record" if output.exists() else "")
    launched = signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)  # run through the launcher
    written = f"{output} had already been written and is complete"

    def say_written_on_interrupt() -> None:
        if launched:
            exit_quietly_on_interrupt(written)

    try:
        record = build()
        validate_record(record, load_json(schema, "record schema"), "new record", schema_registry(schema.parent))
        atomic_write_json(output, record, then=say_written_on_interrupt)
    except EquivalenceError as error:
        outcome(f"equivalence check failed, no timing taken: {error}; {untouched}")
        return 2
    except (KeyboardInterrupt, Terminated) as stop:
        if getattr(stop, "record_written", False):
            say_written_on_interrupt()
            outcome(f"interrupted ({signal_name(stop)}); {written}")
        else:
            outcome(f"interrupted ({signal_name(stop)}); {untouched}")
        return EXIT_INTERRUPTED[signal_name(stop)]
    except Exception as error:  # one clear line instead of a traceback; the record is the thing to protect
        outcome(f"failed: {type(error).__name__}: {error}; {untouched}")
        return 1
    outcome(f"wrote {output}")
    return 0
