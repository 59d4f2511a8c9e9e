"""Reading, validating and atomically writing measurement records."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable


class RecordError(ValueError):
    """A record that is missing, not JSON, or not valid against its schema."""


def atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    """Write to a temporary file beside ``path``, then rename: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2, allow_nan=False)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_json(path: Path, what: str, label: str | None = None) -> Any:
    """Parse a JSON file; errors name it as ``label`` (default: the path)."""
    name = label or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(f"{name}: {what} not found") from None
    except OSError as error:
        raise RecordError(f"{name}: cannot read {what}: {error.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise RecordError(f"{name}: {what} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None


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


def load_record(path: Path, schema_path: Path, root: Path | None = None) -> dict[str, Any]:
    """Load and validate a record; every failure is one RecordError line naming the file and field.

    With ``root``, files are named relative to it in messages.
    """
    def label(file: Path) -> str:
        return file.relative_to(root).as_posix() if root and file.is_relative_to(root) else str(file)

    schema = load_json(schema_path, "record schema", label(schema_path))
    record = load_json(path, "measurement record", label(path))
    validate_record(record, schema, label(path), schema_registry(schema_path.parent))
    return record
