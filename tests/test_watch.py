"""The machine's state through a benchmark's run (labkit.watch), and what a record's write makes of it (labkit.writing):
every reading here is made up, so nothing depends on this host's load, speed or operating system."""

from __future__ import annotations

import argparse
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from labkit import runs, watch, writing
from labkit.manifest import Lab, load_lab
from labkit.records import load_json
from labkit.waiting import HANG_S

from conftest import ROOT

COMMON = ROOT / "results" / "record-common.schema.json"
HZ = 100  # clock ticks a second in the made-up readings, as USER_HZ is on Linux


def stat_text(busy: int, idle: int, steal: int = 0) -> str:
    """/proc/stat's aggregate line with ``busy`` ticks as user time."""
    return f"cpu  {busy} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n"


class FakeMachine:
    """Readings ``step_s`` apart on ``cores`` CPUs: in each step other work keeps ``other_cores`` busy and this
    process tree ``own_cores``; ``enough`` is set once ``reads`` readings were taken."""

    def __init__(self, other_cores: float = 0.0, own_cores: float = 0.0, step_s: float = 10.0, cores: int = 2,
                 reads: int = 0) -> None:
        self.other_cores, self.own_cores, self.step_s, self.cores, self.reads = other_cores, own_cores, step_s, cores, reads
        self.calls = 0
        self.enough = threading.Event()

    def __call__(self) -> watch.Reading:
        at = self.calls * self.step_s
        self.calls += 1
        if self.calls >= self.reads:
            self.enough.set()
        busy, own = round(at * HZ * (self.other_cores + self.own_cores)), round(at * HZ * self.own_cores)
        return watch.Reading(at, stat_text(busy, round(at * HZ * self.cores) - busy), own, self.other_cores)


def valid_state(state: dict[str, Any]) -> None:
    """``state`` is a valid machine_state of record-common.schema.json, or ValidationError."""
    registry = Registry().with_resource("record-common.schema.json", Resource.from_contents(load_json(COMMON, "schema")))
    jsonschema.Draft202012Validator({"$ref": "record-common.schema.json#/$defs/machine_state"},
                                    registry=registry).validate(state)


def test_other_work_is_the_machines_busy_time_less_this_process_trees_own() -> None:
    first = watch.Reading(0.0, stat_text(1000, 9000), 500, 0.1)
    # 10 s on 2 cores: 2,000 ticks, 1,000 of them busy (one core's worth)
    busy = stat_text(2000, 10000)
    ours = watch.sample("during", 0.0, first, watch.Reading(10.0, busy, 1500, 1.0), cores=2)
    theirs = watch.sample("during", 0.0, first, watch.Reading(10.0, busy, 500, 1.0), cores=2)
    assert ours["other_busy_cores"] == pytest.approx(0.0) and theirs["other_busy_cores"] == pytest.approx(1.0)
    rounded_apart = watch.sample("during", 0.0, first, watch.Reading(10.0, busy, 1510, 1.0), cores=2)
    assert rounded_apart["other_busy_cores"] == 0.0  # the kernel's two accountings differ by a tick: never below 0


