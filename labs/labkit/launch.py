"""The first code a lab's benchmark script runs: Ctrl-C or SIGTERM from then on ends it with one line.

A lab's ``benchmark.py`` (named in its lab.toml) is two lines that call ``launch("<package>.benchmark")``
before anything heavy is imported, so an interrupt while torch loads prints no traceback either. This
module imports the standard library only, for the same reason.

The interrupt contract, from the moment ``launch`` runs until the process ends: Ctrl-C or SIGTERM ends the run
in one line with status 130 or 143, and the previous record is untouched (labkit.records holds a signal back
while the new record is renamed into place, so the line says whether it was written). The process leaves
without an interpreter shutdown, so there is no window after the last line. The first few tens of
milliseconds of interpreter startup come before any project code and cannot be caught: a signal there ends
the process with Python's own behaviour (no line, or a ``KeyboardInterrupt`` traceback), and the previous
record is untouched all the same.

A malformed LABKIT_RUN (the run make bench hands each benchmark, labkit.runs) ends the process in one line with
status 1, before the module is imported and anything is measured.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn

from .environment import HUGE_PAGES
from .exit import exit_now
from .runs import RunError, from_env
from .signals import EXIT_INTERRUPTED, Terminated, exit_quietly_on_interrupt, signal_name

# NOTE: with HUGE_PAGES, PyTorch's allocator asks the kernel for 2 MiB pages for every allocation of 2 MiB or more
# (read once, at torch's first allocation, so it is set before torch loads; the servers a benchmark starts inherit
# it). On 4 KiB pages the one-call step over the same packed weights took from 52 to 57 ms, one process to the
# next, on a 2-core Xeon (SmolLM2, context 512, one thread, seven processes); on huge pages 49 to 50 ms in seven
# of eight: where a step's 0.5 GB of weights sat decided a tenth of its time, and a run could not repeat another's.
# A kernel whose transparent huge pages are off ignores the request; the record keeps both settings
# (labkit.environment.memory).


def launch(module: str, argv: list[str] | None = None) -> NoReturn:
    """Import ``module``, run its ``main(argv)`` and end the process with its status; an interrupt is one
    line from the moment this runs, and during the record's write it unwinds through the write's cleanup
    (labkit.records). Torch's large allocations go on huge pages (HUGE_PAGES) unless the caller's environment
    already says otherwise."""
    os.environ.setdefault(*HUGE_PAGES)
    exit_quietly_on_interrupt()
    try:  # the run make bench handed down (labkit.runs), checked before anything heavy loads; the record reads it again
        from_env()
    except RunError as error:
        print(f"benchmark: {error}; nothing was measured", file=sys.stderr, flush=True)
        exit_now(1)
    try:
        main = importlib.import_module(module).main
        code = int(main(argv))
    except (KeyboardInterrupt, Terminated) as stop:
        print(f"benchmark: interrupted ({signal_name(stop)}) outside the measurement; "
              f"no record was left half-written", file=sys.stderr, flush=True)
        code = EXIT_INTERRUPTED[signal_name(stop)]
    # Leave now, skipping the interpreter's shutdown: a signal in its half second would end the process
    # with no line. Nothing is lost: the record was written, fsynced and renamed before main returned,
    # and exit_now flushes the streams.
    exit_now(code)


if __name__ == "__main__":
    launch(sys.argv[1], sys.argv[2:])
