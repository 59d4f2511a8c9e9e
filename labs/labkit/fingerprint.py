"""A digest of the source files a measurement depends on, so a stale record can be recognised.

Which files, labkit.closure computes (a benchmark's import closure, less what only derives or writes a record);
each Python file is hashed on its syntax tree without docstrings, so a comment or a docstring changes nothing.
Each file's own sha256 is kept beside the overall digest, so a mismatch can name the files that changed.
Only the overall digest decides whether a record is fresh; ``changed_since`` says how the per-file list
must agree with it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .closure import measured_closure, normalized_source
from .manifest import Lab
from .records import path_text

ALGORITHM = "sha256-ast"  # sha256 over closure.normalized_source: a Python file's syntax tree, another file's bytes


def measured_files(lab: Lab, root: Path) -> list[str]:
    """The repository-relative paths of the files ``lab``'s benchmark measures with (labkit.closure)."""
    root = root.resolve()
    closure = measured_closure(root / lab.benchmark[0], root / lab.folder, root)
    return sorted(path.relative_to(root).as_posix() for path in closure)


def lab_fingerprint(lab: Lab, root: Path) -> dict[str, Any]:
    """The fingerprint of what ``lab``'s benchmark measures with, as its record stores it."""
    return source_fingerprint(root, measured_files(lab, root))


def source_fingerprint(root: Path, files: list[str]) -> dict[str, Any]:
    """sha256 over each file's relative path and normalized source (closure.normalized_source), in path order, and
    each file's own sha256 of the same."""
    digest = hashlib.sha256()
    per_file = {}
    for name in sorted(files):
        content = normalized_source(root / name)
        digest.update(name.encode() + b"\0")
        digest.update(content + b"\0")
        per_file[name] = hashlib.sha256(content).hexdigest()
    return {"algorithm": ALGORITHM, "digest": digest.hexdigest(), "files": per_file}


def changed_files(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Files whose content differs between two fingerprints, or that only one of them covers."""
    old, new = recorded["files"], current["files"]
    return sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))


class FingerprintError(ValueError):
    """A record's fingerprint that contradicts itself or today's files in a way no change of code explains."""


def _some(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def changed_since(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The measured files that changed since ``recorded`` was taken (empty: the record is fresh), once its
    fingerprint block is found whole; FingerprintError says what is wrong with one that is not.

    The overall digest covers every file's path and bytes, so it alone decides freshness; the per-file
    digests only name what changed, and no edit of them can make a stale record fresh or a fresh one stale.
    They must agree with the digest all the same:

    - The digest is today's: the record was measured on exactly the files the lab's benchmark measures with now, as
      they are now. Its list must hold those files, no fewer, no more, no others, each with the sha256 of
      the file today. Anything else was edited after the measurement.
    - The digest is not today's: the record is stale, and a change of code may have added, removed or
      renamed files since, so the list may differ from today's in any way, and the files that differ
      (content, or listed on one side only) are what changed. But if none differs, the list describes
      today's files exactly while the digest says they are not what was measured: one was edited.
    """
    listed, today = recorded["files"], current["files"]
    if recorded["digest"] == current["digest"]:
        missing, extra = sorted(today.keys() - listed.keys()), sorted(listed.keys() - today.keys())
        if missing or extra:
            differences = ([f"not listed: {_some(missing)}"] if missing else []) + (
                [f"measured by no benchmark: {_some(extra)}"] if extra else [])
            raise FingerprintError(
                f"field $.fingerprint.files lists {len(listed)} files, but the lab's benchmark measures with "
                f"{len(today)} ({'; '.join(differences)}), while $.fingerprint.digest is the digest of exactly "
                f"those {len(today)} files as they are: the list was edited")
        for name in sorted(today):
            if listed[name] != today[name]:
                raise FingerprintError(
                    f"field {path_text(('fingerprint', 'files', name))} is {listed[name]}, but the file's sha256 "
                    f"is {today[name]}, while $.fingerprint.digest covers its bytes as they are: the hash was edited")
        return []
    changed = changed_files(recorded, current)
    if not changed:
        raise FingerprintError(
            f"field $.fingerprint.digest is {recorded['digest']}, but each of the {len(listed)} files it lists has "
            f"the sha256 the record gives it, and together they digest to {current['digest']}: the digest or a "
            f"file's hash was edited")
    return changed
