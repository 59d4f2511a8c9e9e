"""The first code a lab's benchmark script runs: Ctrl-C or SIGTERM at any moment ends it with one line.

A lab's ``benchmark.py`` (named in its lab.toml) is two lines that call ``launch("<package>.benchmark")``
before anything heavy is imported, so an interrupt while torch loads prints no traceback either. This
module imports the standard library only, for the same reason.
"""

from __future__ import annotations

import importlib
import sys

from .signals import EXIT_INTERRUPTED, Terminated, exit_quietly_on_interrupt, signal_name


def launch(module: str, argv: list[str] | None = None) -> int:
    """Import ``module`` and return its ``main(argv)``; an interrupt at any moment is one line, and
    during the record's write it unwinds through the write's cleanup (labkit.records)."""
    exit_quietly_on_interrupt()
    try:
        main = importlib.import_module(module).main
        return int(main(argv))
    except (KeyboardInterrupt, Terminated) as stop:
        print(f"benchmark: interrupted ({signal_name(stop)}) outside the measurement; "
              f"no record was left half-written", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED[signal_name(stop)]


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1], sys.argv[2:]))
