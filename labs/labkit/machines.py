"""Records from several machines: one reference per lab, and any number of others named by a label.

    results/cache-results.json                  the reference: the article's prose and tables
    results/machines/kv-cache/<label>.json      one record per other machine, e.g. amd-epyc.json

``make bench`` writes this machine's record under its label and never touches the reference;
``make bench REFERENCE=1`` replaces the reference. A label is given (``MACHINE=...``) or derived from
the CPU model and the thread count the benchmarks run with.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .environment import cpu_model
from .manifest import Lab
from .records import RecordError, read_bounded

MACHINES_DIR = Path("results") / "machines"
LABEL = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")  # whole label (fullmatch): "$" would let "abc\n" through


class LabelError(ValueError):
    """A machine label that cannot name a file."""


def check_label(label: str, where: str) -> str:
    if not LABEL.fullmatch(label) or ".." in label:
        raise LabelError(f"{where}: machine label {label!r} must be 1-64 characters of a-z, 0-9, '.', '_' "
                         f"or '-', starting with a letter or digit (it names a file)")
    return label


def derived_label(cpu: str | None = None) -> str:
    """'AMD EPYC 7B13' -> 'amd-epyc-7b13'. NOTE: the machine, not a benchmark's settings: a label that carried a
    thread count ('-1t') misnamed every lab that times at more than one (the decode lab at 1 and 2 threads, the
    serving engine at 2); each record states its threads in its config and environment."""
    slug = re.sub(r"[^a-z0-9]+", "-", (cpu or cpu_model()).lower()).strip("-")[:56] or "cpu"
    return slug


def machine_record_path(lab: Lab, label: str) -> Path:
    """Where the record of machine ``label`` for ``lab`` lives, relative to the repository root."""
    return MACHINES_DIR / lab.name / f"{check_label(label, 'MACHINE')}.json"


def reference_label(lab: Lab, root: Path) -> str | None:
    """The machine label of the lab's reference record; None when there is none to read (a record that
    cannot be read is the build's to report, not a label clash)."""
    try:
        label = json.loads(read_bounded(root / lab.record, "reference record", str(lab.record), root)).get("machine")
    except (RecordError, ValueError, AttributeError):
        return None
    return label if isinstance(label, str) else None


def machine_records(lab: Lab, root: Path) -> list[Path]:
    """Every other machine's record of ``lab``, by file name (dangling symlinks included: reading them
    says what they are). The folder itself must lie inside the repository."""
    folder = root / MACHINES_DIR / lab.name
    if not os.path.lexists(folder):
        return []
    real, inside = Path(os.path.realpath(folder)), Path(os.path.realpath(root))
    if not real.is_relative_to(inside):
        raise RecordError(f"{folder.relative_to(root)}: folder of machine records resolves to {real}, outside "
                          f"the repository {inside}; its records must be files of the repository")
    if not folder.is_dir():
        raise RecordError(f"{folder.relative_to(root)}: is not a folder of machine records (a file, or a symlink "
                          f"to nothing)")
    return sorted(path for path in folder.iterdir() if path.name.endswith(".json"))
