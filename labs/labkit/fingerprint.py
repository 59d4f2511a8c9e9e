"""A digest of the source files a measurement depends on, so a stale record can be recognised.

Each file's own sha256 is kept beside the overall digest, so a mismatch can name the files that changed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


def fingerprint_files(root: Path, globs: tuple[str, ...] | list[str]) -> list[str]:
    """Sorted repository-relative paths matched by ``globs``; a glob matching nothing is an error."""
    files: set[str] = set()
    for pattern in globs:
        matched = [p for p in root.glob(pattern) if p.is_file() and "__pycache__" not in p.parts]
        if not matched:
            raise ValueError(f"fingerprint glob {pattern!r} matches no file under {root}")
        files.update(p.relative_to(root).as_posix() for p in matched)
    return sorted(files)


def source_fingerprint(root: Path, globs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """sha256 over each file's relative path and bytes, in path order, and each file's own sha256."""
    files = fingerprint_files(root, globs)
    digest = hashlib.sha256()
    per_file = {}
    for name in files:
        content = (root / name).read_bytes()
        digest.update(name.encode() + b"\0")
        digest.update(content + b"\0")
        per_file[name] = hashlib.sha256(content).hexdigest()
    return {"algorithm": "sha256", "digest": digest.hexdigest(), "files": per_file}


def changed_files(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Files whose content differs between two fingerprints, or that only one of them covers."""
    old, new = recorded["files"], current["files"]
    return sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))
