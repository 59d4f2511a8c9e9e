"""Run every registered lab's benchmark, as its lab.toml states it: what `make bench` does.

    labs/.venv/bin/python -m labkit.run_benchmarks [--reference] [--machine LABEL] [--quick] [lab-name ...]

By default each benchmark writes this machine's record, results/machines/<lab>/<label>.json, and the
committed reference record stays as it is; --reference (make bench REFERENCE=1) replaces the
reference instead. The label is --machine (make bench MACHINE=...) or derived from the CPU model and
thread count; a label equal to the reference record's is refused before anything is measured. --quick
(make bench QUICK=1) passes --quick to each benchmark: a smoke test, marked as such in its record.
One invocation is one run (labkit.runs): its id, start and labs are made once, before the first benchmark, and
handed to each benchmark in the environment variable LABKIT_RUN, so every record it writes carries the same run.
Each benchmark writes its record atomically; one failing does not stop the others, and the exit status
is non-zero if any failed. With --reference, each benchmark starts only on a quiet machine (labkit.quiet: what
other work used the CPUs over a few seconds just before); on a busy one it is refused in one line naming what was
busy, its reference record kept, and the labs after it are not measured; a benchmark that other work kept busy on
average through its run (labkit.watch) keeps its reference record too, and fails. Ctrl-C or SIGTERM, to the process group or to this process alone, reaches
the running benchmark (which keeps its previous record) and stops the rest, in one line. Under make
(the Makefile's recipe execs this), a SIGINT or SIGTERM to make alone does the same, and a run ended by
an interrupt ends make by that signal (130 or 143 in the shell; make itself passes a SIGINT on to nobody, so
this process reads it from make's signal mask). A Ctrl-C or SIGTERM to the benchmark process alone ends the
run the same way, by that signal, not with make's status 2 for a failed recipe. Each benchmark runs in a
process group of its own; on Linux, a benchmark whose caller dies (even by SIGKILL) gets SIGTERM from the
kernel (the parent-death signal) and stops without writing, in its one line; so does this process when make
dies. Any other failure makes `make bench` exit 2, as make does for every failed recipe; run this module
directly for the statuses themselves: 0 every record written, 1 a benchmark failed, 2 a bad label or option or a
busy machine, 130 or 143 interrupted.
"""

# ruff: noqa: E402  (the imports after the first handlers are installed come late on purpose)

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any


def _stop_outside_main(signum: int, frame: FrameType | None) -> None:
    """While the imports load and after main returns: no benchmark is running, so stop at once."""
    name = signal.Signals(signum).name
    print(f"run_benchmarks: interrupted ({name}); no benchmark was running", file=sys.stderr, flush=True)
    os._exit(128 + signum)


if __name__ == "__main__":  # before the imports below: an interrupt while they load is one line, not runpy's traceback
    for _signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signum, _stop_outside_main)
    from labkit.signals import stop_when_parent_dies

    stop_when_parent_dies()  # make killed: SIGTERM here, forwarded to the running benchmark

import argparse
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from labkit import quiet, runs
from labkit.exit import exit_now
from labkit.machines import LabelError, check_label, derived_label, machine_record_path, reference_label
from labkit.manifest import Lab, ManifestError, discover_labs
from labkit.signals import stop_when_parent_dies

ROOT = Path(__file__).resolve().parents[2]
CHILD_GRACE_S = 10  # for an interrupted benchmark to finish a record write it was in the middle of
RERUN_SUFFIX = "-rerun"  # added to a derived label that a reference record already carries
POLL_S = 0.05  # how soon a signal to make bench is forwarded to the running benchmark
MAKE_HANDLER_S = 60  # a bound for make to enter its signal handler once signalled (a hang, not a slow machine)
STOPPED = {130: signal.SIGINT, -signal.SIGINT: signal.SIGINT, 143: signal.SIGTERM, -signal.SIGTERM: signal.SIGTERM}
STOP_WORDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
UNDER_MAKE: int | None = None  # the pid of the GNU make this runs under, when run as a script by it
# What other work the machine has before a reference benchmark starts (tests set what it looks like).
machine_sample: Callable[[], quiet.Sample | None] = quiet.sample


def parent_make() -> int | None:
    """The parent's pid if it is GNU make (the Makefile's recipe execs this), else None (Linux's /proc)."""
    parent = os.getppid()
    try:
        return parent if Path(f"/proc/{parent}/comm").read_text().strip() == "make" else None
    except OSError:
        return None


