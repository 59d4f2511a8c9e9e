"""A lab's own part of the site: the torch-free module its lab.toml names under ``views``.

The module sits in the lab's folder (``<name>.py`` or a package ``<name>/``) and is loaded from there
by path, so a new lab needs no installation for its pages. It may define ``VIEWS`` (view name ->
function of Evidence), ``check_record(record, source)`` (raises RecordError for a figure the rest of
the record contradicts) and ``headline(record)`` (ratios measured within one run, for comparing
machines). A lab without the key uses the shared views only.

An edit to any .py file of the views module reloads it on the next build, so `mkdocs serve` shows it;
site_hooks and labkit themselves are imported once per process (a server restart picks up their edits).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from labkit.manifest import Lab

from .errors import SiteBuildError


def module_file(lab: Lab) -> Path:
    assert lab.views is not None and lab.root is not None
    folder = lab.root / lab.folder
    for candidate in (folder / lab.views / "__init__.py", folder / f"{lab.views}.py"):
        if candidate.is_file():
            return candidate
    raise SiteBuildError(f"{lab.folder}/lab.toml: views module {lab.views!r} is neither "
                         f"{lab.folder}/{lab.views}.py nor a package {lab.folder}/{lab.views}/")


Stamps = tuple[tuple[str, int, int], ...]

# Deliberate per-process cache: views module name -> the (file, mtime, size) of each of its .py files when
# it was loaded. `mkdocs serve` rebuilds in one process, so an edit to any of them must reload the module.
_stamps: dict[str, Stamps] = {}


def source_stamps(path: Path) -> Stamps:
    """(file, mtime in ns, size) of the views module's file, or of every .py file of its package."""
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    stamps = []
    for file in files:
        if "__pycache__" not in file.parts:
            status = file.stat()
            stamps.append((str(file), status.st_mtime_ns, status.st_size))
    return tuple(stamps)


def forget(name: str) -> None:
    """Drop a module and its submodules, so the next import reads their files again."""
    for loaded in [key for key in sys.modules if key == name or key.startswith(f"{name}.")]:
        del sys.modules[loaded]


def lab_module(lab: Lab) -> ModuleType | None:
    """The lab's views module, loaded once per process and again whenever one of its files changed."""
    if lab.views is None:
        return None
    path = module_file(lab)
    stamps = source_stamps(path)
    loaded = sys.modules.get(lab.views)
    if loaded is not None and Path(getattr(loaded, "__file__", "")) == path:
        # Imported by a plain `import` before this module saw it (a lab test, another lab's views): adopt it.
        known = _stamps.setdefault(lab.views, stamps)
        if known == stamps:
            return loaded
    forget(lab.views)
    importlib.invalidate_caches()  # a submodule added since the last load must be found
    package = [str(path.parent)] if path.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(lab.views, path, submodule_search_locations=package)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[lab.views] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        forget(lab.views)
        raise SiteBuildError(f"{path.relative_to(lab.root)}: cannot load the lab's views: "  # type: ignore[arg-type]
                             f"{type(error).__name__}: {error}") from error
    _stamps[lab.views] = stamps
    return module


def lab_views(lab: Lab) -> dict[str, Callable[..., str]]:
    module = lab_module(lab)
    return dict(getattr(module, "VIEWS", {})) if module else {}


def lab_check(lab: Lab) -> Callable[[dict[str, Any], str], None] | None:
    module = lab_module(lab)
    return getattr(module, "check_record", None) if module else None


def lab_headline(lab: Lab) -> Callable[[dict[str, Any]], list[tuple[str, float]]] | None:
    module = lab_module(lab)
    return getattr(module, "headline", None) if module else None
