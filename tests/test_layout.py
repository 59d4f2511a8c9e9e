"""The folder layout is the architecture: no two labs claim the same importable name, and each lab's computed
fingerprint holds what its benchmark runs to measure, no test code, view or derivation among it."""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from labkit import closure
from labkit.fingerprint import measured_files
from labkit.manifest import discover_labs
from site_hooks.orchestrate import suite_files

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


def lab_folder(path: Path) -> Path | None:
    """The lab a file belongs to (the nearest folder above it with a lab.toml), or None."""
    return next((folder for folder in path.parents if (folder / "lab.toml").is_file()), None)


@functools.cache  # a deliberate cache: the closure check asks it of every pair of loaded files
def imported_files(path: Path, context: Path | None) -> frozenset[Path]:
    return frozenset(closure.imported_files(path, context, ROOT))


def import_closure(start: Iterable[Path], context: Path | None) -> set[Path]:
    return closure.import_closure(start, context, ROOT)


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
def loaded_by_import() -> dict[str, set[Path]]:
    """Per lab, the repository files importing its benchmark's module loads (what a static reading could miss)."""
    labs = discover_labs(ROOT)
    modules = {lab.name: closure.launched_module(ROOT / lab.benchmark[0]) for lab in labs}
    arguments = [part for lab in labs for part in (modules[lab.name], str((ROOT / lab.benchmark[0]).parent))]
    finished = subprocess.run([sys.executable, "-c", LOADED_FILES, *arguments], cwd=ROOT, capture_output=True,
                              text=True, env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"},
                              timeout=600)  # a bound for a hang, not a speed claim
    assert finished.returncode == 0, f"importing the benchmarks failed: {finished.stderr[-2000:]}"
    loaded = json.loads(finished.stdout.splitlines()[-1])  # the last line: a library may have printed before it
    return {lab.name: {Path(file).resolve() for file in loaded[modules[lab.name]]} for lab in labs}


def relative(paths: Iterable[Path]) -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in paths}


def test_no_fingerprint_covers_a_test_file_a_test_helper_a_broken_variant_a_view_or_the_test_reporter() -> None:
    covered = {lab.name: [name for name in measured_files(lab, ROOT)
                          if is_test_code(ROOT / name) or "_views" in name or name.endswith("/hooks.py")]
               for lab in discover_labs(ROOT)}
    assert covered == {name: [] for name in covered}


def test_every_module_importing_a_benchmark_loads_is_measured_or_only_derives_words_or_writes_the_record() -> None:
    """The computed closure misses nothing the import really runs for a measurement: what it leaves out is a
    figures module the entry takes its derivation from, a views package, labkit's record side
    (labkit.closure.UNMEASURED), or a module only those import."""
    missing = {}
    for lab in discover_labs(ROOT):
        measured, loaded = set(measured_files(lab, ROOT)), loaded_by_import()[lab.name]
        context = (ROOT / lab.folder).resolve()
        importers = {name: {other for other in relative(loaded) if other.endswith(".py")
                            and ROOT / name in imported_files(ROOT / other, context)} for name in relative(loaded)}
        # left out, and imported by no statement (a dynamic import) or by a measured module
        left_out = {name for name in relative(loaded) - measured
                    if not closure.unmeasured(closure.module_name(ROOT / name, ROOT))
                    and not closure.is_figures(closure.module_name(ROOT / name, ROOT))
                    and (not importers[name] or importers[name] & measured)}
        if left_out:
            missing[lab.name] = sorted(left_out)
    assert missing == {}, "a change to these would leave the record looking fresh: labkit.closure must reach them"


def test_each_labs_measured_files_hold_its_mechanism_and_not_its_derivations() -> None:
    files = {lab.name: set(measured_files(lab, ROOT)) for lab in discover_labs(ROOT)}
    serving = files["kv-serving"]
    assert {"labs/llm/llm_models/serving/scheduler.py", "labs/llm/kv-serving/kv_serving/server.py",
            "labs/llm/kv-serving/kv_serving/prompts.json", "labs/labkit/harness.py"} <= serving  # -m kv_serving.server
    assert "labs/llm/llm_models/kernels/int8_rows.c" in files["decode-bandwidth"]  # built at run time
    for name, measured in files.items():
        assert not {"labs/labkit/records.py", "labs/labkit/summary.py", "labs/labkit/figures.py"} & measured, name
        assert not [file for file in measured if file.endswith("/figures/derivation.py")], name


