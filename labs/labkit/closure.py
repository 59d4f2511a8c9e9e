"""What a benchmark's numbers depend on, computed from the code: its import closure inside the repository.

A record is stale when code that produced its raw numbers changed, and only then. So a lab's measured files are
found, not listed: from the lab's benchmark script and the module it launches, follow every import statement
(inside functions too) to the repository's own files, and every ``python -m <module>`` the code starts as a
process. Not followed:

- code that only validates, derives, words or writes a record (``UNMEASURED``, views packages, test helpers);
- a lab's ``figures`` module where the benchmark's entry module imports it (to derive the record's figures). A
  mechanism module that takes a constant from a figures module keeps that module measured: there the constant
  shapes what is timed.

Each Python file counts by its syntax tree without docstrings (``normalized_source``): a comment, a docstring or a
reformatting changes no number. Data files beside the measured modules (a C source built at run time, a prompt
set, a table of model configurations) count by their bytes.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import threading
import tomllib
from collections.abc import Iterable
from pathlib import Path

# labkit's modules that never touch a measured number: records, derivations, manifests, provenance (labkit.runs: the run
# a record was measured in), signals, and the samples of the machine a record keeps (labkit.watch: it reads the
# kernel's counters beside the measurement).
UNMEASURED = frozenset({
    "labkit.bootstrap", "labkit.closure", "labkit.environment", "labkit.exit", "labkit.figures",
    "labkit.fingerprint", "labkit.launch", "labkit.machines", "labkit.manifest", "labkit.records", "labkit.regimes",
    "labkit.run_benchmarks", "labkit.runs", "labkit.signals", "labkit.summary", "labkit.testing", "labkit.testreport",
    "labkit.watch", "labkit.writing",
})
TEST_HELPERS = ("testing", "broken", "conftest")  # seeded fixtures and deliberately wrong variants: never measured
DATA_SUFFIXES = (".c", ".h", ".json", ".toml", ".txt")  # files beside measured modules that code reads or builds
# NOTE: CPython 3.11's ast module keeps its recursion-depth count per interpreter, not per thread: two threads
# parsing at once (the build runs two labs' suites side by side, each keying its report on a closure) fail with
# "SystemError: AST constructor recursion depth mismatch". Every parse here takes this lock.
_PARSING = threading.Lock()


def parse(path: Path) -> ast.Module:
    """One file's syntax tree, parsed under _PARSING."""
    source = path.read_text(encoding="utf-8")
    with _PARSING:
        return ast.parse(source, filename=str(path))


@functools.cache
def installed_packages(root: Path) -> dict[str, Path]:
    """The repository's top-level packages installed in development mode: each pyproject.toml's setuptools
    packages, by import name, with the folder its package-dir maps it to."""
    found = {}
    for project in [path for path in (root / "pyproject.toml", *sorted(root.glob("labs/*/*/pyproject.toml")))
                    if path.is_file()]:
        setuptools = tomllib.loads(project.read_text(encoding="utf-8"))["tool"]["setuptools"]
        folders = setuptools.get("package-dir", {})
        found |= {package: (project.parent / folders.get(package, package)).resolve()
                  for package in setuptools["packages"] if "." not in package}
    return found


