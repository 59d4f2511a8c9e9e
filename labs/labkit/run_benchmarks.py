"""Run every registered lab's benchmark, as its lab.toml states it: what `make bench` does.

    labs/.venv/bin/python labs/labkit/run_benchmarks.py [lab-name ...]

Each benchmark writes its own record atomically; one failing does not stop
the others, and the exit status is non-zero if any failed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: make labkit importable

from labkit.manifest import discover_labs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    labs = discover_labs(ROOT)
    unknown = set(argv) - {lab.name for lab in labs}
    if unknown:
        print(f"run_benchmarks: unknown lab(s) {sorted(unknown)}; known: {[lab.name for lab in labs]}", file=sys.stderr)
        return 2
    failed = []
    for lab in (lab for lab in labs if not argv or lab.name in argv):
        arguments = lab.benchmark_arguments()
        print(f"run_benchmarks: {lab.name}: python {' '.join(arguments)}", file=sys.stderr, flush=True)
        if subprocess.run([sys.executable, *arguments], cwd=ROOT).returncode != 0:
            failed.append(lab.name)
    if failed:
        print(f"run_benchmarks: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
