"""The folder layout is the architecture: no two labs claim the same importable name."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

from labkit.manifest import discover_labs

from conftest import ROOT

LAUNCHER = "benchmark.py"  # a lab's script, never imported: it calls labkit.launch


def importable_names(folder: Path) -> list[str]:
    """Top-level names a lab brings: its packages and modules, its views module, its test files."""
    names = [p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    names += [p.stem for p in folder.glob("*.py") if p.name != LAUNCHER]
    return names


def duplicated_names(root: Path) -> list[str]:
    names = Counter(name for lab in discover_labs(root) for name in importable_names(root / lab.folder))
    names.update(p.stem for p in (ROOT / "tests").glob("test_*.py"))
    names.update(["labkit", "site_hooks", "conftest"])
    return [name for name, count in names.items() if count > 1]


def loose_modules(root: Path) -> list[str]:
    """Modules at a lab root that are neither tests, the launcher, nor the views module its lab.toml names."""
    return [f"{lab.folder}/{p.name}" for lab in discover_labs(root) for p in (root / lab.folder).glob("*.py")
            if p.name != LAUNCHER and not p.name.startswith("test_") and p.stem != lab.views]


def test_no_two_labs_define_the_same_top_level_module_name() -> None:
    assert duplicated_names(ROOT) == []


def test_a_lab_root_holds_only_tests_its_launcher_and_views_besides_packages() -> None:
    assert loose_modules(ROOT) == [], "put these in the lab's package (test files import it from there)"


def test_every_lab_package_is_declared_for_installation() -> None:
    for lab in discover_labs(ROOT):
        project = ROOT / lab.folder / "pyproject.toml"
        if not project.exists():
            continue  # a lab no other lab imports needs none: tests, benchmark and views find it in place
        declared = tomllib.loads(project.read_text())["tool"]["setuptools"]["packages"]
        for package in declared:
            folder = ROOT / lab.folder / package.replace(".", "/")  # a subpackage is declared dotted
            assert (folder / "__init__.py").exists(), (lab.name, package)
