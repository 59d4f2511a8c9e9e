"""A lab's manifest (`lab.toml` in its folder): the data that registers a lab with the site."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = "lab.toml"
REQUIRED = ("name", "title", "record", "schema", "tests", "benchmark")


class ManifestError(ValueError):
    """A lab.toml that is missing, unreadable or incomplete."""


@dataclass(frozen=True)
class Lab:
    name: str  # the placeholder namespace: {{ lab:<name>:<view> }}
    title: str
    folder: Path  # relative to the repository root, like every path below
    record: Path
    schema: Path
    tests: tuple[str, ...]  # unittest discovery: (start folder, file pattern)
    benchmark: tuple[str, ...]  # script and arguments, run with the venv's python from the root
    test_sources: tuple[str, ...] = ()  # tests.sources: globs of further sources only the tests import
    tests_apart: tuple[str, ...] = ()  # tests.apart: test files run in a process of their own, beside the rest
    views: str | None = None  # module in the lab folder with the lab's own VIEWS and headline
    figures: str | None = None  # torch-free module (dotted, in the lab folder) with derive and check_invariants
    root: Path | None = None  # the repository root the relative paths start from

    def benchmark_arguments(self, record: str | None = None) -> list[str]:
        """The benchmark's script and arguments, with {record} filled in (default: the reference record)."""
        return [part.replace("{record}", record or self.record.as_posix()) for part in self.benchmark]


def load_lab(path: Path, root: Path) -> Lab:
    """Read one manifest; ``path`` is the lab.toml, ``root`` the repository root."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ManifestError(f"{path}: cannot read lab manifest: {error}") from error
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise ManifestError(f"{path}: missing field(s) {', '.join(missing)}")
    if "fingerprint" in data:
        raise ManifestError(f"{path}: field fingerprint is no longer read: the files a record depends on are "
                            f"computed from what its benchmark imports (labkit.closure); delete the list")
    tests = data["tests"]
    if not (isinstance(tests, dict) and {"start", "pattern"} <= tests.keys()):
        raise ManifestError(f"{path}: field tests must be a table with start and pattern")
    sources = tests.get("sources", [])
    if not (isinstance(sources, list) and all(isinstance(glob, str) for glob in sources)):
        raise ManifestError(f"{path}: field tests.sources must be a list of globs")
    apart = tests.get("apart", [])
    if not (isinstance(apart, list) and all(isinstance(name, str) and "/" not in name and name.endswith(".py")
                                            for name in apart)):
        raise ManifestError(f"{path}: field tests.apart must be a list of test file names (no folders), "
                            f"got {apart!r}")
    return Lab(
        name=str(data["name"]),
        title=str(data["title"]),
        folder=path.parent.resolve().relative_to(root.resolve()),
        record=Path(data["record"]),
        schema=Path(data["schema"]),
        tests=(str(tests["start"]), str(tests["pattern"])),
        benchmark=tuple(str(part) for part in data["benchmark"]),
        test_sources=tuple(sources),
        tests_apart=tuple(apart),
        views=str(data["views"]) if "views" in data else None,
        figures=str(data["figures"]) if "figures" in data else None,
        root=root.resolve(),
    )


def lab_for(source: str | Path) -> tuple[Lab, Path]:
    """The lab a source file belongs to (the nearest lab.toml above it) and the repository root."""
    for folder in Path(source).resolve().parents:
        if (folder / MANIFEST_NAME).is_file():
            root = folder.parents[2]  # labs/<area>/<lab>
            return load_lab(folder / MANIFEST_NAME, root), root
    raise ManifestError(f"{source}: no {MANIFEST_NAME} in any folder above it")


def discover_labs(root: Path) -> list[Lab]:
    """Every lab under root/labs, in name order; two labs may not share a name."""
    labs = [load_lab(path, root) for path in sorted((root / "labs").glob(f"*/*/{MANIFEST_NAME}"))]
    seen: dict[str, Path] = {}
    for lab in labs:
        if lab.name in seen:
            raise ManifestError(f"labs {seen[lab.name]} and {lab.folder} are both named {lab.name!r}")
        seen[lab.name] = lab.folder
    return sorted(labs, key=lambda lab: lab.name)
