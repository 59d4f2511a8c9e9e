"""The folder layout is the architecture: no two labs claim the same importable name, and each lab's fingerprint
names exactly the files its benchmark runs, no test code among them."""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from labkit.fingerprint import fingerprint_files
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
    names.update(["labkit", "llm_models", "site_hooks", "conftest"])
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


# ---- what a fingerprint covers: the files a benchmark runs, and nothing only the tests use ----------------------

TEST_HELPERS = ("testing.py", "broken.py")  # seeded tiny inputs and fixtures; deliberately wrong variants
TEST_REPORTER = ROOT / "labs" / "labkit" / "testreport.py"  # runs a lab's tests for the site build
LIBRARIES = (ROOT / "labs" / ".venv", Path(sys.prefix).resolve())  # the installed packages: not the repository's


def is_test_code(path: Path) -> bool:
    """A test file, a test helper, a broken variant or the test reporter: code no measurement runs."""
    return path.name.startswith("test_") or path.name in (*TEST_HELPERS, "conftest.py") or path == TEST_REPORTER


def in_repository(path: Path) -> bool:
    return ROOT in path.parents and not any(folder in path.parents for folder in LIBRARIES)


def source_files() -> list[Path]:
    """Every Python file of the repository's own code: the labs (their venv aside) and the build hook."""
    files = [*(ROOT / "labs").rglob("*.py"), *(ROOT / "site_hooks").rglob("*.py")]
    return sorted(p for p in files if in_repository(p) and "__pycache__" not in p.parts)


@functools.cache
def installed_packages() -> dict[str, Path]:
    """The repository's top-level packages installed in development mode, importable from anywhere: each
    pyproject.toml's setuptools packages, by import name, with the folder package-dir maps them to."""
    found = {}
    for project in (ROOT / "pyproject.toml", *ROOT.glob("labs/*/*/pyproject.toml")):
        setuptools = tomllib.loads(project.read_text())["tool"]["setuptools"]
        folders = setuptools.get("package-dir", {})
        found |= {package: (project.parent / folders.get(package, package)).resolve()
                  for package in setuptools["packages"] if "." not in package}
    return found


def lab_folder(path: Path) -> Path | None:
    """The lab a file belongs to (the nearest folder above it with a lab.toml), or None."""
    return next((folder for folder in path.parents if (folder / "lab.toml").is_file()), None)