def make_is_stopping(make: int) -> int | None:
    """The signal GNU make is handling, or None. On SIGINT or SIGTERM make waits for its recipe inside
    its handler, the signal blocked; a SIGINT sent to make alone it never passes on (it expects the
    terminal to have sent it to the whole group), so the recipe learns of it here, from make's mask.
    Make also blocks both for a moment while it starts or reaps a recipe, the handler still installed;
    its handler's first act is to restore the default action, so blocked and no longer caught is the
    handler, and a poll landing in one of those moments is not read as a stop."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{make}/status").read_text().splitlines()
                      if ":" in line)
        blocked, caught = int(fields["SigBlk"], 16), int(fields["SigCgt"], 16)
    except (OSError, KeyError, ValueError):
        return None
    return next((signum for signum in (signal.SIGINT, signal.SIGTERM)
                 if blocked & (1 << (signum - 1)) and not caught & (1 << (signum - 1))), None)


def say(message: str) -> None:
    print(f"run_benchmarks: {message}", file=sys.stderr, flush=True)


def arguments_for(lab: Lab, reference: bool, label: str, quick: bool = False) -> list[str]:
    """The lab.toml's command, writing the reference or this machine's record."""
    record = None if reference else machine_record_path(lab, label).as_posix()
    return [*lab.benchmark_arguments(record), "--machine", label, *(["--quick"] if quick else [])]


class Stop:
    """The first SIGINT or SIGTERM of the run. The handler only notes it; the loop forwards it to the
    running benchmark, exactly once (a handler that sent it too could race the loop into sending twice)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()


