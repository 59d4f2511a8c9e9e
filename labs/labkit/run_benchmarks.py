"""Run every registered lab's benchmark, as its lab.toml states it: what `make bench` does.

    labs/.venv/bin/python -m labkit.run_benchmarks [--reference] [--machine LABEL] [lab-name ...]

By default each benchmark writes this machine's record, results/machines/<lab>/<label>.json, and the
committed reference record stays as it is; --reference (make bench REFERENCE=1) replaces the
reference instead. The label is --machine (make bench MACHINE=...) or derived from the CPU model and
thread count. Each benchmark writes its record atomically; one failing does not stop the others, and
the exit status is non-zero if any failed. Ctrl-C stops the running benchmark (which keeps its
previous record) and the rest, in one line.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

from labkit.machines import LabelError, check_label, derived_label, machine_record_path
from labkit.manifest import Lab, discover_labs

ROOT = Path(__file__).resolve().parents[2]
CHILD_GRACE_S = 10  # for an interrupted benchmark to finish a record write it was in the middle of


def say(message: str) -> None:
    print(f"run_benchmarks: {message}", file=sys.stderr, flush=True)


def arguments_for(lab: Lab, reference: bool, label: str) -> list[str]:
    """The lab.toml's command, writing the reference or this machine's record."""
    if reference:
        return [*lab.benchmark_arguments(), "--machine", label]
    return [*lab.benchmark_arguments(machine_record_path(lab, label).as_posix()), "--machine", label]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("labs", nargs="*", help="lab names (default: every lab)")
    parser.add_argument("--reference", action="store_true", help="replace each lab's reference record")
    parser.add_argument("--machine", default="", help="machine label (default: derived from CPU and threads)")
    args = parser.parse_args(argv)
    try:
        label = check_label(args.machine, "--machine") if args.machine else derived_label()
    except LabelError as error:
        say(str(error))
        return 2
    labs = discover_labs(ROOT)
    unknown = set(args.labs) - {lab.name for lab in labs}
    if unknown:
        say(f"unknown lab(s) {sorted(unknown)}; known: {[lab.name for lab in labs]}")
        return 2
    say(f"writing {'the reference records' if args.reference else f'the records of machine {label!r}'}")
    failed = []
    for lab in (lab for lab in labs if not args.labs or lab.name in args.labs):
        arguments = arguments_for(lab, args.reference, label)
        if not args.reference:  # the machines folder is this run's to create; a benchmark creates none
            (ROOT / machine_record_path(lab, label)).parent.mkdir(parents=True, exist_ok=True)
        say(f"{lab.name}: python {' '.join(arguments)}")
        process = subprocess.Popen([sys.executable, *arguments], cwd=ROOT)
        # SIGTERM to make bench reaches the benchmark too, which keeps its record and says so.
        signal.signal(signal.SIGTERM, lambda signum, frame, child=process: child.terminate())
        try:
            code = process.wait()
        except KeyboardInterrupt:  # the child got the same Ctrl-C: let it say what became of its record
            try:
                process.wait(timeout=CHILD_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
            say(f"interrupted during {lab.name}; the labs after it were not measured")
            return 130
        if code == 143:
            say(f"terminated during {lab.name}; the labs after it were not measured")
            return 143
        if code != 0:
            failed.append(lab.name)
    if failed:
        say(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