def module_name(path: Path) -> str:
    """The dotted name a file is imported by (a test file or a script beside its lab: its stem)."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder, packages = path.parent, {folder: name for name, folder in installed_packages().items()}
    while (folder / "__init__.py").is_file() and folder not in packages:
        parts.append(folder.name)
        folder = folder.parent
    parts += [packages[folder]] if folder in packages else []
    return ".".join(reversed(parts))


def module_file(name: str, context: Path | None) -> Path | None:
    """The repository file module ``name`` is (a package's ``__init__.py``), as Python finds it when ``context`` (a
    lab's folder, where its benchmark script and its test discovery start) comes first on the import path and
    the installed packages after it; None for a module of a library or a name that is no module (an attribute).
    Found from the files alone, so the answer does not depend on this process's import path."""
    top, *rest = name.split(".")
    here = [context / top / "__init__.py", context / f"{top}.py"] if context else []
    path = next((candidate for candidate in here if candidate.is_file()), None)
    if path is None and top in installed_packages():
        path = installed_packages()[top] / "__init__.py"
    for part in rest:
        if path is None or path.name != "__init__.py":
            return None
        path = next((candidate for candidate in (path.parent / part / "__init__.py", path.parent / f"{part}.py")
                     if candidate.is_file()), None)
    return path.resolve() if path is not None else None


def imported_files(path: Path, context: Path | None) -> set[Path]:
    """The repository files the import statements of one file name, wherever they stand (inside functions too),
    relative imports resolved, with the packages above them (importing ``a.b`` runs ``a/__init__.py`` first)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level
                    else str(node.module))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")  # a submodule, perhaps
    prefixes = {".".join(name.split(".")[:end]) for name in names for end in range(1, name.count(".") + 2)}
    return {file for file in (module_file(name, context) for name in prefixes) if file is not None}


def import_closure(start: Iterable[Path], context: Path | None) -> set[Path]:
    """The repository files reachable from ``start`` through import statements, ``context`` first on the path."""
    seen: set[Path] = set()
    work = [path.resolve() for path in start]
    while work:
        path = work.pop()
        if path not in seen:
            seen.add(path)
            work.extend(imported_files(path, context) - seen)
    return seen


def launched_module(script: Path) -> str:
    """The module a lab's benchmark script hands to labkit.launch.launch: the call's string argument."""
    calls = [node for node in ast.walk(ast.parse(script.read_text(encoding="utf-8")))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "launch"]
    assert len(calls) == 1 and isinstance(calls[0].args[0], ast.Constant), f"{script}: no launch('<module>') call"
    return str(calls[0].args[0].value)


# Imports each benchmark's module as its launcher does (its lab's folder first on the path), without running it,
# and names the files then loaded. One process for all labs: between two labs it forgets the repository's modules
# (not the libraries', which import none of them), so each lab's list holds what its own import loads.
LOADED_FILES = """
import importlib, json, pathlib, sys
import labkit.launch
root, venv = pathlib.Path.cwd(), pathlib.Path(sys.prefix).resolve()
def ours(module):
    file = getattr(module, "__file__", None)
    parents = pathlib.Path(file).resolve().parents if file and pathlib.Path(file).is_absolute() else ()
    return root in parents and venv not in parents
before = set(sys.modules)
loaded = {}
for name, folder in zip(sys.argv[1::2], sys.argv[2::2]):
    sys.path[0] = folder
    importlib.import_module(name)
    loaded[name] = [module.__file__ for module in list(sys.modules.values()) if ours(module)]
    for other in [other for other, module in list(sys.modules.items()) if other not in before and ours(module)]:
        del sys.modules[other]
print(json.dumps(loaded))
"""


@functools.cache
def benchmark_closures() -> dict[str, set[Path]]:
    """Per lab, the repository files its benchmark runs: its script, what importing its module loads, and what
    their import statements reach besides (lazy imports inside functions)."""
    labs = discover_labs(ROOT)
    modules = {lab.name: launched_module(ROOT / lab.benchmark[0]) for lab in labs}
    arguments = [part for lab in labs for part in (modules[lab.name], str((ROOT / lab.benchmark[0]).parent))]
    finished = subprocess.run([sys.executable, "-c", LOADED_FILES, *arguments], cwd=ROOT, capture_output=True,
                              text=True, env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"},
                              timeout=600)  # a bound for a hang, not a speed claim
    assert finished.returncode == 0, f"importing the benchmarks failed: {finished.stderr[-2000:]}"
    loaded = json.loads(finished.stdout.splitlines()[-1])  # the last line: a library may have printed before it
    return {lab.name: import_closure({ROOT / lab.benchmark[0], *(Path(file) for file in loaded[modules[lab.name]])},
                                     (ROOT / lab.benchmark[0]).parent.resolve())
            for lab in labs}


def relative(paths: Iterable[Path]) -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in paths}


def test_no_fingerprint_covers_a_test_file_a_test_helper_a_broken_variant_or_the_test_reporter() -> None:
    covered = {lab.name: [name for name in fingerprint_files(ROOT, lab.fingerprint) if is_test_code(ROOT / name)]
               for lab in discover_labs(ROOT)}
    assert covered == {name: [] for name in covered}, "name the measured files explicitly (lab.toml fingerprint)"


def test_no_production_module_imports_a_test_helper_a_broken_variant_or_a_test_file() -> None:
    offending = {}
    for path in source_files():
        if path.name.startswith("test_") or path.name in TEST_HELPERS:
            continue  # test code may import test code; the test reporter may not
        helpers = relative(file for file in imported_files(path, lab_folder(path)) if is_test_code(file))
        if helpers:
            offending[path.relative_to(ROOT).as_posix()] = sorted(helpers)
    assert offending == {}, "move what production code needs out of the test helpers, into a module of its own"


def test_the_shared_models_import_no_lab() -> None:
    """labs/llm/models sits below the labs: what it imports of the repository is its own (or labkit's)."""
    models, labkit = ROOT / "labs" / "llm" / "models", ROOT / "labs" / "labkit"
    reached = {path.relative_to(ROOT).as_posix(): relative(file for file in imported_files(path, None)
                                                           if models not in file.parents and labkit not in file.parents)
               for path in source_files() if models in path.parents}
    assert len(reached) > 1 and reached == {name: set() for name in reached}


def test_every_module_a_benchmark_runs_is_in_its_labs_fingerprint() -> None:
    missing = {}
    for lab in discover_labs(ROOT):
        absent = relative(benchmark_closures()[lab.name]) - set(fingerprint_files(ROOT, lab.fingerprint))
        if absent:
            missing[lab.name] = sorted(absent)
    assert missing == {}, "a change to these would leave the record looking fresh: add them to the fingerprint"


def test_every_python_file_a_fingerprint_names_is_run_by_its_benchmark() -> None:
    unused = {}
    for lab in discover_labs(ROOT):
        run = relative(benchmark_closures()[lab.name])
        extra = [name for name in fingerprint_files(ROOT, lab.fingerprint) if name.endswith(".py") and name not in run]
        if extra:
            unused[lab.name] = extra
    assert unused == {}, "editing these would mark the record stale for nothing: drop them from the fingerprint"


def test_every_module_a_labs_tests_import_keys_its_cached_test_report() -> None:
    """What the tests import lies in the lab's folder, in labkit, or in its fingerprint or tests.sources: the
    site build reuses a passed test report until one of those changes (site_hooks.orchestrate.tests_digest)."""
    unkeyed = {}
    for lab in discover_labs(ROOT):
        start, pattern = lab.tests
        keyed = set(fingerprint_files(ROOT, (*lab.fingerprint, *lab.test_sources)))
        folders = (ROOT / lab.folder, ROOT / "labs" / "labkit")
        outside = {path for path in import_closure((ROOT / start).glob(pattern), (ROOT / start).resolve())
                   if not any(folder in path.parents for folder in folders)}
        if relative(outside) - keyed:
            unkeyed[lab.name] = sorted(relative(outside) - keyed)
    assert unkeyed == {}, "a change to these would reuse a stale test report: add them to tests.sources"