@contextmanager
def stop_on_signals() -> Iterator[Stop]:
    """Within the block, SIGINT and SIGTERM are noted in the Stop; the previous handlers come back after."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, stop)
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_one(arguments: list[str], stop: Stop, run: dict[str, Any]) -> int:
    """The benchmark's exit status. It runs in a process group of its own, so a Ctrl-C at the terminal
    reaches it once, forwarded from here, not twice; one that outlives CHILD_GRACE_S after that is killed.
    ``run``: the run it belongs to, handed down in LABKIT_RUN (labkit.runs)."""
    parent = os.getpid()
    process = subprocess.Popen([sys.executable, *arguments], cwd=ROOT, process_group=0,
                               env={**os.environ, runs.ENV: runs.to_env(run)},
                               preexec_fn=lambda: stop_when_parent_dies(parent))
    forwarded = False
    while True:
        try:
            return process.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        if stop.signum is None and UNDER_MAKE is not None:
            signum = make_is_stopping(UNDER_MAKE)
            if signum is not None:
                stop(signum, None)
        if stop.signum is not None and not forwarded:
            process.send_signal(stop.signum)
            forwarded = True
        elif forwarded and time.monotonic() - stop.at > CHILD_GRACE_S:
            process.kill()


def refuse_reference_label(labs: list[Lab], label: str) -> str | None:
    """Why ``label`` cannot name this machine's records (it is a reference record's), or None."""
    for lab in labs:
        if reference_label(lab, ROOT) == label:
            return (f"machine label {label!r} is the label of the reference record {lab.record}; this machine's "
                    f"record would sit beside it as a second reference: pass MACHINE=<label> (--machine) to "
                    f"name this machine, or REFERENCE=1 (--reference) to replace the reference")
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("labs", nargs="*", help="lab names (default: every lab)")
    parser.add_argument("--reference", action="store_true", help="replace each lab's reference record")
    parser.add_argument("--machine", default=None, help="machine label (default: derived from CPU and threads)")
    parser.add_argument("--quick", action="store_true", help="each benchmark's --quick: a smoke test")
    with stop_on_signals() as stop:
        args = parser.parse_args(argv)
        try:
            label = derived_label() if args.machine is None else check_label(args.machine, "--machine")
        except LabelError as error:
            say(str(error))
            return 2
        if args.reference and args.quick:
            say("--quick (QUICK=1) is a smoke test and never replaces a reference record: drop one of the two")
            return 2
        try:
            labs = discover_labs(ROOT)
        except ManifestError as error:
            say(str(error))
            return 2
        unknown = set(args.labs) - {lab.name for lab in labs}
        if unknown:
            say(f"unknown lab(s) {sorted(unknown)}; known: {[lab.name for lab in labs]}")
            return 2
        chosen = [lab for lab in labs if not args.labs or lab.name in args.labs]
        if args.machine is None and not args.reference and refuse_reference_label(chosen, label):
            # A machine like the reference's derives the reference's label: plain `make bench` still just
            # refreshes this machine's tables, under a label of its own that the next plain run reuses.
            label = f"{label}{RERUN_SUFFIX}"
            say(f"the derived label is the reference record's; this machine's records are labelled {label!r}")
        refusal = None if args.reference else refuse_reference_label(chosen, label)
        if refusal:
            say(refusal)
            return 2
        run = runs.new_run([lab.name for lab in chosen], args.reference)
        say(f"writing {'the reference records' if args.reference else f'the records of machine {label!r}'}"
            + (" (quick runs)" if args.quick else "") + f", run {run['id']}")
        return run_all(chosen, args.reference, label, args.quick, stop, run)


def run_all(labs: list[Lab], reference: bool, label: str, quick: bool, stop: Stop, run: dict[str, Any]) -> int:
    """Each lab's benchmark in turn, every one handed the same ``run`` (labkit.runs); each lab's wall time and the
    whole run's are said as they end (a reference run of every lab is meant to fit in 20 minutes on a 2-core
    machine: the line says how close it came)."""
    failed, started = [], time.monotonic()
    for lab in labs:
        if stop.signum is not None:
            say(f"{STOP_WORDS[stop.signum]} before {lab.name}; it and the labs after it were not measured")
            return 128 + stop.signum
        if reference:
            found = machine_sample()
            busy = None if found is None else quiet.refusal(found)
            if busy:
                say(f"{lab.name}: not measured, its reference record kept: {busy}"
                    + ("; the labs after it were not measured" if lab is not labs[-1] else ""))
                return 2
        arguments = arguments_for(lab, reference, label, quick)
        # The machines folders are this run's to create (a benchmark creates none), and to remove again
        # when no record came of it: results/machines/<lab>, then results/machines.
        folder = ROOT / machine_record_path(lab, label).parent
        created = [] if reference else [f for f in (folder, folder.parent) if not f.exists()]
        if created:
            folder.mkdir(parents=True)
        say(f"{lab.name}: python {' '.join(arguments)}")
        lab_started = time.monotonic()
        code = run_one(arguments, stop, run)
        for empty in (f for f in created if code != 0 and not any(f.iterdir())):
            empty.rmdir()
        signum = stop.signum if stop.signum is not None else STOPPED.get(code)
        if signum is not None:  # the benchmark's own line said what became of its record
            say(f"{STOP_WORDS[signum]} during {lab.name}; the labs after it were not measured")
            return 128 + signum
        say(f"{lab.name}: {'done' if code == 0 else f'exit status {code}'} after {runs.minutes(time.monotonic() - lab_started)}")
        if code != 0:
            failed.append(lab.name)
    say(f"run {run['id']}: {len(labs) - len(failed)} of {len(labs)} benchmark(s) wrote a record in "
        f"{runs.minutes(time.monotonic() - started)}")
    if failed:
        say(f"failed: {', '.join(failed)}")
    return 1 if failed else 0



if __name__ == "__main__":
    UNDER_MAKE = parent_make()
    status = main(sys.argv[1:])
    if UNDER_MAKE is not None and status in (130, 143) and make_is_stopping(UNDER_MAKE) is None:
        # The interrupt reached the benchmark or this process only: end make by the same signal, so
        # `make bench` says 130 or 143 and not the 2 make gives any failed recipe. Exit only once make is
        # in its handler: a make that reaps this process first finds no child in its handler and ends
        # with 2 ("wait: No child processes"). Its SIGTERM to its recipe (this process) is held meanwhile.
        # NOTE: a make killed outright (SIGKILL) never enters a handler: once this process has been reparented, make
        # is gone and nothing is waited for (before, such a run waited out MAKE_HANDLER_S for a make that was dead).
        signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))
        if os.getppid() == UNDER_MAKE:
            os.kill(UNDER_MAKE, status - 128)
        handling_by = time.monotonic() + MAKE_HANDLER_S
        while (os.getppid() == UNDER_MAKE and make_is_stopping(UNDER_MAKE) != status - 128
               and time.monotonic() < handling_by):
            time.sleep(0.001)
    exit_now(status)  # no interpreter shutdown after the last line, for a signal to land in (labkit.exit)
