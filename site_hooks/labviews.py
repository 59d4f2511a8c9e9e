"""A lab's own part of the site: the torch-free module its lab.toml names under ``views``.

The module sits in the lab's folder (``<name>.py`` or a package ``<name>/``) and is loaded from there
by path, so a new lab needs no installation for its pages. It may define ``VIEWS`` (view name ->
function of Evidence), ``check_record(record, source)`` (raises RecordError for a figure the rest of
the record contradicts) and ``headline(record)`` (ratios measured within one run, for comparing
machines). A lab without the key uses the shared views only.
"""

from __future__ import annotations

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


def lab_module(lab: Lab) -> ModuleType | None:
    """The lab's views module, loaded once per process (sys.modules is the deliberate cache)."""
    if lab.views is None:
        return None
    path = module_file(lab)
    loaded = sys.modules.get(lab.views)
    if loaded is not None and Path(getattr(loaded, "__file__", "")) == path:
        return loaded
    package = [str(path.parent)] if path.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(lab.views, path, submodule_search_locations=package)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[lab.views] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[lab.views]
        raise SiteBuildError(f"{path.relative_to(lab.root)}: cannot load the lab's views: "  # type: ignore[arg-type]
                             f"{type(error).__name__}: {error}") from error
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