def module_name(path: Path, root: Path) -> str:
    """The dotted name a file is imported by (a test file or a script beside its lab: its stem)."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder, packages = path.parent, {folder: name for name, folder in installed_packages(root).items()}
    while (folder / "__init__.py").is_file() and folder not in packages:
        parts.append(folder.name)
        folder = folder.parent
    parts += [packages[folder]] if folder in packages else []
    return ".".join(reversed(parts))


def module_file(name: str, context: Path | None, root: Path) -> Path | None:
    """The repository file module ``name`` is (a package's ``__init__.py``), as Python finds it with ``context``
    (a lab's folder, where its benchmark script and its test discovery start) first on the import path and the
    installed packages after it; None for a library's module or a name that is no module (an attribute)."""
    top, *rest = name.split(".")
    here = [context / top / "__init__.py", context / f"{top}.py"] if context else []
    path = next((candidate for candidate in here if candidate.is_file()), None)
    if path is None and top in installed_packages(root):
        path = installed_packages(root)[top] / "__init__.py"
    for part in rest:
        if path is None or path.name != "__init__.py":
            return None
        path = next((candidate for candidate in (path.parent / part / "__init__.py", path.parent / f"{part}.py")
                     if candidate.is_file()), None)
    return path.resolve() if path is not None else None


def imported_names(path: Path, root: Path, processes: bool = True) -> set[str]:
    """Every module name one file's import statements reach (relative imports resolved, the packages above each
    name too: importing ``a.b`` runs ``a/__init__.py`` first), and, with ``processes``, every ``-m <module>`` it
    starts as a process."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level
                    else str(node.module))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")  # a submodule, perhaps
        elif processes and isinstance(node, (ast.List, ast.Tuple)):  # [sys.executable, "-m", "kv_serving.server"]
            values = [item.value if isinstance(item, ast.Constant) else None for item in node.elts]
            names.update(str(after) for flag, after in zip(values, values[1:]) if flag == "-m" and isinstance(after, str))
    return {".".join(name.split(".")[:end]) for name in names for end in range(1, name.count(".") + 2)}


def imported_files(path: Path, context: Path | None, root: Path, processes: bool = True) -> set[Path]:
    """The repository files one file's import statements (and, with ``processes``, ``-m`` arguments) name."""
    return {file for file in (module_file(name, context, root) for name in imported_names(path, root, processes))
            if file}


def import_closure(start: Iterable[Path], context: Path | None, root: Path) -> set[Path]:
    """Every repository file reachable from ``start`` through import statements, ``context`` first on the path."""
    seen: set[Path] = set()
    work = [path.resolve() for path in start]
    while work:
        path = work.pop()
        if path not in seen:
            seen.add(path)
            work.extend(imported_files(path, context, root) - seen)
    return seen


def launched_module(script: Path) -> str | None:
    """The module a lab's benchmark script hands to labkit.launch.launch (the call's string argument), or None
    for a script that is the benchmark itself."""
    calls = [node for node in ast.walk(parse(script))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "launch"]
    if not calls:
        return None
    if len(calls) != 1 or not calls[0].args or not isinstance(calls[0].args[0], ast.Constant):
        raise ValueError(f"{script}: a lab's benchmark script calls launch('<package>.benchmark') once, or not at all")
    return str(calls[0].args[0].value)


def unmeasured(name: str) -> bool:
    """Code no measurement runs: labkit's record-side modules, a views package, a test helper or test file."""
    parts = name.split(".")
    return (name in UNMEASURED or parts[0].endswith("_views") or parts[-1] in TEST_HELPERS
            or parts[-1].startswith("test_"))


def is_figures(name: str) -> bool:
    return "figures" in name.split(".")


def measured_closure(script: Path, context: Path, root: Path) -> set[Path]:
    """The repository files a benchmark's raw numbers depend on (this module's docstring says which): from its
    script, with ``context`` (the lab's folder) first on the import path."""
    context = context.resolve()
    launched = launched_module(script)
    entry = module_file(launched, context, root) if launched else script.resolve()
    if entry is None:
        raise ValueError(f"{script}: launches {launched!r}, which is no module of the repository")
    seen: set[Path] = set()
    work = [script.resolve(), entry]
    while work:
        path = work.pop()
        if path in seen:
            continue
        seen.add(path)
        importer = module_name(path, root)
        for name in imported_names(path, root):
            if unmeasured(name) or (is_figures(name) and (path in (entry, script.resolve()) or is_figures(importer))):
                continue
            file = module_file(name, context, root)
            if file is not None and file not in seen:
                work.append(file)
    data = {file for folder in {path.parent for path in seen} for file in folder.iterdir()
            if file.suffix in DATA_SUFFIXES and file.is_file() and file.name not in ("pyproject.toml", "lab.toml")}
    return seen | data


def normalized_source(path: Path) -> bytes:
    """What of a file can change a number: a Python file's syntax tree without docstrings (comments, docstrings
    and formatting never count), any other file's bytes."""
    if path.suffix != ".py":
        return path.read_bytes()
    tree = parse(path)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    with _PARSING:  # dump walks the tree as the parser's constructor does
        return ast.dump(tree, annotate_fields=False, include_attributes=False).encode()
