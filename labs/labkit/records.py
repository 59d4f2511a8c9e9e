"""Reading, validating and atomically writing measurement records.

A record, the reference or a machine's, is a regular file inside the repository of at most
``MAX_RECORD_BYTES``, read once. A symlink is followed only to such a file, and a ``results/machines/<lab>``
folder must lie inside the repository too. A FIFO, a device, a folder, a dangling or looping symlink, a file
outside the repository or a larger file is refused in one line naming the file and what is wrong with it,
without reading it. Inside, nesting beyond ``MAX_DEPTH`` levels, a string or key beyond ``MAX_STRING_CHARS``
characters and a lone surrogate are refused in one line naming the JSON path; then the lab's JSON Schema
(``results/<record>.schema.json``, with the shared header of ``record-common.schema.json``) decides the rest.
A record is written to a temporary file beside its path and renamed into place, with signals held during the
rename, so a reader never sees half of one and an interrupted write leaves the previous record byte-identical.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from .signals import signals_held, sigterm_unwinds


class RecordError(ValueError):
    """A record that is missing, not JSON, or not valid against its schema."""


MAX_RECORD_BYTES = 16 * 2**20  # 16 MiB: the largest committed record is under 1 MB; a bound, not a budget
# Every string and key of any record: the longest committed one, torch's build configuration, is about 2,000
# characters. A page renders a record's strings, some of them more than once (and the search index again): a
# 15 MiB CPU name would make a page of 90 MB. The shared header's schema bounds its own fields far tighter.
MAX_STRING_CHARS = 64 * 1024
MAX_DEPTH = 32  # levels of arrays and objects; committed records nest 7 deep, their schemas 13


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


Key = str | int
JsonPath = tuple[Key, ...]
PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def path_text(path: JsonPath) -> str:
    """('lengths', 3, 'modes', 'ours-concat') -> '$.lengths[3].modes.ours-concat'; other keys quoted."""
    parts = ["$"]
    for key in path:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif PLAIN_KEY.fullmatch(key):
            parts.append(f".{key}")
        else:
            parts.append(f"[{json.dumps(key)}]")
    return "".join(parts)


def _lone_surrogate(text: str) -> int | None:
    """The index of the first code point no UTF-8 text can carry (a lone \\ud800 escape), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def _string_problem(text: str) -> str | None:
    """What no string or key of a record may be, as words after "a string" or "a key"; None for nearly all."""
    if len(text) <= MAX_STRING_CHARS and text.isascii():  # nearly every string: nothing to look at further
        return None
    if len(text) > MAX_STRING_CHARS:
        return f"of {len(text)} characters, more than the {MAX_STRING_CHARS} a string of a record may hold"
    at = _lone_surrogate(text)
    if at is not None:
        return (f"holding a lone surrogate (\\u{ord(text[at]):04x} at character {at}), which no UTF-8 text can "
                f"carry")
    return None


def _unfit(path: JsonPath, key: Key, item: Any) -> str | None:
    """What is wrong with ``item``, stored under ``key`` at ``path``; the path is spelled only for a refusal."""
    if type(key) is str and (problem := _string_problem(key)):
        return f"{path_text(path)} holds a key {problem}"
    if type(item) is str and (problem := _string_problem(item)):
        return f"{path_text((*path, key))} is a string {problem}"
    if type(item) is _NonFinite:
        return f"{path_text((*path, key))} is {item.text}"  # type: ignore[attr-defined]
    if type(item) in (dict, list) and len(path) + 1 >= MAX_DEPTH:
        return (f"{path_text((*path, key))} nests arrays or objects more than {MAX_DEPTH} levels deep, deeper "
                f"than any record")
    return None


def _children(item: dict[str, Any] | list[Any]) -> Iterator[tuple[Key, Any]]:
    return iter(item.items()) if isinstance(item, dict) else enumerate(item)


def _find_unfit(value: Any) -> str | None:
    """The first value, in document order, that no record may hold, as "<JSON path> <what is wrong>": a NaN or
    an infinity, a string (or key) beyond MAX_STRING_CHARS or with a lone surrogate, arrays and objects nested
    beyond MAX_DEPTH. Walked with a stack of its own (one frame per open array or object), not by recursion: a
    record nested a thousand levels deep must be refused in one line, not by exhausting the interpreter's."""
    if type(value) is str and (problem := _string_problem(value)):
        return f"$ is a string {problem}"
    if type(value) is _NonFinite:
        return f"$ is {value.text}"  # type: ignore[attr-defined]
    if type(value) not in (dict, list):
        return None
    frames: list[tuple[JsonPath, Iterator[tuple[Key, Any]]]] = [((), _children(value))]
    while frames:
        path, children = frames[-1]
        for key, item in children:
            if problem := _unfit(path, key, item):
                return problem
            if type(item) in (dict, list):
                frames.append(((*path, key), _children(item)))
                break
        else:
            frames.pop()
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
    ``label`` (default: the path). NaN, Infinity, a key repeated within one object, a string or key of more
    than MAX_STRING_CHARS or with a lone surrogate, and nesting beyond MAX_DEPTH are refused, naming the field."""
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
    except RecursionError:  # the parser's own recursion: far deeper than the walk below would allow
        raise RecordError(f"{name}: {what} nests arrays or objects too deeply to parse, more than the "
                          f"{MAX_DEPTH} levels a record may") from None
    found = _find_unfit(data)
    if found:
        raise RecordError(f"{name}: field {found}: a {what} holds finite numbers, bounded Unicode strings and "
                          f"at most {MAX_DEPTH} levels of nesting")
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