def test_each_records_fingerprint_holds_its_own_lab_the_shared_package_and_the_record_machinery_only() -> None:
    """An edit to one lab's files stales that lab's record and no other's."""
    below = ("labs/llm/llm_models/", "labs/labkit/")
    foreign = {lab.name: sorted(file for file in measured_files(lab, ROOT)
                                if not file.startswith((f"{lab.folder.as_posix()}/", *below)))
               for lab in discover_labs(ROOT)}
    assert {name: files for name, files in foreign.items() if files} == {}


def test_every_module_a_labs_tests_import_keys_its_cached_test_report() -> None:
    """What the tests import keys the site build's cached test report (site_hooks.orchestrate.suite_files), so a
    passed report is reused only until one of those files changes. Found by running the imports (a subprocess
    would do no better for a test's lazy import), not only by the closure the digest itself computes."""
    unkeyed = {}
    for lab in discover_labs(ROOT):
        start, pattern = lab.tests
        keyed = relative(suite_files(lab, ROOT))
        folders = (ROOT / lab.folder, ROOT / "labs" / "labkit")
        outside = {path for path in import_closure((ROOT / start).glob(pattern), (ROOT / start).resolve())
                   if not any(folder in path.parents for folder in folders)}
        if relative(outside) - keyed:
            unkeyed[lab.name] = sorted(relative(outside) - keyed)
    assert unkeyed == {}, "a change to these would reuse a stale test report: add them to tests.sources"


def test_no_production_module_imports_a_test_helper_a_broken_variant_or_a_test_file() -> None:
    offending = {}
    for path in source_files():
        if path.name.startswith("test_") or path.name in TEST_HELPERS:
            continue  # test code may import test code; the test reporter may not
        helpers = relative(file for file in closure.imported_files(path, lab_folder(path), ROOT, processes=False)
                           if is_test_code(file))
        if helpers:
            offending[path.relative_to(ROOT).as_posix()] = sorted(helpers)
    assert offending == {}, "move what production code needs out of the test helpers, into a module of its own"


def test_the_shared_models_import_no_lab() -> None:
    """labs/llm/llm_models sits below the labs: what it imports of the repository is its own (or labkit's)."""
    models, labkit = ROOT / "labs" / "llm" / "llm_models", ROOT / "labs" / "labkit"
    reached = {path.relative_to(ROOT).as_posix(): relative(file for file in imported_files(path, None)
                                                           if models not in file.parents and labkit not in file.parents)
               for path in source_files() if models in path.parents}
    assert len(reached) > 1 and reached == {name: set() for name in reached}


# ---- mechanism below, records above: the code a benchmark times never imports a figures module ------------------

def imported_figures(path: Path) -> set[str]:
    """The labs' figures modules (lab.toml's ``figures``) that one file's import statements name, or a module
    inside one; found on the syntax tree (labkit.closure.imported_names), inside functions too."""
    names = closure.imported_names(path, ROOT, processes=False)
    return {lab.figures for lab in discover_labs(ROOT) if lab.figures
            and any(name == lab.figures or name.startswith(f"{lab.figures}.") for name in names)}


def production_modules() -> dict[Path, tuple[str, str]]:
    """Every module of a lab's packages but its test files, with the lab's name and what the module is:
    'figures' (inside the lab's figures module), 'views', 'entry' (the module the launcher runs), 'test helper',
    or 'mechanism' (the rest: what the benchmark times, and the torch-free modules it takes constants from)."""
    found = {}
    for lab in discover_labs(ROOT):
        entry = closure.launched_module(ROOT / lab.benchmark[0])
        for package in [p for p in (ROOT / lab.folder).iterdir() if (p / "__init__.py").is_file()]:
            for path in sorted(package.rglob("*.py")):
                if path.name.startswith("test_") or "__pycache__" in path.parts:
                    continue
                module = closure.module_name(path, ROOT)
                kind = ("figures" if lab.figures and (module == lab.figures or module.startswith(f"{lab.figures}."))
                        else "views" if module.split(".")[0] == lab.views
                        else "entry" if module == entry
                        else "test helper" if module.split(".")[-1] in closure.TEST_HELPERS
                        else "mechanism")
                found[path] = (lab.name, kind)
    return found


