"""Run every registered lab's benchmark, as its lab.toml states it: what `make bench` does.

    labs/.venv/bin/python -m labkit.run_benchmarks [lab-name ...]

Each benchmark writes its own record atomically; one failing does not stop
the others, and the exit status is non-zero if any failed. Ctrl-C stops the
running benchmark (which keeps its previous record) and the rest, in one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from labkit.manifest import discover_labs

ROOT = Path(__file__).resolve().parents[2]
CHILD_GRACE_S = 10  # for an interrupted benchmark to finish a record write it was in the middle of


def say(message: str) -> None:
    print(f"run_benchmarks: {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    labs = discover_labs(ROOT)
    unknown = set(argv) - {lab.name for lab in labs}
    if unknown:
        say(f"unknown lab(s) {sorted(unknown)}; known: {[lab.name for lab in labs]}")
        return 2
    failed = []
    for lab in (lab for lab in labs if not argv or lab.name in argv):
        arguments = lab.benchmark_arguments()
        say(f"{lab.name}: python {' '.join(arguments)}")
        process = subprocess.Popen([sys.executable, *arguments], cwd=ROOT)
        try:
            code = process.wait()
        except KeyboardInterrupt:  # the child got the same Ctrl-C: let it say what became of its record
            try:
                process.wait(timeout=CHILD_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
            say(f"interrupted during {lab.name}; the labs after it were not measured")
            return 130
        if code != 0:
            failed.append(lab.name)
    if failed:
        say(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
