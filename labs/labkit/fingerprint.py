"""A digest of the source files a measurement depends on, so a stale record can be recognised."""

from __future__ import annotations

import hashlib
from pathlib import Path


def fingerprint_files(root: Path, globs: tuple[str, ...] | list[str]) -> list[str]:
    """Sorted repository-relative paths matched by ``globs``; a glob matching nothing is an error."""
    files: set[str] = set()
    for pattern in globs:
        matched = [p for p in root.glob(pattern) if p.is_file() and "__pycache__" not in p.parts]
        if not matched:
            raise ValueError(f"fingerprint glob {pattern!r} matches no file under {root}")
        files.update(p.relative_to(root).as_posix() for p in matched)
    return sorted(files)


def source_fingerprint(root: Path, globs: tuple[str, ...] | list[str]) -> dict[str, object]:
    """sha256 over each file's relative path and bytes, in path order."""
    files = fingerprint_files(root, globs)
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0")
        digest.update((root / name).read_bytes() + b"\0")
    return {"algorithm": "sha256", "digest": digest.hexdigest(), "files": files}