def test_no_mechanism_module_imports_a_figures_module() -> None:
    """A constant or formula the timed code uses lives in a mechanism module; the figures module, the views and
    the tests import it from there, not through the figures module: so a derivation never stales a record, and a
    mechanism's constant is measured where it is defined. The benchmark's entry may import its figures module, for
    ``derive``."""
    modules = production_modules()
    assert sum(kind == "mechanism" for _, kind in modules.values()) > 20  # the walk found the labs' mechanisms
    offending = {path.relative_to(ROOT).as_posix(): sorted(imported_figures(path))
                 for path, (_, kind) in modules.items() if kind == "mechanism" and imported_figures(path)}
    assert offending == {}, "move what these take into a torch-free module of the mechanism; figures import it"


def test_no_lab_imports_another_labs_figures_module() -> None:
    """What two labs share lives below them (llm_models), not in one lab's figures module."""
    own = {lab.name: lab.figures for lab in discover_labs(ROOT)}
    offending = {path.relative_to(ROOT).as_posix(): sorted(imported_figures(path) - {own[name]})
                 for path, (name, _) in production_modules().items() if imported_figures(path) - {own[name]}}
    assert offending == {}, "move what several labs share into llm_models, and import it from there"


# ---- engine below, labs above: no lab's package imports another lab's ---------------------------------------------

def lab_to_lab_imports() -> dict[tuple[str, str], set[str]]:
    """(importing lab, imported lab) -> the production modules whose import statements (on the syntax tree, inside
    functions too) name another lab's package."""
    owner = {package.name: lab.name for lab in discover_labs(ROOT)
             for package in (ROOT / lab.folder).iterdir() if (package / "__init__.py").is_file()}
    found: dict[tuple[str, str], set[str]] = {}
    for path, (name, _) in production_modules().items():
        for imported in closure.imported_names(path, ROOT, processes=False):
            other = owner.get(imported.split(".")[0])
            if other is not None and other != name:
                found.setdefault((name, other), set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_no_lab_imports_another_lab() -> None:
    """What two labs share lives below them (llm_models); a lab holds what it measures and teaches."""
    assert lab_to_lab_imports() == {}, "move what these import into llm_models, and import it from there"


# ---- one home for each: the Llama layer, the kernel timing, the byte formulas ----------------------------------------

# A name the shared engine defines once, and the module that defines it: a second top-level definition anywhere in the
# labs or the build hook (a lab's own rms_norm, a second timing loop, another block formula) fails here.
ONE_HOME = {
    "rms_norm": "labs/llm/llm_models/llama/model.py", "project": "labs/llm/llm_models/llama/model.py",
    "finish": "labs/llm/llm_models/llama/model.py", "fuse": "labs/llm/llm_models/llama/model.py",
    "rotary_angles": "labs/llm/llm_models/llama/model.py", "rotate": "labs/llm/llm_models/llama/model.py",
    "LAYER_KINDS": "labs/llm/llm_models/llama/kinds.py", "MATRIX_KINDS": "labs/llm/llm_models/llama/kinds.py",
    "best_pass_ns": "labs/llm/llm_models/kernels/timing.py", "ns_per_matrix": "labs/llm/llm_models/kernels/timing.py",
    "fastest": "labs/llm/llm_models/kernels/choice.py", "block_bytes": "labs/llm/llm_models/cache_formats.py",
    "kv_positions": "labs/llm/llm_models/serving/admission.py",
    "BYTES_PER_ELEMENT": "labs/llm/llm_models/kv_bytes.py",
}


def top_level_names(path: Path) -> set[str]:
    """The names a module binds at its top level: functions, classes and assignments."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def test_each_shared_formula_and_the_llama_layer_are_defined_once() -> None:
    defined: dict[str, set[str]] = {name: set() for name in ONE_HOME}
    for path in source_files():
        if is_test_code(path):
            continue
        for name in top_level_names(path) & ONE_HOME.keys():
            defined[name].add(path.relative_to(ROOT).as_posix())
    assert defined == {name: {home} for name, home in ONE_HOME.items()}


def test_the_swiglu_is_computed_in_the_llama_layer_only() -> None:
    """Every path that runs the trained Llama (the reference decoder, the decode lab's fast twin, the server, the
    window lab's stores) calls the layer's own halves: no other production module applies SiLU."""
    calls = set()
    for path in source_files():
        if is_test_code(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "silu":
                calls.add(path.relative_to(ROOT).as_posix())
    assert calls == {"labs/llm/llm_models/llama/model.py"}
