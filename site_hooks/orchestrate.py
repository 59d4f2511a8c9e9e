"""When to run a lab's tests and benchmark during a build, and what evidence a page may use.

Tests run in a subprocess before any page renders; their report is cached
under .cache/ keyed by a digest of the lab's files, so `mkdocs serve`
reloads rerun them only when the lab changed. The benchmark runs when the
record is missing or its source fingerprint no longer matches the code,
unless LAB_BENCH says otherwise:

    LAB_BENCH=auto    (default) measure only a missing or stale record
    LAB_BENCH=always  measure every lab once per build process
    LAB_BENCH=never   never measure; a missing or stale record fails the build
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from pathlib import Path
from typing import Any

from labkit.closure import import_closure
from labkit.fingerprint import FingerprintError, changed_since, lab_fingerprint, measured_files
from labkit.machines import MACHINES_DIR, LabelError, check_label, machine_records
from labkit.manifest import Lab
from labkit.records import RecordError, atomic_write_json, load_record

from .consistency import check_config, check_header, check_sweep
from .errors import SiteBuildError
from .evidence import Evidence, MachineRecord
from .labviews import lab_check
from .machine import build_machine

CODE_ROOT = Path(__file__).resolve().parents[1]
# Bounds for a hang, not budgets: a lab's suite takes about a minute on a quiet two-core machine and its
# benchmark at most five, but CI and `make site` may share the cores with other work several times over.
TEST_TIMEOUT_S = 1800
# Labs whose tests run at once, each suite in its own subprocess: a cold build on the two-core machines
# this site targets waits for the slowest pair instead of the sum, and no suite keeps both cores busy alone.
TEST_WORKERS = 2
BENCH_TIMEOUT_S = 1800
KEEP_REPORTS = 3  # cached test reports kept per lab, newest first


class BenchPolicy(Enum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


def bench_policy(environ: dict[str, str] | os._Environ[str]) -> BenchPolicy:
    value = environ.get("LAB_BENCH", "auto").strip().lower() or "auto"
    try:
        return BenchPolicy(value)
    except ValueError:
        choices = ", ".join(policy.value for policy in BenchPolicy)
        raise SiteBuildError(f"environment variable LAB_BENCH={value!r} is not one of {choices}") from None


def subprocess_env(root: Path) -> dict[str, str]:
    """The build's environment (labkit and the labs are installed in it), writing no bytecode into
    the folders `mkdocs serve` watches."""
    # NOTE: two labs' suites run side by side on machines of two cores, and torch's OpenMP workers spin between
    # operations by default, each process keeping both cores busy: waiting passively, the kv-window suite beside
    # the serving one took 17 s instead of 32. The tests time nothing (benchmarks run without this).
    return os.environ | {"PYTHONDONTWRITEBYTECODE": "1", "OMP_WAIT_POLICY": "PASSIVE"}


# What a lab's tests run against outside its own folders, besides its sources: the pinned packages the venv was
# built from, and the schema every record shares (its own record and schema are added: its tests check them).
TESTED_ALONGSIDE = ("requirements.txt", "requirements-nodeps.txt", "results/record-common.schema.json")
# Environment variables that change what a lab's tests run against, by name: a cached report is for the environment
# it ran in. Named one by one, not by prefix: importing torch's inductor sets TORCHINDUCTOR_CACHE_DIR in the process
# that imports it (pytest's, not the build's), and LAB_BENCH steers the build's benchmarks, which no lab test reads;
# either would make make test miss the report make site just cached.
TESTED_ENVIRONMENT = ("LAB_WEIGHTS_CACHE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED", "HF_HOME",
                      "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def installed_packages() -> str:
    """Every installed distribution and its version, one per line: a package added or upgraded in the venv by
    hand changes what a suite runs against (a test skipped for a missing package would otherwise stay skipped)."""
    names = {f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()}
    return "\n".join(sorted(names))


def suite_files(lab: Lab, root: Path) -> set[Path]:
    """Every file a lab's suite can see: the lab's folder, labkit, what its benchmark measures with, what its test
    files import (labkit.closure, computed), lab.toml's tests.sources, the build's renderers, its record and schema."""
    start, pattern = lab.tests
    tests = sorted((root / start).glob(pattern))
    files = {p for folder in (root / lab.folder, CODE_ROOT / "labs" / "labkit") for p in folder.rglob("*")}
    files.update(root / name for name in measured_files(lab, root))
    files.update(import_closure(tests, (root / start).resolve(), root.resolve()))
    files.update(p for pattern in (*lab.test_sources, *TESTED_ALONGSIDE) for p in root.glob(pattern))
    files.update((root / lab.record, root / lab.schema))
    return {p for p in files if p.is_file() and "__pycache__" not in p.parts}


def tests_digest(lab: Lab, root: Path) -> str:
    """Changes whenever anything the tests could see changes (suite_files), the pinned and the installed
    packages, the environment variables tests read, the interpreter."""
    digest = hashlib.sha256(f"{sys.executable}\0{sys.version}\0{installed_packages()}\0".encode())
    for name in TESTED_ENVIRONMENT:
        digest.update(f"{name}={os.environ.get(name)}\0".encode())
    for path in sorted(suite_files(lab, root)):
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def run_lab_tests(lab: Lab, root: Path, cache_dir: Path, log: logging.Logger) -> dict[str, Any]:
    """The lab's test report; a cached one when nothing it depends on changed; fails on any failure. A report is
    cached only under the digest its run started and ended with: an edit during the run is not covered by it."""
    before = tests_digest(lab, root)
    cached = cache_dir / f"tests-{lab.name}-{before[:20]}.json"
    if cached.exists():
        log.info(f"lab {lab.name}: sources unchanged since the tests passed; reusing {cached.name}")
        return json.loads(cached.read_text(encoding="utf-8"))
    start, pattern = lab.tests
    log.info(f"lab {lab.name}: running its tests (python -m unittest discover -s {start} -p '{pattern}')")
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "report.json"
        command = [sys.executable, "-m", "labkit.testreport", "--start", start, "--pattern", pattern,
                   "--output", str(output), *(("--apart", *lab.tests_apart) if lab.tests_apart else ())]
        try:
            finished = subprocess.run(command, cwd=root, env=subprocess_env(root), capture_output=True,
                                      text=True, timeout=TEST_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SiteBuildError(f"lab {lab.name}: tests did not finish within {TEST_TIMEOUT_S} s") from None
        if not output.exists():
            last = (finished.stderr.strip().splitlines() or ["no output"])[-1]
            raise SiteBuildError(f"lab {lab.name}: the test run crashed before reporting: {last}")
        report = json.loads(output.read_text(encoding="utf-8"))
    if not report["successful"] or report["ran"] == 0:
        bad = [f"{t['id']} ({t['outcome']}: {t['detail']})" for t in report["tests"] if t["outcome"] not in ("passed", "skipped")]
        raise SiteBuildError(
            f"lab {lab.name}: {len(bad)} failing of {report['ran']} tests: " + "; ".join(bad)
            if bad else f"lab {lab.name}: no test ran from {start} with pattern {pattern!r}"
        )
    if finished.returncode != 0:  # a report that says success from a run that did not end well is not one
        last = (finished.stderr.strip().splitlines() or ["no output"])[-1]
        raise SiteBuildError(f"lab {lab.name}: the test run exited {finished.returncode} after reporting: {last}")
    if tests_digest(lab, root) != before:
        log.info(f"lab {lab.name}: its files changed while its tests ran; their report is used once, not cached")
        return report
    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(cached, report)
    for old in sorted(cache_dir.glob(f"tests-{lab.name}-*.json"), key=lambda p: p.stat().st_mtime)[:-KEEP_REPORTS]:
        old.unlink(missing_ok=True)
    log.info(f"lab {lab.name}: {report['passed']} of {report['ran']} tests passed")
    return report


def read_record(lab: Lab, root: Path, relative: Path | None = None) -> dict[str, Any] | None:
    """The validated record (default: the reference), or None when there is none yet."""
    relative = relative or lab.record
    path = root / relative
    if not os.path.lexists(path):  # a symlink to nothing is not "no record yet": load_record names it
        return None
    source = relative.as_posix()
    try:
        record = load_record(path, root / lab.schema, root, lab=lab.name)
        check_header(record, source)
        check_config(record, source)
        if "lengths" in record:  # a timing sweep
            check_sweep(record, source)
        lab_check(lab)(record, source)
    except RecordError as error:
        raise SiteBuildError(str(error)) from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError) as error:
        # valid by schema, unusable all the same (or the lab's check_record is wrong: -v shows where)
        logging.getLogger("mkdocs.plugins.site_hooks").debug(f"{source}: the check failed here:", exc_info=True)
        raise SiteBuildError(f"{source}: inconsistent record: {type(error).__name__}: {error}") from None
    return record


def check_machine_folders(root: Path, labs: list[Lab]) -> None:
    """A folder of machine records must be named for a lab: a typo would hide its records silently."""
    names = {lab.name for lab in labs}
    for folder in sorted(p for p in (root / MACHINES_DIR).glob("*") if p.is_dir()):
        if folder.name not in names:
            raise SiteBuildError(f"{folder.relative_to(root)}: holds machine records of no lab; "
                                 f"lab names: {', '.join(sorted(names))}")


def other_machines(lab: Lab, root: Path, reference: dict[str, Any]) -> list[MachineRecord]:
    """Every other machine's record: valid, consistent, one per label (the reference's included), its
    staleness known (never measured by the build: another machine's numbers can only come from that machine)."""
    others = []
    try:
        paths = machine_records(lab, root)
    except RecordError as error:
        raise SiteBuildError(str(error)) from None
    for path in paths:
        relative = path.relative_to(root)
        try:
            label = check_label(path.stem, relative.as_posix())
        except LabelError as error:
            raise SiteBuildError(str(error)) from None
        if label == reference["machine"]:  # it would sit beside the reference as a second, equal machine
            raise SiteBuildError(f"{relative}: machine label {label!r} is the reference record's ({lab.record}); "
                                 f"a machine record needs a label of its own (rename the file and its $.machine)")
        record = read_record(lab, root, relative)
        if record is None:  # listed, then gone: removed while the build ran
            raise SiteBuildError(f"{relative}: machine record disappeared while the build read it")
        if record["machine"] != label:  # one label, one file: a record may not claim another's label
            raise SiteBuildError(f"{relative}: field $.machine claims machine {record['machine']!r}, but the file "
                                 f"is named for machine {label!r}")
        others.append(MachineRecord(relative.as_posix(), record, False,
                                    stale_files(record, lab, lab.root or root, relative.as_posix())))
    return others


def stale_files(record: dict[str, Any], lab: Lab, root: Path, source: str | None = None) -> list[str]:
    """The measured sources that changed since the record was made (empty: the record is fresh). A fingerprint
    block that no change of code explains (labkit.fingerprint.changed_since states the rule) fails in one line
    naming the record's file, ``source`` (default: the lab's reference record)."""
    try:
        current = lab_fingerprint(lab, root)
    except ValueError as error:
        raise SiteBuildError(f"lab {lab.name}: {error}") from None
    try:
        return changed_since(record["fingerprint"], current)
    except FingerprintError as error:
        raise SiteBuildError(f"{source or lab.record.as_posix()}: {error}") from None


def is_stale(record: dict[str, Any], lab: Lab, root: Path, source: str | None = None) -> bool:
    return bool(stale_files(record, lab, root, source))


def run_benchmark(lab: Lab, root: Path, log: logging.Logger) -> None:
    """Run the lab's benchmark, streaming its progress lines into the build log, within a deadline."""
    arguments = lab.benchmark_arguments()
    log.info(f"lab {lab.name}: measuring: python {' '.join(arguments)}")
    process = subprocess.Popen([sys.executable, *arguments], cwd=root, env=subprocess_env(root),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def relay() -> None:  # on a thread, so the deadline below holds even if the benchmark hangs
        assert process.stderr is not None
        for line in process.stderr:
            if line.strip():
                lines.append(line.rstrip())
                log.info(f"lab {lab.name}: {lines[-1]}")

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        code = process.wait(timeout=BENCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise SiteBuildError(f"lab {lab.name}: benchmark exceeded {BENCH_TIMEOUT_S} s and was stopped; "
                             f"{lab.record} keeps its previous content") from None
    finally:
        reader.join(timeout=5)
    if code != 0:
        raise SiteBuildError(f"lab {lab.name}: benchmark exited with {code}: {(lines or ['no output'])[-1]}")


def fresh_record(lab: Lab, root: Path, policy: BenchPolicy, measured: set[str],
                 log: logging.Logger) -> tuple[dict[str, Any], bool]:
    """The record to render, measuring first when the policy asks; returns (record, measured now)."""
    record = read_record(lab, root)
    changed = [] if record is None else stale_files(record, lab, root)
    state = "missing" if record is None else "stale" if changed else "fresh"
    wanted = (policy is BenchPolicy.ALWAYS and lab.name not in measured) or (
        policy is BenchPolicy.AUTO and state != "fresh")
    if policy is BenchPolicy.NEVER and state != "fresh":
        why = "does not exist" if state == "missing" else (
            f"was measured on different lab sources (fingerprint mismatch: {', '.join(changed)} changed)")
        raise SiteBuildError(f"{lab.record}: record {why} and LAB_BENCH=never forbids measuring; "
                             f"run `make bench REFERENCE=1` or build with LAB_BENCH=auto")
    if not wanted:
        log.info(f"lab {lab.name}: record {lab.record} is {state}; reusing it")
        return record, False  # type: ignore[return-value]  # fresh implies present
    if state != "fresh":
        log.info(f"lab {lab.name}: record {lab.record} is {state}; running the benchmark")
    run_benchmark(lab, root, log)
    measured.add(lab.name)
    record = read_record(lab, root)
    if record is None or is_stale(record, lab, root):
        raise SiteBuildError(f"{lab.record}: still missing or stale after the benchmark ran")
    return record, True


def longest_first(labs: list[Lab], root: Path) -> list[Lab]:
    """The labs in the order their suites should start, the longest first by the size of their test files: with
    TEST_WORKERS suites at a time, the longest one started last would run on alone while the other worker idles
    (the serving lab's, started fourth in name order, set a cold build's length)."""
    def test_bytes(lab: Lab) -> int:
        start, pattern = lab.tests
        return sum(path.stat().st_size for path in (root / start).glob(pattern))
    return sorted(labs, key=test_bytes, reverse=True)


def run_all_lab_tests(labs: list[Lab], root: Path, log: logging.Logger) -> dict[str, dict[str, Any]]:
    """Every lab's test report (lab name -> report), TEST_WORKERS labs at a time; the first failure, in the
    labs' order, is raised once the suites still running have stopped, and suites not yet started never start."""
    cache_dir = root / ".cache" / "site_hooks"
    pool = ThreadPoolExecutor(max_workers=TEST_WORKERS, thread_name_prefix="lab-tests")
    try:
        futures = {lab.name: pool.submit(run_lab_tests, lab, root, cache_dir, log) for lab in longest_first(labs, root)}
        return {lab.name: futures[lab.name].result() for lab in labs}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def gather_evidence(lab: Lab, root: Path, policy: BenchPolicy, measured: set[str],
                    log: logging.Logger, tests: dict[str, Any]) -> Evidence:
    """The lab's record, once its tests have passed (timings of failing code are worthless): ``tests`` is
    its report from run_all_lab_tests."""
    record, measured_now = fresh_record(lab, root, policy, measured, log)
    reference = MachineRecord(lab.record.as_posix(), record, True, [])
    return Evidence(lab=lab, record=record, tests=tests, measured_now=measured_now,
                    build_machine=build_machine(tests), machines=(reference, *other_machines(lab, root, record)))
