"""A lab's own part of the site: the two torch-free modules its lab.toml names.

``figures`` (for example ``kv_cache.figures``, a module of the lab's package) derives every figure of
the record that follows from its raw data, ``derive(record) -> labkit.figures.Figures``, and refuses what
the raw data themselves contradict, ``check_invariants(record, source)``; the benchmark fills its record
with the same ``derive``. ``views`` (``<name>.py`` or a package ``<name>/``) holds ``VIEWS`` (view name ->
function of the record returning a ``site_hooks.blocks.Block``) and ``headline(record)`` (ratios
measured within one run, for comparing machines). A lab without a key uses the shared part only.

Both are loaded from the lab's folder by path (their top-level package first), so a new lab needs no
installation for its pages. An edit to any .py file of a loaded package reloads it on the next build, so
`mkdocs serve` shows it; site_hooks and labkit themselves are imported once per process (a server restart
picks up their edits).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from labkit.figures import check_record
from labkit.manifest import Lab

from .blocks import View
from .errors import SiteBuildError


def module_file(lab: Lab, name: str) -> Path:
    """The file of the top-level module or package ``name`` in the lab's folder."""
    assert lab.root is not None
    folder = lab.root / lab.folder
    for candidate in (folder / name / "__init__.py", folder / f"{name}.py"):
        if candidate.is_file():
            return candidate
    raise SiteBuildError(f"{lab.folder}/lab.toml: module {name!r} is neither {lab.folder}/{name}.py "
                         f"nor a package {lab.folder}/{name}/")


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


def top_module(lab: Lab, name: str) -> ModuleType:
    """The lab's top-level module ``name``, loaded once per process and again whenever one of its files changed."""
    path = module_file(lab, name)
    stamps = source_stamps(path)
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "")) == path:
        # Imported by a plain `import` before this module saw it (a lab test, another lab's views): adopt it.
        known = _stamps.setdefault(name, stamps)
        if known == stamps:
            return loaded
    forget(name)
    importlib.invalidate_caches()  # a submodule added since the last load must be found
    package = [str(path.parent)] if path.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=package)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        forget(name)
        raise SiteBuildError(f"{path.relative_to(lab.root)}: cannot load the lab's module {name}: "  # type: ignore[arg-type]
                             f"{type(error).__name__}: {error}") from error
    _stamps[name] = stamps
    return module


def lab_module(lab: Lab, dotted: str | None) -> ModuleType | None:
    """A module of the lab's folder by its dotted name (its top-level package loaded from the folder)."""
    if dotted is None:
        return None
    top = top_module(lab, dotted.partition(".")[0])
    if "." not in dotted:
        return top
    try:
        return importlib.import_module(dotted)
    except Exception as error:
        raise SiteBuildError(f"{lab.folder}/lab.toml: cannot load the lab's module {dotted}: "
                             f"{type(error).__name__}: {error}") from error


def lab_views(lab: Lab) -> dict[str, View]:
    lab_module(lab, lab.figures)  # first: the views import their figures module from the lab's folder
    module = lab_module(lab, lab.views)
    return dict(getattr(module, "VIEWS", {})) if module else {}


def lab_check(lab: Lab) -> Callable[[dict[str, Any], str], None]:
    """The lab's record check: its invariants, then every derived figure against the stored one."""
    module = lab_module(lab, lab.figures)
    invariants = getattr(module, "check_invariants", None) if module else None
    derive = getattr(module, "derive", None) if module else None

    def check(record: dict[str, Any], source: str) -> None:
        check_record(record, source, invariants, derive)

    return check


def lab_headline(lab: Lab) -> Callable[[dict[str, Any]], list[tuple[str, float]]] | None:
    lab_module(lab, lab.figures)
    module = lab_module(lab, lab.views)
    return getattr(module, "headline", None) if module else None
