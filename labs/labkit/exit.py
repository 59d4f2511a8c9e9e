"""Leave a process at once with a status, its output flushed: no interpreter shutdown after the last line.

A normal exit runs the interpreter's shutdown (atexit handlers, module teardown, thread joins), which can take
half a second after the last line is printed. A SIGINT or SIGTERM landing in that window ends the process with
no line and a signal's exit code instead of the one the program chose. ``os._exit`` skips that window; it also
skips flushing Python's buffers, so they are flushed here first. Standard library only: launchers call it
before or without heavy imports.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_now(status: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with ``status``, skipping the interpreter's shutdown.
    Call it only once everything that must outlive the process is on disk (records are fsynced and renamed
    before their writer returns)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(status)