def fake_proc(folder: Path, processes: dict[int, tuple[str, int, int]]) -> Path:
    """A /proc of ``processes`` (pid -> command, parent pid, CPU ticks spread over utime, stime, cutime, cstime)."""
    (folder / "stat").write_text(stat_text(1000, 9000))
    (folder / "loadavg").write_text("0.42 0.30 0.20 1/80 4242\n")
    for pid, (command, parent, ticks) in processes.items():
        (folder / str(pid)).mkdir()
        times = [ticks // 4, ticks // 4, ticks // 4, ticks - 3 * (ticks // 4)]
        fields = ["S", parent, *([0] * 9), *times, 20, 0, 1, 0, 100]  # state, ppid, ..., utime to cstime, ...
        (folder / str(pid) / "stat").write_text(f"{pid} ({command}) {' '.join(map(str, fields))}\n")
    (folder / "999").mkdir()  # a process that ended between the listing and the read: no stat left
    return folder


def test_this_process_tree_counts_every_descendant_and_nothing_else(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {
        1: ("init", 0, 7000),
        100: ("python (bench) x", 1, 400),  # the benchmark: a command name with spaces and parentheses
        101: ("python", 100, 30),  # the lab's server
        102: ("cc1", 101, 5),  # started by the server
        200: ("cron job)", 1, 9000),  # another process tree: other work
    })
    reading = watch.read_machine(proc, root=100)
    assert (reading.own_ticks, reading.load_average) == (435, 0.42)
    assert watch.read_machine(proc, root=101).own_ticks == 35


def test_a_machine_without_a_readable_proc_leaves_no_samples_and_says_why(tmp_path: Path) -> None:
    with watch.Watch(edge_s=0.0, read=lambda: watch.read_machine(tmp_path / "none"), cores=2) as watching:
        pass
    state = watching.state()
    assert state["samples"] == [] and state["unavailable"].startswith("/proc could not be read: ")
    valid_state(state)
    with pytest.raises(jsonschema.ValidationError, match="'unavailable' is a required property"):
        valid_state({"cores": 2, "every_s": 10.0, "samples": []})  # no samples, and no word on why


def test_samples_run_before_during_and_after_the_measurement_in_order() -> None:
    machine = FakeMachine(other_cores=0.5, reads=5)
    with watch.Watch(edge_s=0.0, every_s=0.001, read=machine, cores=2) as watching:
        assert machine.enough.wait(HANG_S), "the sampler took no readings during the measurement"
    state = watching.state()
    phases = [s["phase"] for s in state["samples"]]
    assert phases[0] == "before" and phases[-1] == "after" and set(phases[1:-1]) == {"during"}
    assert len(phases) >= 5  # the before sample took two readings, the sampler the next three at least
    starts = [s["start_s"] for s in state["samples"]]
    assert starts == sorted(starts) and starts[0] == 0.0
    assert {s["other_busy_cores"] for s in state["samples"]} == {0.5}
    valid_state(state)


def test_the_sampler_stops_when_the_measurement_ends_not_at_its_next_wake_up() -> None:
    watching = watch.Watch(edge_s=0.0, every_s=10 * HANG_S, read=FakeMachine(), cores=2)

    def measure() -> None:
        with watching:
            pass

    run = threading.Thread(target=measure, daemon=True)
    run.start()
    run.join(HANG_S)
    assert not run.is_alive(), f"the watch waited out its {10 * HANG_S} s interval after the measurement ended"
    assert [s["phase"] for s in watching.state()["samples"]] == ["before", "during", "after"]


@pytest.mark.parametrize(("step_s", "phases"), [(0.5, ["before", "after"]), (10.0, ["before", "during", "after"])])
def test_the_measurements_last_partial_interval_is_kept_from_one_second(step_s: float, phases: list[str]) -> None:
    with watch.Watch(edge_s=0.0, every_s=10 * HANG_S, read=FakeMachine(step_s=step_s), cores=2) as watching:
        pass
    assert [s["phase"] for s in watching.state()["samples"]] == phases


def test_a_failing_measurement_gets_no_after_sample() -> None:
    watching = watch.Watch(edge_s=0.0, every_s=10 * HANG_S, read=FakeMachine(), cores=2)
    with pytest.raises(RuntimeError, match="the modes disagree"), watching:
        raise RuntimeError("the modes disagree")
    assert [s["phase"] for s in watching.state()["samples"]] == ["before", "during"]


def state_of(*samples: tuple[str, float, float, float]) -> dict[str, Any]:
    """A machine_state of (phase, seconds, other_busy_cores, steal_share) samples on 2 cores."""
    start, rows = 0.0, []
    for phase, seconds, busy, steal in samples:
        rows.append({"phase": phase, "start_s": start, "seconds": seconds, "other_busy_cores": busy,
                     "steal_share": steal, "load_average": 0.5})
        start += seconds
    return {"cores": 2, "every_s": 10.0, "samples": rows}


def test_the_load_of_a_run_weighs_each_sample_by_its_length_and_its_refusal_names_the_load() -> None:
    # a loud 2 s edge beside 20 s of quiet: not a loaded run (the samples' plain mean would be 0.5 cores)
    short_burst = watch.load_of(state_of(("before", 2.0, 0.0, 0.0), ("during", 10.0, 0.0, 0.0),
                                         ("during", 10.0, 0.0, 0.0), ("after", 2.0, 2.0, 0.0)))
    assert short_burst is not None
    assert short_burst.busy_cores == pytest.approx(4 / 24) and short_burst.refusal is None
    assert (short_burst.peak_busy_cores, short_burst.peak_phase, short_burst.peak_seconds) == (2.0, "after", 2.0)
    loaded = watch.load_of(state_of(("before", 2.0, 0.0, 0.0), ("during", 10.0, 1.5, 0.0),
                                    ("during", 10.0, 1.5, 0.2), ("after", 2.0, 0.0, 0.0)))
    assert loaded is not None and loaded.seconds == 24.0
    assert loaded.refusal == ("other work kept 1.25 of 2 cores busy on average over its 24 s (at most 0.25 for a "
                              "reference record); the hypervisor took 8% of the CPU time for other guests on "
                              "average (at most 5%)")
    assert watch.load_of(None) is None and watch.load_of({"cores": 2, "every_s": 10.0, "samples": [],
                                                          "unavailable": "not Linux"}) is None


def toy_lab(root: Path) -> Lab:
    """A lab in ``root`` whose schema lists its top-level fields, as every lab's does, with a reference record."""
    folder = root / "labs" / "demo" / "toy"
    folder.mkdir(parents=True)
    (folder / "benchmark.py").write_text("ANSWER = 42\n")
    (folder / "lab.toml").write_text(
        'name = "toy"\ntitle = "Toy"\nrecord = "results/toy.json"\nschema = "results/toy.schema.json"\n'
        'tests = { start = "labs/demo/toy", pattern = "test_*.py" }\n'
        'benchmark = ["labs/demo/toy/benchmark.py", "--output", "{record}"]\n')
    (root / "results" / "machines" / "toy").mkdir(parents=True)
    shutil.copy(COMMON, root / "results")
    header = ["schema_version", "lab", "machine", "created_utc", "command", "environment", "fingerprint"]
    (root / "results" / "toy.schema.json").write_text(json.dumps({
        "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "toy.schema.json", "type": "object",
        "allOf": [{"$ref": "record-common.schema.json#/$defs/header"}], "required": ["answer"],
        "additionalProperties": False,
        "properties": {**dict.fromkeys(header, True), "machine_state": True, "run": True, "answer": {"type": "integer"}}}))
    (root / "results" / "toy.json").write_bytes(PREVIOUS)
    return load_lab(folder / "lab.toml", root)


PREVIOUS = b'{"previous": "record"}\n'


def write(monkeypatch: pytest.MonkeyPatch, root: Path, output: str, machine: FakeMachine, quick: bool = False,
          **options: Any) -> int:
    """writing.run of the toy lab to ``output`` (relative to ``root``), on a machine that reads like ``machine``."""
    monkeypatch.setattr(writing, "machine_watch",
                        lambda _quick: watch.Watch(edge_s=0.0, every_s=10 * HANG_S, read=machine, cores=2))
    args = argparse.Namespace(output=root / output, machine="toybox", quick=quick)
    return writing.run(toy_lab(root), root, args, [], lambda: {"answer": 42},
                       lambda record: [f"the answer is {record['answer']}"], **options)


def test_a_reference_record_measured_under_load_is_refused_and_the_previous_one_kept(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert write(monkeypatch, tmp_path, "results/toy.json", FakeMachine(other_cores=1.5)) == 1
    assert (tmp_path / "results" / "toy.json").read_bytes() == PREVIOUS
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "machines", "record-common.schema.json", "toy.json", "toy.schema.json"]  # no temporary file left
    assert capsys.readouterr().err.splitlines() == [
        f"benchmark: {tmp_path / 'results' / 'toy.json'} was not written and still holds the previous record: this "
        f"run was measured under load: other work kept 1.50 of 2 cores busy on average over its 30 s (at most 0.25 "
        f"for a reference record)"]


@pytest.mark.parametrize(("output", "quick"), [("results/machines/toy/toybox.json", False), ("results/toy.json", True)])
def test_a_machines_record_or_a_quick_one_is_written_under_the_same_load_and_holds_its_samples(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, output: str, quick: bool) -> None:
    assert write(monkeypatch, tmp_path, output, FakeMachine(other_cores=1.5), quick=quick) == 0
    record = load_json(tmp_path / output, "record")
    assert [s["phase"] for s in record["machine_state"]["samples"]] == ["before", "during", "after"]
    loaded = watch.load_of(record["machine_state"])
    assert loaded is not None and loaded.busy_cores == pytest.approx(1.5)


def test_a_reason_of_the_labs_own_refuses_a_reference_record_from_a_quiet_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    given: list[dict[str, Any]] = []

    def floors_moved(record: dict[str, Any]) -> str:
        given.append(record)
        return "the floors moved by 12% between their two measurements (at most 5%)"

    assert write(monkeypatch, tmp_path, "results/toy.json", FakeMachine(other_cores=0.02),
                 refuse_reference=floors_moved) == 1
    assert (tmp_path / "results" / "toy.json").read_bytes() == PREVIOUS
    assert "still holds the previous record: the floors moved by 12%" in capsys.readouterr().err
    assert given[0]["answer"] == 42 and len(given[0]["machine_state"]["samples"]) == 3
    assert write(monkeypatch, tmp_path / "quiet", "results/toy.json", FakeMachine(other_cores=0.02),
                 refuse_reference=lambda record: None) == 0


def test_the_record_names_the_run_make_bench_handed_down_or_a_run_of_its_own(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    given = runs.new_run(["kv-cache", "toy"], reference=True)
    monkeypatch.setenv(runs.ENV, runs.to_env(given))
    assert write(monkeypatch, tmp_path / "handed", "results/toy.json", FakeMachine()) == 0
    assert load_json(tmp_path / "handed" / "results" / "toy.json", "record")["run"] == given
    monkeypatch.delenv(runs.ENV)  # run directly: a run of its own, this lab alone
    assert write(monkeypatch, tmp_path / "alone", "results/machines/toy/toybox.json", FakeMachine()) == 0
    alone = load_json(tmp_path / "alone" / "results" / "machines" / "toy" / "toybox.json", "record")["run"]
    assert alone["labs"] == ["toy"] and alone["reference"] is False and alone["id"] != given["id"]


@pytest.mark.parametrize(("value", "said"), [
    ("{not json", "LABKIT_RUN is not JSON"),
    ('{"id": "x"}', "LABKIT_RUN must be a JSON object of exactly id, started_utc, labs, reference"),
    ('{"id": "2026-01-03", "started_utc": "2026-01-03T20:15:00Z", "labs": ["toy"], "reference": false}',
     "LABKIT_RUN: id '2026-01-03' is not a UTC start"),
    ('{"id": "20260103T201500Z-3fa9c1", "started_utc": "2026-01-03T20:15:00Z", "labs": ["kv-cache"], '
     '"reference": false}', "LABKIT_RUN: run 20260103T201500Z-3fa9c1 measures kv-cache, not this benchmark's lab toy"),
])
def test_a_malformed_run_stops_the_benchmark_in_one_line_before_it_measures(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str,
        said: str) -> None:
    monkeypatch.setenv(runs.ENV, value)
    machine = FakeMachine()
    assert write(monkeypatch, tmp_path, "results/toy.json", machine) == 1
    assert (tmp_path / "results" / "toy.json").read_bytes() == PREVIOUS and machine.calls == 0  # never watched
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"benchmark: {said}") and "nothing was measured" in err
