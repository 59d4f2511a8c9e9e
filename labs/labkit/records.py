"""Reading, validating and atomically writing measurement records."""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from .signals import signals_held, sigterm_unwinds


class RecordError(ValueError):
    """A record that is missing, not JSON, or not valid against its schema."""


MAX_RECORD_BYTES = 16 * 2**20  # 16 MiB: the largest committed record is under 1 MB; a bound, not a budget


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(path: Path, what: str, name: str, root: Path | None = None,
                 limit: int = MAX_RECORD_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, read once; with ``root``, the file (after
    every symlink) must lie inside it. Anything else is one RecordError line naming the file: a device
    or FIFO is never read (opened non-blocking, checked on the open descriptor), a dangling or looping
    symlink is named as such."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise RecordError(f"{name}: {what} not found" + (" (a symlink to nothing)" if path.is_symlink() else "")) from None
    except OSError as error:  # ELOOP: a symlink to itself, or a cycle
        raise RecordError(f"{name}: cannot read {what}: {error.strerror}") from None
    if not stat.S_ISREG(status.st_mode):
        raise RecordError(f"{name}: {what} is {_kind(status.st_mode)}; a record must be a regular file")
    if root is not None:
        real, inside = Path(os.path.realpath(path)), Path(os.path.realpath(root))
        if not real.is_relative_to(inside):
            raise RecordError(f"{name}: {what} resolves to {real}, outside the repository {inside}; "
                              f"a record must be a file of the repository")
    try:  # O_NONBLOCK: opening a FIFO with no writer would wait for ever
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise RecordError(f"{name}: cannot read {what}: {error.strerror}") from None
    with os.fdopen(handle, "rb") as stream:
        status = os.fstat(handle)  # the file actually opened, whatever the path pointed to before
        if not stat.S_ISREG(status.st_mode):
            raise RecordError(f"{name}: {what} is {_kind(status.st_mode)}; a record must be a regular file")
        if status.st_size > limit:
            raise RecordError(f"{name}: {what} is {status.st_size} bytes, more than the limit of {limit} "
                              f"bytes ({limit // 2**20} MiB) for a record")
        data = stream.read(limit + 1)  # a file growing after the fstat is caught here
    if len(data) > limit:
        raise RecordError(f"{name}: {what} is more than the limit of {limit} bytes ({limit // 2**20} MiB) for a record")
    return data


def _mode_for(path: Path) -> int:
    """The mode a plain write would give: the replaced file's, or what the umask leaves of 0666."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def temporary_files(path: Path) -> list[Path]:
    """Temporary files an earlier write of ``path`` left behind (a SIGKILL mid-write leaves one)."""
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def atomic_write_json(path: Path, data: dict[str, Any], then: Callable[[], None] | None = None) -> None:
    """Write to a temporary file beside ``path``, then rename: readers see the old or the new file.
    SIGTERM during the write unwinds through the cleanup below, so no temporary file is left.

    The rename, the return of the previous signal handlers and ``then`` (a benchmark's: from here on an
    interrupt says the record is written) run with SIGINT and SIGTERM held back, so an interrupt comes
    before the rename (the previous record is intact, and it is raised) or after ``then``. One that
    arrived just before, whose Python handler runs after the rename, is raised with ``record_written``
    set on it: the record is the new one all the same."""
    with sigterm_unwinds() as restore:
        _write_then_rename(path, data, restore, then)


def _write_then_rename(path: Path, data: dict[str, Any], restore: Callable[[], None],
                       then: Callable[[], None] | None) -> None:
    for leftover in temporary_files(path):
        leftover.unlink(missing_ok=True)
    mode = _mode_for(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2, allow_nan=False)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        with signals_held():
            os.replace(temporary, path)
            restore()
            if then is not None:
                then()
    except BaseException as stop:
        if os.path.lexists(temporary):
            Path(temporary).unlink(missing_ok=True)
        else:  # renamed: whatever stopped us came after the record was replaced, and must say so
            stop.record_written = True  # type: ignore[attr-defined]
        raise


class _NonFinite(float):
    """Stands for a NaN or Infinity constant while the document is parsed, so its field can be named."""

    def __new__(cls, text: str) -> _NonFinite:
        number = super().__new__(cls, text if text in ("NaN", "Infinity", "-Infinity") else "inf")
        number.text = text  # type: ignore[attr-defined]
        return number


def _float_or_non_finite(text: str) -> float:
    """1e999 parses to inf without passing through parse_constant: catch it here, keeping its text."""
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _find_non_finite(value: Any, path: str = "$") -> str | None:
    if isinstance(value, _NonFinite):
        return f"{path} is {value.text}"  # type: ignore[attr-defined]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _find_non_finite(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
        if found:
            return found
    return None


class _DuplicateKey(ValueError):
    """A key that appears twice in one JSON object: json keeps the last silently, hiding the first."""


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen.add(key)
    return dict(pairs)


def load_json(path: Path, what: str, label: str | None = None, root: Path | None = None) -> Any:
    """Parse a JSON file, read as ``read_bounded`` reads it (with ``root``: inside it); errors name it as
    ``label`` (default: the path). NaN, Infinity and a key repeated within one object are refused."""
    name = label or str(path)
    data = read_bounded(path, what, name, root)
    if data.startswith(b"\xef\xbb\xbf"):  # the request bodies of the serving lab follow the same rule
        raise RecordError(f"{name}: {what} starts with a UTF-8 byte order mark; JSON is UTF-8 without one (RFC 8259)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordError(f"{name}: {what} is not UTF-8 text (byte {error.start})") from None
    try:
        data = json.loads(text, parse_constant=_NonFinite, parse_float=_float_or_non_finite,
                          object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as error:
        raise RecordError(f"{name}: {what} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    except _DuplicateKey as key:
        raise RecordError(f"{name}: {what} holds key {key.args[0]!r} twice in one object; "
                          f"which value counts would be JSON's silent choice") from None
    found = _find_non_finite(data)
    if found:
        raise RecordError(f"{name}: field {found}: a {what} holds finite numbers only")
    return data


def schema_registry(folder: Path) -> Registry:
    """Every *.schema.json in ``folder``, by its $id, so lab schemas can $ref the shared one."""
    resources = []
    for path in sorted(folder.glob("*.schema.json")):
        schema = load_json(path, "record schema")
        resources.append((schema.get("$id", path.name), Resource.from_contents(schema)))
    return Registry().with_resources(resources)


def validate_record(record: Any, schema: dict[str, Any], source: str, registry: Registry | None = None) -> None:
    """Raise RecordError naming the first invalid field, as a JSON path."""
    validator = jsonschema.Draft202012Validator(schema, registry=registry or Registry())
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(record))
    except Unresolvable as problem:  # the schema, not the record, is broken
        raise RecordError(f"{source}: its schema cannot be used: unresolvable reference {problem}") from None
    if error is not None:
        message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
        raise RecordError(f"{source}: field {error.json_path} is invalid: {message}")


def check_lab(record: Any, expected: str, source: str) -> None:
    """Before the schema: a record written for another lab is named as such, not as a missing field."""
    lab = record.get("lab") if isinstance(record, dict) else None
    if lab != expected:
        belongs = f"this record belongs to lab {lab!r}" if isinstance(lab, str) else "it names no lab"
        raise RecordError(f"{source}: field $.lab: {belongs}, but this file is the record of lab {expected!r}")


def load_record(path: Path, schema_path: Path, root: Path | None = None, lab: str | None = None) -> dict[str, Any]:
    """Load and validate a record; every failure is one RecordError line naming the file and field.

    With ``root``, files are named relative to it in messages and must lie inside it; with ``lab``, the record must be that lab's.
    """
    def label(file: Path) -> str:
        return file.relative_to(root).as_posix() if root and file.is_relative_to(root) else str(file)

    schema = load_json(schema_path, "record schema", label(schema_path), root)
    record = load_json(path, "measurement record", label(path), root)
    if lab is not None:
        check_lab(record, lab, label(path))
    validate_record(record, schema, label(path), schema_registry(schema_path.parent))
    return record
