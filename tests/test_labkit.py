"""labkit pieces the site and every benchmark rely on: source state, make bench's signals and labels,
the launcher's exit, machine labels, the record's write."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from labkit import harness, quiet, run_benchmarks, runs
from labkit.environment import git_state
from labkit.machines import LabelError, check_label
from labkit.records import atomic_write_json
from labkit.waiting import HANG_S, communicate, lines_until, run

from conftest import build_env

DEADLINE_S = HANG_S  # no wait here on a process lasts longer: a bound for a hang, not for a loaded machine
UNTIL_SIGNALLED = ["--sleep", str(10 * HANG_S)]  # a benchmark that runs until the test signals it, however late


# Every benchmark writes its record through atomic_write_json: it behaves like a plain write to the reader.
def test_a_new_record_gets_the_mode_the_umask_allows(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "record.json", {"lab": "x"})
    finally:
        os.umask(previous)
    assert (tmp_path / "record.json").stat().st_mode & 0o777 == 0o644


def test_replacing_a_read_only_record_keeps_it_read_only(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text("{}")
    path.chmod(0o444)
    atomic_write_json(path, {"lab": "x"})
    assert (path.stat().st_mode & 0o777, json.loads(path.read_text())) == (0o444, {"lab": "x"})


def test_a_temporary_file_left_by_a_killed_write_is_removed_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    leftover = tmp_path / ".record.json.abc123.tmp"
    leftover.write_text("half a record")
    atomic_write_json(path, {"lab": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def git(folder: Path, *args: str) -> None:
    run(["git", *args], f"git {args[0]}", cwd=folder, check=True, capture_output=True)


def test_an_untracked_measured_source_makes_the_tree_dirty(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "lab.py").write_text("A = 1\n")
    git(tmp_path, "add", "lab.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    assert git_state(tmp_path, sources=("lab.py",))["dirty"] is False
    (tmp_path / "extra.py").write_text("B = 2\n")  # untracked, but not measured
    assert git_state(tmp_path, sources=("lab.py",))["dirty"] is False
    assert git_state(tmp_path, sources=("lab.py", "extra.py"))["dirty"] is True  # in the fingerprint, not the commit
    (tmp_path / "lab.py").write_text("A = 2\n")
    assert git_state(tmp_path, sources=("lab.py",))["dirty"] is True


# A stand-in for a lab's benchmark: says it is ready, then either sleeps (until a signal ends it in one
# line, as labkit.launch does) or kills itself with the signal named by --die; only a run left alone
# writes its record, its own command line, to --output. --run-to names a file for the LABKIT_RUN it was handed.
FAKE_BENCHMARK = textwrap.dedent('''
    import json, os, signal, sys, time
    output = sys.argv[sys.argv.index("--output") + 1]
    if "--run-to" in sys.argv:
        with open(sys.argv[sys.argv.index("--run-to") + 1], "w") as stream:
            stream.write(os.environ.get("LABKIT_RUN", "none handed down"))
    if "--die" in sys.argv:  # no handler: the return code is minus the signal number
        os.kill(os.getpid(), getattr(signal, sys.argv[sys.argv.index("--die") + 1]))
    def stop(signum, frame):
        print(f"child: stopped ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
        os._exit(128 + signum)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    print("child: ready", file=sys.stderr, flush=True)
    time.sleep(float(sys.argv[sys.argv.index("--sleep") + 1]) if "--sleep" in sys.argv else 0)
    with open(output, "w") as stream:
        json.dump(sys.argv[1:], stream)
''')


def fake_root(root: Path, *labs: tuple[str, list[str]], reference_machine: str = "ref-box-1t") -> Path:
    """A repository holding fake labs (name, extra benchmark arguments), each with a reference record."""
    (root / "results").mkdir(parents=True)
    (root / "child.py").write_text(FAKE_BENCHMARK)
    for name, extra in labs:
        folder = root / "labs" / "demo" / name
        folder.mkdir(parents=True)
        benchmark = json.dumps(["child.py", "--output", "{record}", *extra])
        (folder / "lab.toml").write_text(
            f'name = "{name}"\ntitle = "{name}"\nrecord = "results/{name}.json"\nschema = "results/x.schema.json"\n'
            f'tests = {{ start = "labs/demo/{name}", pattern = "test_*.py" }}\nbenchmark = {benchmark}\n')
        (root / "results" / f"{name}.json").write_text(json.dumps({"lab": name, "machine": reference_machine}))
    return root


QUIET = quiet.Sample(seconds=3.0, cores=2, busy_cores=0.02, steal_share=0.0, load_average=0.1)


def in_process(monkeypatch: pytest.MonkeyPatch, root: Path, argv: list[str], machine: quiet.Sample = QUIET) -> int:
    """run_benchmarks.main on ``root``, on a machine that looks like ``machine`` (quiet unless a test says); the
    signal handlers it installs must be gone afterwards."""
    monkeypatch.setattr(run_benchmarks, "ROOT", root)
    monkeypatch.setattr(run_benchmarks, "machine_sample", lambda: machine)
    before = [signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)]
    code = run_benchmarks.main(argv)
    assert [signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)] == before
    return code


RUN_ON_ROOT = "import sys; from pathlib import Path; from labkit import run_benchmarks as r; " \
              "r.ROOT = Path(sys.argv[1]); sys.exit(r.main(sys.argv[2:]))"


def start(root: Path, *argv: str) -> subprocess.Popen[str]:
    """make bench on ``root`` in a process group of its own (a signal to the group spares pytest)."""
    process = subprocess.Popen([sys.executable, "-c", RUN_ON_ROOT, str(root), *argv], stderr=subprocess.PIPE,
                               text=True, env=build_env(), process_group=0)
    deadline = threading.Timer(DEADLINE_S, process.kill)
    deadline.daemon = True
    deadline.start()
    return process


def read_until(process: subprocess.Popen[str], text: str) -> list[str]:
    assert process.stderr is not None
    return [line.rstrip() for line in lines_until(process, process.stderr, text, f"make bench to say {text!r}")]


def finish(process: subprocess.Popen[str]) -> tuple[int, list[str]]:
    _, rest = communicate(process, "make bench to end")
    return process.returncode, rest.splitlines()


def test_sigterm_right_after_a_benchmark_is_announced_stops_it_before_it_writes(tmp_path: Path) -> None:
    root = fake_root(tmp_path, ("first-lab", UNTIL_SIGNALLED), ("second-lab", []))
    process = start(root, "--machine", "box")
    read_until(process, "first-lab: python")  # printed just before the benchmark starts
    process.send_signal(signal.SIGTERM)
    code, lines = finish(process)
    assert code == 143 and lines[-1] == "run_benchmarks: terminated during first-lab; the labs after it were not measured"
    assert not (root / "results" / "machines").exists()  # neither record written, no empty folder left
    assert "Traceback" not in "\n".join(lines)


@pytest.mark.parametrize("target", ["pid", "group"])
def test_ctrl_c_to_make_bench_reaches_the_benchmark_once_and_stops_the_run(tmp_path: Path, target: str) -> None:
    root = fake_root(tmp_path, ("first-lab", UNTIL_SIGNALLED), ("second-lab", []))
    process = start(root, "--machine", "box")
    read_until(process, "child: ready")
    if target == "pid":  # kill -INT <pid>: the benchmark hears of it only through make bench
        process.send_signal(signal.SIGINT)
    else:  # Ctrl-C at a terminal: the whole foreground process group
        os.killpg(process.pid, signal.SIGINT)
    code, lines = finish(process)
    assert code == 130
    assert lines == ["child: stopped (SIGINT)",
                     "run_benchmarks: interrupted during first-lab; the labs after it were not measured"]
    assert not (root / "results" / "machines").exists()


@pytest.mark.parametrize(("name", "code", "word"), [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_a_benchmark_killed_by_a_signal_stops_the_run_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, code: int,
    word: str,
) -> None:
    root = fake_root(tmp_path, ("first-lab", ["--die", name]), ("second-lab", []))
    assert in_process(monkeypatch, root, ["--machine", "box"]) == code  # the child returned -2 or -15
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"run_benchmarks: {word} during first-lab; the labs after it were not measured")
    assert not (root / "results" / "machines").exists()  # the second lab never ran


def test_ctrl_c_while_make_bench_imports_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    # The interrupt lands exactly while labkit.manifest is being imported, whatever the machine's speed.
    script = textwrap.dedent('''
        import os, runpy, signal, sys
        class InterruptDuringImport:
            def find_spec(self, name, path=None, target=None):
                if name == "labkit.manifest":
                    os.kill(os.getpid(), signal.SIGINT)
                return None
        sys.meta_path.insert(0, InterruptDuringImport())
        sys.argv = ["run_benchmarks", "--help"]
        runpy.run_module("labkit.run_benchmarks", run_name="__main__", alter_sys=True)
    ''')
    finished = run([sys.executable, "-c", script], "make bench to stop at the interrupt", capture_output=True,
                   text=True, env=build_env(), cwd=tmp_path)
    assert finished.returncode == 130, finished.stderr
    assert finished.stderr == "run_benchmarks: interrupted (SIGINT); no benchmark was running\n"


def test_make_bench_refuses_the_reference_records_label_when_given_it_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fake_root(tmp_path, ("first-lab", []), reference_machine="ref-box-1t")
    assert in_process(monkeypatch, root, ["--machine", "ref-box-1t"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "run_benchmarks: machine label 'ref-box-1t' is the label of the reference record results/first-lab.json")
    assert "MACHINE=<label>" in err and "REFERENCE=1" in err
    assert not (root / "results" / "machines").exists()
    assert in_process(monkeypatch, root, ["--reference"]) == 0  # replacing the reference is what REFERENCE=1 is for


def test_a_reference_run_on_a_busy_machine_is_refused_in_one_line_naming_the_load_and_keeps_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fake_root(tmp_path, ("first-lab", []), ("second-lab", []), reference_machine="ref-box-1t")
    records = {name: (root / "results" / f"{name}.json").read_bytes() for name in ("first-lab", "second-lab")}
    two_busy = quiet.Sample(seconds=3.0, cores=2, busy_cores=1.97, steal_share=0.0, load_average=2.13)
    assert in_process(monkeypatch, root, ["--reference"], two_busy) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == ("run_benchmarks: first-lab: not measured, its reference record kept: this machine is busy: "
                       "other work kept 1.97 of its 2 cores busy over 3 s (at most 0.25 for a reference record); load "
                       "average 2.13. A reference record is made on a quiet machine: stop the other work, or run plain "
                       "make bench for this machine's record; the labs after it were not measured")
    stolen = quiet.Sample(seconds=3.0, cores=2, busy_cores=0.1, steal_share=0.2, load_average=0.5)
    assert in_process(monkeypatch, root, ["--reference", "second-lab"], stolen) == 2
    assert "the hypervisor took 20% of the CPU time for other guests" in capsys.readouterr().err
    assert {name: (root / "results" / f"{name}.json").read_bytes() for name in records} == records
    assert in_process(monkeypatch, root, ["--machine", "mybox", "first-lab"], two_busy) == 0  # only references wait
    assert in_process(monkeypatch, root, ["--reference"], QUIET) == 0


def test_the_quiet_check_reads_other_work_from_the_kernels_counters() -> None:
    # user nice system idle iowait irq softirq steal, in ticks; 2 cores over 3 s = 600 ticks
    before = "cpu  1000 0 500 9000 0 0 0 0 0 0\ncpu0 ...\n"
    idle = quiet.between(before, "cpu  1002 0 503 9595 0 0 0 0 0 0\n", 3.0, 2, 0.1)
    assert idle.busy_cores == pytest.approx(2 * 5 / 600) and quiet.refusal(idle) is None
    loaded = quiet.between(before, "cpu  1590 0 505 9005 0 0 0 0 0 0\n", 3.0, 2, 2.0)
    assert loaded.busy_cores == pytest.approx(2 * 595 / 600)
    assert "other work kept 1.98 of its 2 cores busy" in quiet.refusal(loaded)
    stolen = quiet.between(before, "cpu  1010 0 510 9400 0 0 0 180 0 0\n", 3.0, 2, 0.5)
    assert stolen.steal_share == pytest.approx(0.3) and "hypervisor took 30%" in quiet.refusal(stolen)
    with pytest.raises(ValueError, match="aggregate 'cpu' line"):
        quiet.between("intr 1 2 3\n", before, 3.0, 2, 0.1)


def test_plain_make_bench_on_a_machine_like_the_references_writes_its_own_record_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fake_root(tmp_path, ("first-lab", []), reference_machine="ref-box-1t")
    reference = (root / "results" / "first-lab.json").read_bytes()
    monkeypatch.setattr(run_benchmarks, "derived_label", lambda: "ref-box-1t")  # what make bench derives there
    for _ in range(2):  # a second plain run refreshes the same record
        assert in_process(monkeypatch, root, []) == 0
        assert "labelled 'ref-box-1t-rerun'" in capsys.readouterr().err
    assert [p.name for p in (root / "results" / "machines" / "first-lab").iterdir()] == ["ref-box-1t-rerun.json"]
    assert (root / "results" / "first-lab.json").read_bytes() == reference


def test_make_bench_of_one_lab_quick_under_a_label_writes_that_machines_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fake_root(tmp_path, ("first-lab", []), ("second-lab", []))
    assert in_process(monkeypatch, root, ["--machine", "mybox", "--quick", "second-lab"]) == 0
    written = json.loads((root / "results" / "machines" / "second-lab" / "mybox.json").read_text())
    assert written == ["--output", "results/machines/second-lab/mybox.json", "--machine", "mybox", "--quick"]
    assert not (root / "results" / "machines" / "first-lab").exists()
    capsys.readouterr()
    assert in_process(monkeypatch, root, ["--reference", "--quick"]) == 2
    assert "never replaces a reference record" in capsys.readouterr().err


def test_one_make_bench_hands_every_benchmark_the_same_run_and_the_next_one_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fake_root(tmp_path, ("first-lab", ["--run-to", "first.run"]), ("second-lab", ["--run-to", "second.run"]))
    assert in_process(monkeypatch, root, ["--machine", "box"]) == 0
    first, second = (runs.parse_run((root / name).read_text()) for name in ("first.run", "second.run"))
    assert first == second and first["labs"] == ["first-lab", "second-lab"] and first["reference"] is False
    assert f"run_benchmarks: writing the records of machine 'box', run {first['id']}" in capsys.readouterr().err
    assert in_process(monkeypatch, root, ["--machine", "box", "second-lab"]) == 0
    again = runs.parse_run((root / "second.run").read_text())
    assert again["labs"] == ["second-lab"] and again["id"] != first["id"]
    assert runs.same_run({"run": first}, {"run": second}) and not runs.same_run({"run": first}, {"run": again})
    assert not runs.same_run({}, {})  # records made before runs were stored were measured in no shared run


@pytest.mark.parametrize("label", ["", "abc\n", "Box", "a..b"])
def test_a_machine_label_that_cannot_name_a_file_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], label: str
) -> None:
    with pytest.raises(LabelError):
        check_label(label, "--machine")
    with pytest.raises(argparse.ArgumentTypeError):
        harness.machine_label(label)  # a benchmark's own --machine
    root = fake_root(tmp_path, ("first-lab", []))
    assert in_process(monkeypatch, root, ["--machine", label]) == 2  # never the derived label instead
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--machine: machine label {label!r} must be" in err


def test_the_launcher_leaves_without_an_interpreter_shutdown_for_a_signal_to_land_in(tmp_path: Path) -> None:
    # An exit handler that signals the process stands for a signal arriving during shutdown: the launcher
    # must never get there, and must still deliver what main printed.
    (tmp_path / "fake_benchmark.py").write_text(textwrap.dedent('''
        import atexit, os, signal
        def main(argv):
            atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))
            print("benchmark: wrote the record")
            return 0
    '''))
    finished = run([sys.executable, "-m", "labkit.launch", "fake_benchmark"], "the launcher to exit",
                   capture_output=True, text=True, cwd=tmp_path, env=build_env(PYTHONPATH=str(tmp_path)))
    assert (finished.returncode, finished.stdout, finished.stderr) == (0, "benchmark: wrote the record\n", "")


def test_the_launcher_asks_for_huge_pages_before_torch_loads_unless_told_otherwise(tmp_path: Path) -> None:
    # the benchmark module reports what its environment held when it was imported, and what the record will say
    (tmp_path / "fake_benchmark.py").write_text(textwrap.dedent('''
        import os, sys
        from labkit.environment import memory
        def main(argv):
            print(os.environ.get("THP_MEM_ALLOC_ENABLE"), memory()["torch_huge_pages"], "torch" in sys.modules)
            return 0
    '''))
    for given, expected in ((None, "1 True False"), ("0", "0 False False")):
        env = build_env(PYTHONPATH=str(tmp_path))
        env.pop("THP_MEM_ALLOC_ENABLE", None)
        if given is not None:
            env["THP_MEM_ALLOC_ENABLE"] = given
        finished = run([sys.executable, "-m", "labkit.launch", "fake_benchmark"], "the launcher to run",
                       capture_output=True, text=True, cwd=tmp_path, env=env)
        assert (finished.returncode, finished.stdout.strip()) == (0, expected)


def test_the_kernels_huge_page_mode_is_the_bracketed_word_or_none(tmp_path: Path) -> None:
    from labkit.environment import memory

    mode = tmp_path / "enabled"
    mode.write_text("always [madvise] never\n")
    assert memory(mode)["transparent_huge_pages"] == "madvise"
    assert memory(tmp_path / "missing")["transparent_huge_pages"] is None


def test_the_launcher_refuses_a_malformed_run_in_one_line_before_it_imports_the_benchmark(tmp_path: Path) -> None:
    (tmp_path / "fake_benchmark.py").write_text("raise SystemExit('imported')\n")
    finished = run([sys.executable, "-m", "labkit.launch", "fake_benchmark"], "the launcher to refuse the run",
                   capture_output=True, text=True, cwd=tmp_path,
                   env=build_env(PYTHONPATH=str(tmp_path), LABKIT_RUN='["not", "a", "run"]'))
    assert (finished.returncode, finished.stderr) == (1, "benchmark: LABKIT_RUN must be a JSON object of exactly id, "
                                                         "started_utc, labs, reference, got list; nothing was measured\n")


# A signal at the record's write, run through the launcher: the interrupt is placed where it is hard to
# get right (the handler runs as os.replace returns, or Python runs it late, after the rename, or it
# comes during the fsync), and what the benchmark says must be what became of the record.
SIGNAL_AT_THE_WRITE = textwrap.dedent('''
    import os, signal, sys
    from pathlib import Path
    from labkit import bench

    def main(argv):
        where, output = argv
        real_replace, real_fsync = os.replace, os.fsync
        def replace(source, target):
            real_replace(source, target)
            if where == "after-rename":
                os.kill(os.getpid(), signal.SIGINT)
            elif where == "handler-runs-late":  # a signal that came just before, handled just after
                raise KeyboardInterrupt
        def fsync(fd):
            real_fsync(fd)
            os.kill(os.getpid(), signal.SIGTERM)
        os.replace = replace
        if where == "during-fsync":
            os.fsync = fsync
        schema = Path(output).with_name("x.schema.json")
        schema.write_text('{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}')
        return bench.write_record(Path(output), lambda: {"new": True}, schema)
''')


@pytest.mark.parametrize(
    ("where", "code", "line", "replaced"),
    [
        ("after-rename", 130, "benchmark: interrupted (SIGINT); {output} had already been written and is complete", True),
        ("handler-runs-late", 130, "benchmark: interrupted (SIGINT); {output} had already been written and is complete", True),
        ("during-fsync", 143, "benchmark: interrupted (SIGTERM); {output} was not written and still holds the previous record", False),
    ],
)
def test_a_signal_at_the_records_write_is_reported_as_what_became_of_the_record(
        tmp_path: Path, where: str, code: int, line: str, replaced: bool) -> None:
    (tmp_path / "signal_at_the_write.py").write_text(SIGNAL_AT_THE_WRITE)
    output = tmp_path / "record.json"
    output.write_text('{"old": true}')
    finished = run([sys.executable, "-m", "labkit.launch", "signal_at_the_write", where, str(output)],
                   f"the launcher to exit at a signal {where}", capture_output=True, text=True, cwd=tmp_path,
                   env=build_env(PYTHONPATH=str(tmp_path)))
    assert (finished.returncode, finished.stderr) == (code, line.format(output=output) + "\n")
    assert output.read_text() == ('{\n  "new": true\n}\n' if replaced else '{"old": true}')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json", "signal_at_the_write.py", "x.schema.json"]


def make_bench(root: Path) -> subprocess.Popen[str]:
    """`make bench` on a fake repository: the Makefile's recipe, run by GNU make, on a copy of labkit
    (its ROOT is the copy's repository), in a process group of its own."""
    shutil.copytree(Path(run_benchmarks.__file__).parent, root / "labs" / "labkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "Makefile").write_text(f"bench:\n\texec {sys.executable} -m labkit.run_benchmarks --machine box\n")
    process = subprocess.Popen(["make", "-s", "bench"], cwd=root, stderr=subprocess.PIPE, text=True,
                               env=build_env(PYTHONPATH=str(root / "labs")), process_group=0)
    deadline = threading.Timer(DEADLINE_S, process.kill)
    deadline.daemon = True
    deadline.start()
    return process


@pytest.mark.parametrize("target", ["make", "make's group"])
def test_sigkill_to_make_bench_stops_the_benchmark_before_it_replaces_the_record(tmp_path: Path, target: str) -> None:
    root = fake_root(tmp_path, ("first-lab", UNTIL_SIGNALLED))
    process = make_bench(root)
    read_until(process, "child: ready")
    if target == "make":
        process.kill()  # run_benchmarks, orphaned, hears of it and stops the benchmark
    else:
        os.killpg(process.pid, signal.SIGKILL)  # make and run_benchmarks gone; the benchmark is told
    _, lines = finish(process)
    assert "child: stopped (SIGTERM)" in lines
    assert not (root / "results" / "machines" / "first-lab" / "box.json").exists()


def test_sigint_to_make_alone_reaches_the_benchmark_and_ends_make_by_sigint(tmp_path: Path) -> None:
    root = fake_root(tmp_path, ("first-lab", UNTIL_SIGNALLED), ("second-lab", []))
    process = make_bench(root)
    read_until(process, "child: ready")
    process.send_signal(signal.SIGINT)  # kill -INT <make>: make itself passes nothing on
    code, lines = finish(process)
    assert code == -signal.SIGINT
    assert lines[:2] == ["child: stopped (SIGINT)",
                         "run_benchmarks: interrupted during first-lab; the labs after it were not measured"]
    assert not (root / "results" / "machines").exists()


def test_a_signal_to_the_benchmark_alone_ends_make_bench_by_that_signal_not_with_status_2(tmp_path: Path) -> None:
    root = fake_root(tmp_path, ("first-lab", ["--die", "SIGTERM"]), ("second-lab", []))
    code, lines = finish(make_bench(root))
    assert code == -signal.SIGTERM  # the shell's 143; make's own status for a failed recipe would be 2
    assert "run_benchmarks: terminated during first-lab; the labs after it were not measured" in lines


# What a process started by the suite inherits: 1 if SIGINT reaches it ignored.
SIGINT_OF_A_CHILD = "import subprocess, sys; from labkit.waiting import interrupt_by_default; " \
    "interrupt_by_default() if sys.argv[1] == 'reset' else None; sys.exit(subprocess.run([sys.executable, '-c', " \
    "'import signal, sys; sys.exit(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)']).returncode)"


@pytest.mark.parametrize(("call", "ignored"), [("reset", 0), ("leave", 1)])
def test_a_suite_started_with_sigint_ignored_starts_processes_that_sigint_reaches(call: str, ignored: int) -> None:
    finished = run([sys.executable, "-c", SIGINT_OF_A_CHILD, call], "the child to report its SIGINT", env=build_env(),
                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as `pytest &` gets it
    assert finished.returncode == ignored


# A stand-in for make's two states with SIGINT blocked: starting or reaping a recipe (its handler still
# installed) and inside its handler (which first restores the default action). Says "ready", then waits.
MASKED = "import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_DFL if sys.argv[1] == 'handling' " \
    "else lambda *a: None); signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); print('ready', flush=True); " \
    "time.sleep(10 * float(sys.argv[2]))"


@pytest.mark.parametrize(("state", "stopping"), [("handling", signal.SIGINT), ("starting", None)])
def test_make_counts_as_stopping_only_with_sigint_blocked_and_no_longer_caught(state: str, stopping: int | None) -> None:
    process = subprocess.Popen([sys.executable, "-c", MASKED, state, str(HANG_S)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        lines_until(process, process.stdout, "ready", "the stand-in to block SIGINT")
        assert run_benchmarks.make_is_stopping(process.pid) == stopping
    finally:
        process.kill()
        process.wait()


def fake_suite(folder: Path, apart_body: str = "self.assertTrue(True)") -> Path:
    """Two test files, the second meant to run apart: each test writes its process id beside the files."""
    for name, body in (("test_main.py", "self.assertTrue(True)"), ("test_slow.py", apart_body)):
        (folder / name).write_text(textwrap.dedent(f"""
            import os, unittest
            from pathlib import Path
            class T(unittest.TestCase):
                def test_one(self):
                    (Path(__file__).parent / ("pid-" + Path(__file__).stem)).write_text(str(os.getpid()))
                    {body}
        """))
    return folder


def report_of(folder: Path, *options: str) -> tuple[int, dict[str, object], str]:
    output = folder / "report.json"
    done = run([sys.executable, "-m", "labkit.testreport", "--start", str(folder), "--pattern", "test_*.py",
                "--output", str(output), *options], "the test report", capture_output=True, text=True)
    report = json.loads(output.read_text()) if output.exists() else {}
    return done.returncode, report, done.stderr


def test_a_file_run_apart_runs_in_another_process_and_its_tests_are_in_the_one_report(tmp_path: Path) -> None:
    code, report, _ = report_of(fake_suite(tmp_path), "--apart", "test_slow.py")
    assert code == 0 and report["successful"] and (report["ran"], report["passed"]) == (2, 2)
    assert sorted(entry["group"] for entry in report["tests"]) == ["test_main.T", "test_slow.T"]
    assert (tmp_path / "pid-test_main").read_text() != (tmp_path / "pid-test_slow").read_text()


def test_a_failure_in_a_file_run_apart_fails_the_whole_report(tmp_path: Path) -> None:
    code, report, log = report_of(fake_suite(tmp_path, "self.fail('apart broke')"), "--apart", "test_slow.py")
    assert code == 1 and not report["successful"] and (report["ran"], report["failed"]) == (2, 1)
    assert [entry["outcome"] for entry in report["tests"] if entry["group"] == "test_slow.T"] == ["failed"]
    assert "apart broke" in log  # the apart process's own log follows the rest


def test_a_file_run_apart_that_crashes_is_an_error_naming_it(tmp_path: Path) -> None:
    code, report, _ = report_of(fake_suite(tmp_path, "os._exit(3)"), "--apart", "test_slow.py")
    assert code == 1 and not report["successful"] and report["errors"] == 1
    assert [entry["id"] for entry in report["tests"] if entry["outcome"] == "error"] == ["test_slow.py (run apart)"]


def test_a_file_to_run_apart_that_the_suite_does_not_have_is_refused_naming_it(tmp_path: Path) -> None:
    code, report, log = report_of(fake_suite(tmp_path), "--apart", "test_missing.py")
    assert code != 0 and report == {}
    assert "test_missing.py named to run apart or alone is not a test file of" in log
