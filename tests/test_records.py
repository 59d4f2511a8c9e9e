"""Records a build must refuse, each with one clear line, and the freshness rules of LAB_BENCH."""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from labkit.figures import fill
from labkit.manifest import Lab, ManifestError, discover_labs, load_lab
from labkit.records import RecordError, atomic_write_json, load_record, path_text
from labkit.summary import sweep_figures
from labkit.testing import committed_record
from labkit.waiting import run
from site_hooks.consistency import check_header, check_sweep
from site_hooks.errors import SiteBuildError
from site_hooks.orchestrate import (
    BenchPolicy,
    bench_policy,
    fresh_record,
    is_stale,
    other_machines,
    read_record,
    stale_files,
)
from site_hooks.orchestrate import tests_digest as digest_of_tests  # a name pytest does not collect

from conftest import LAB, ROOT, SCHEMA, STORAGE_LAB, ToySite

log = logging.getLogger("test")


def write(path: Path, record: dict[str, Any]) -> Path:
    path.write_text(json.dumps(record))
    return path


def test_committed_record_is_valid_and_its_statistics_match_its_raw_durations() -> None:
    assert read_record(LAB, ROOT) is not None


def test_committed_record_was_measured_on_the_current_lab_sources() -> None:
    record = load_record(ROOT / LAB.record, SCHEMA)
    assert not is_stale(record, LAB, ROOT), "results/cache-results.json is stale: run `make bench REFERENCE=1` and commit it"


def test_missing_record_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match=rf"^{re.escape(str(tmp_path))}/none\.json: measurement record not found$"):
        load_record(tmp_path / "none.json", SCHEMA)


def test_corrupt_record_names_the_file_and_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"schema_version": 1,\n  "lab": }')
    with pytest.raises(RecordError, match=r"bad\.json: measurement record is not valid JSON \(line 2, column 10"):
        load_record(path, SCHEMA)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xef\xbb\xbf{}", "starts with a UTF-8 byte order mark; JSON is UTF-8 without one (RFC 8259)"),
        ('{"a": 1}'.encode("utf-16"), "is not UTF-8 text (byte 0)"),
        (b'{"a": 1, "a": 2}', "holds key 'a' twice in one object"),
    ],
)
def test_a_record_must_be_utf8_json_without_a_byte_order_mark_each_key_once(tmp_path: Path, content: bytes,
                                                                             message: str) -> None:
    (tmp_path / "r.json").write_bytes(content)
    with pytest.raises(RecordError, match=rf"^{re.escape(str(tmp_path))}/r\.json: measurement record {re.escape(message)}"):
        load_record(tmp_path / "r.json", SCHEMA)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r.pop("environment"), r"field \$ is invalid: 'environment' is a required property"),
        (lambda r: r["lengths"][1]["modes"]["full"].update(median_ns="fast"), r"field \$\.lengths\[1\]\.modes\.full\.median_ns"),
        (lambda r: r.update(schema_version=1), r"field \$\.schema_version is invalid"),
        (lambda r: r["lengths"][0]["equivalence"].update(within_tolerance=False), r"field \$\.lengths\[0\]\.equivalence\.within_tolerance"),
    ],
)
def test_schema_invalid_record_names_the_field(tmp_path: Path, record: dict[str, Any], edit: Any, field: str) -> None:
    edit(record)
    with pytest.raises(RecordError, match=field):
        load_record(write(tmp_path / "r.json", record), SCHEMA)


def test_schema_with_a_dangling_reference_is_a_clear_error(tmp_path: Path, record: dict[str, Any]) -> None:
    schema = tmp_path / "lonely.schema.json"
    schema.write_text(SCHEMA.read_text())  # without record-common.schema.json beside it
    with pytest.raises(RecordError, match=r"r\.json: its schema cannot be used: unresolvable reference"):
        load_record(write(tmp_path / "r.json", record), schema)


def test_hand_edited_median_is_refused(record: dict[str, Any]) -> None:
    record["lengths"][2]["modes"]["cached"]["median_ns"] += 1000
    with pytest.raises(RecordError, match=r"\$\.lengths\[2\]\.modes\.cached\.median_ns is \d+, but its raw durations give"):
        check_sweep(record, "r.json")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["config"]["benchmark"].update(lengths=[16, 32]), r"\$\.lengths holds lengths \[16, 32, 64"),
        (lambda r: r["config"]["benchmark"].update(repeats=99), r"\$\.lengths\[0\]\.order has 7 repetitions, config says repeats = 99"),
        (lambda r: r["lengths"][1]["equivalence"]["cached"].update(max_abs_diff=3.5), r"\$\.lengths\[1\]\.equivalence\.cached\.max_abs_diff is 3\.5, beyond"),
        (lambda r: r["lengths"][0]["speedup"].update(full={"ratio_of_medians": 1.0, "median_of_paired_ratios": 1.0}), r"\$\.lengths\[0\]\.speedup covers \['cached', 'full'\], expected \['cached'\]"),
        (lambda r: r["lengths"][0]["modes"]["full"]["durations_ns"].pop(), r"\$\.lengths\[0\]\.modes\.full\.durations_ns holds 6 durations, config says repeats = 7"),
        (lambda r: r["lengths"][0]["order"].__setitem__(1, ["full", "full"]), r"^r\.json: field \$\.lengths\[0\]\.order\[1\] is \['full', 'full'\], not an order of the modes"),
    ],
)
def test_records_whose_parts_contradict_each_other_are_refused(record: dict[str, Any], edit: Any, message: str) -> None:
    edit(record)
    with pytest.raises(RecordError, match=message):
        check_sweep(record, "r.json")


def test_committed_storage_record_is_valid_fresh_and_consistent() -> None:
    record = read_record(STORAGE_LAB, ROOT)
    assert record is not None
    assert not is_stale(record, STORAGE_LAB, ROOT), "results/storage-results.json is stale: run `make bench REFERENCE=1`"


def edited_copy(tmp_path: Path, lab: Lab, text: str) -> Path:
    """A site root holding the schemas and ``text`` as ``lab``'s record."""
    shutil.copytree(ROOT / "results", tmp_path / "results", ignore=shutil.ignore_patterns("*-results.json"))
    (tmp_path / lab.record).write_text(text)
    return tmp_path


def stored_text(lab: Lab) -> str:
    """The committed record's text as a record that stored its figures would hold it (a record made before they
    were derived when read, or a hand edit): each figure there must still equal its derivation."""
    return json.dumps(committed_record(ROOT / lab.folder / "lab.toml"), indent=2)


def refusal(tmp_path: Path, lab: Lab, text: str) -> str:
    with pytest.raises(SiteBuildError) as refused:
        read_record(lab, edited_copy(tmp_path, lab, text))
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{lab.record.as_posix()}: ")
    return message


def reversed_sweep(text: str) -> str:
    """The sweep longest first, consistently so: its config, its entries and its precision check at 16."""
    record = json.loads(text)
    record["lengths"].reverse()
    record["config"]["benchmark"]["lengths"].reverse()
    record["precision"]["length"] = record["lengths"][-1]["length"]
    return json.dumps(record)


def swapped_order(text: str) -> str:
    """The second repetition at the first length claims the listed order, which the rotation gives the first."""
    record = json.loads(text)
    entry = record["lengths"][0]
    entry["order"][1] = list(entry["order"][0])
    return json.dumps(record)


@pytest.mark.parametrize(
    ("lab", "edit", "field"),
    [
        (LAB, lambda t: t.replace('"max_abs_diff": ', '"max_abs_diff": NaN, "x": ', 1), "is NaN"),
        (LAB, lambda t: re.sub(r'"atol": [^,}]+', '"atol": Infinity', t, count=1), "$.tolerance.atol is Infinity"),
        (LAB, lambda t: re.sub(r'"steps": \d+', '"steps": 1', t, count=1),
         "over the run's decode steps ($.lengths[0].steps = 1) gives"),  # the per-step figures, derived first
        (LAB, lambda t: re.sub(r'"created_utc": "[^"]+"', '"created_utc": "2026-99-99T99:99:99Z"', t),
         "$.created_utc is '2026-99-99T99:99:99Z', not a UTC time"),
        (STORAGE_LAB, lambda t: re.sub(r'"shared_blocks": \d+', '"shared_blocks": 999', t),
         "$.sharing.with.shared_blocks is 999, but"),
        (STORAGE_LAB, lambda t: re.sub(r'"table_entries": \d+', '"table_entries": 7', t, count=1),
         "$.paging.rows[0].table_entries is 7, but one table entry per block gives"),
        (STORAGE_LAB, lambda t: (ROOT / LAB.record).read_text(),
         "field $.lab: this record belongs to lab 'kv-cache', but this file is the record of lab 'kv-storage'"),
        (LAB, lambda t: re.sub(r'"measured": \d+', '"measured": 1', t, count=1),
         "$.lengths[0].cache_bytes.measured is 1, but the cache tensors of 2 x B x Hkv x T x D x bytes hold"),
        (LAB, lambda t: re.sub(r'"formula": \d+', '"formula": 1', t, count=1),
         "$.lengths[0].cache_bytes.formula is 1, but 2 x B x Hkv x T x D x bytes from the record's config gives"),
        (LAB, lambda t: t.replace('"cached"', '"kept"').replace('"full"', '"cached"').replace('"kept"', '"full"'),
         "field $.config.benchmark.modes are ['cached', 'full'] with baseline 'cached', but this lab measures "
         "['full', 'cached'] with baseline 'full'"),
        (LAB, lambda t: re.sub(r'"atol": [^,}]+', '"atol": 1e999', t, count=1), "$.tolerance.atol is 1e999"),
        (LAB, lambda t: re.sub(r'"head_dim": \d+', '"head_dim": 16', t, count=1), "$.config.model.head_dim is 16"),
        (LAB, lambda t: re.sub(r'"dtype": "float32"', '"dtype": "float32X"', t, count=1),
         "$.config.model.bytes_per_element is 4, but dtype 'float32X'"),
        (LAB, lambda t: re.sub(r'"threads": 1,', '"threads": 2,', t, count=1), "$.environment.torch.threads is 2"),
        (STORAGE_LAB, lambda t: re.sub(r'"bytes": (\d+)', lambda m: f'"bytes": {int(m[1]) + 1}', t, count=1),
         "$.gqa[0].layouts.concat.bytes is"),
        (STORAGE_LAB, lambda t: re.sub(r'"retained_bytes": (\d+)', lambda m: f'"retained_bytes": {int(m[1]) + 1}', t, count=1),
         "$.memory.variants.concat.retained_bytes is"),
        (LAB, reversed_sweep, "field $.lengths holds lengths [512, 256, 128, 64, 32, 16], not strictly ascending"),
        (LAB, lambda t: re.sub(r'"length": 32,', '"length": 16,', t, count=1),
         "field $.lengths holds lengths [16, 16, 64, 128, 256, 512], not strictly ascending"),
        (LAB, swapped_order, "field $.lengths[0].order[1] is ['full', 'cached'], but the record's rotating order "
                             "policy runs ['cached', 'full'] in repetition 2"),
        (LAB, lambda t: re.sub(r'"max_positions": \d+', '"max_positions": 256', t, count=1),
         "field $.config.model.max_positions is 256, but the sweep decoded 512 positions"),
        (LAB, lambda t: t.replace('"lab": "kv-cache",', '"lab": "kv-cache", "lab": "kv-cache",', 1),
         "measurement record holds key 'lab' twice in one object"),
        (LAB, lambda t: re.sub(r'"created_utc": "[^"]+"', '"created_utc": "1970-01-01T00:00:00Z"', t),
         "field $.created_utc is '1970-01-01T00:00:00Z', before 2020-01-01"),
        (LAB, lambda t: re.sub(r'"created_utc": "[^"]+"', '"created_utc": "2999-01-01T00:00:00Z"', t),
         "field $.created_utc is '2999-01-01T00:00:00Z', in the future"),
        (LAB, lambda t: re.sub(r'"machine": "[^"]+"', r'"machine": "abc\\n"', t, count=1), "field $.machine is invalid"),
    ],
    ids=["nan", "infinity", "steps", "timestamp", "sharing", "paging", "wrong-lab", "cache-bytes", "cache-formula",
         "swapped-mode-names", "overflow",
         "head-dim", "dtype", "threads", "gqa-paged", "retained", "descending-lengths", "repeated-length",
         "order-against-policy", "max-positions", "duplicate-key", "before-2020", "future", "label-newline"],
)
def test_hand_edited_figure_is_refused_in_one_line_naming_file_and_field(
    tmp_path: Path, lab: Lab, edit: Any, field: str
) -> None:
    text = edit(stored_text(lab))
    assert field in refusal(tmp_path, lab, text)


def bumped(field: str, by: float = 1, count: int = 1) -> Any:
    """An edit of the record's text: the ``count``-th number stored as ``field`` raised by ``by``."""
    def edit(text: str) -> str:
        matches = list(re.finditer(rf'"{field}": ([0-9.e-]+)', text))
        match = matches[count - 1]
        value = json.loads(match[1]) + by
        return text[:match.start(1)] + json.dumps(value) + text[match.end(1):]
    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (bumped("formula_bytes"), "field $.memory.formula_bytes is 131073, but 2 x Hkv x T x D x bytes from the "
                                  "record's config gives 131072"),
        (bumped("formula_bytes", count=3), "field $.gqa[1].formula_bytes is 65537, but 2 x Hkv x T x D x bytes gives 65536"),
        (bumped("used_slots"), "field $.paging.used_slots is 34451, but the sum of request_lengths gives 34450"),
        (bumped("blocks_in_use", count=5), "field $.paging.rows[4].blocks_in_use is 2187, but blocks of 16 for "
                                           "request_lengths gives 2186"),
        (bumped("allocated_slots", count=2), "field $.paging.rows[1].allocated_slots is 34477, but blocks x "
                                             "block_size gives 34476"),
        (bumped("waste_share", by=0.001, count=8), "field $.paging.rows[7].waste_share is 0.103864583333, but "
                                                   "wasted / allocated slots gives 0.102864583333"),
        (bumped("saved_bytes", by=4096), "field $.sharing.saved_bytes is 348160, but 8 requests, a 200-token prompt, "
                                         "50 tokens each and blocks of 16 gives 344064"),
        (bumped("copied_blocks", by=-7), "field $.sharing.with.copied_blocks is 0, but 8 requests, a 200-token "
                                         "prompt, 50 tokens each and blocks of 16 gives 7"),
    ],
    ids=["memory-formula", "gqa-formula", "paging-total", "paging-blocks", "paging-slots", "paging-share",
         "sharing-bytes", "sharing-copies"],
)
def test_storage_figure_that_differs_from_its_derivation_is_refused_naming_both_values(
    tmp_path: Path, edit: Any, message: str
) -> None:
    assert refusal(tmp_path, STORAGE_LAB, edit(stored_text(STORAGE_LAB))).endswith(message)


def test_nan_is_named_by_its_json_path(tmp_path: Path) -> None:
    text = (ROOT / LAB.record).read_text()
    text = re.sub(r'"max_abs_diff": [^,}]+', '"max_abs_diff": NaN', text, count=1)
    assert re.search(r"field \$\.precision\.float32\.max_abs_diff is NaN", refusal(tmp_path, LAB, text))


def test_sigterm_during_the_write_removes_the_temporary_file_and_keeps_the_old_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "record.json"
    path.write_text('{"old": true}')

    def dump_then_get_terminated(*args: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("labkit.records.json.dump", dump_then_get_terminated)
    from labkit.signals import Terminated

    with pytest.raises(Terminated):
        atomic_write_json(path, {"new": True})
    assert path.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_hand_edited_speedup_is_refused(record: dict[str, Any]) -> None:
    record["lengths"][0]["speedup"]["cached"]["ratio_of_medians"] = 99.0
    with pytest.raises(RecordError, match=r"speedup\.cached\.ratio_of_medians is 99, but the raw durations give"):
        check_sweep(record, "r.json")


@pytest.mark.parametrize(
    ("path", "value"),
    [(("lengths", 1, "modes", "cached", "per_step", "median_ns"), 1.0),
     (("lengths", 0, "modes", "full", "spread"), 9.0),
     (("lengths", 2, "speedup", "cached", "median_gap_per_step_ns"), -1.0),
     (("regimes", "cached", "overhead_bound"), None),
     (("regimes", "full", "flat_until"), 999),
     (("precision", "float64_shrink"), 2.0)],
    ids=["per-step", "spread", "gap", "overhead-bound", "flat-until", "float64-shrink"],
)
def test_a_hand_edited_figure_derived_from_the_sweep_is_refused_by_its_own_path(
    record: dict[str, Any], path: tuple[str | int, ...], value: Any
) -> None:
    fill(record, sweep_figures(record))  # the sweep's figures as the benchmark stores them
    check_sweep(record, "r.json")
    parent = record
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = (not parent[path[-1]]) if value is None else value
    with pytest.raises(RecordError, match=re.escape(path_text(path)) + " is .*, but .* gives"):
        check_sweep(record, "r.json")


def test_record_for_other_sources_is_stale(record: dict[str, Any]) -> None:
    assert not is_stale(record, LAB, ROOT)
    record["fingerprint"]["digest"] = "0" * 64  # measured on other sources: the digest and that file's hash differ
    record["fingerprint"]["files"]["labs/llm/kv-cache/benchmark.py"] = "0" * 64
    assert stale_files(record, LAB, ROOT) == ["labs/llm/kv-cache/benchmark.py"]


def test_lab_bench_accepts_three_policies_and_rejects_others() -> None:
    assert bench_policy({}) is BenchPolicy.AUTO
    assert bench_policy({"LAB_BENCH": "Never"}) is BenchPolicy.NEVER
    with pytest.raises(SiteBuildError, match=r"LAB_BENCH='sometimes' is not one of auto, always, never"):
        bench_policy({"LAB_BENCH": "sometimes"})


def lab_of(site: ToySite) -> Lab:
    return discover_labs(site.root)[0]


def test_never_policy_fails_on_a_missing_or_stale_record(toy_site: ToySite) -> None:
    lab = lab_of(toy_site)
    with pytest.raises(SiteBuildError, match=r"results/toy\.json: record does not exist and LAB_BENCH=never"):
        fresh_record(lab, toy_site.root, BenchPolicy.NEVER, set(), log)
    toy_site.write_fresh_record()
    (toy_site.root / "labs/demo/toy/toy.py").write_text("VALUE = 2\n")
    with pytest.raises(SiteBuildError, match=r"fingerprint mismatch: labs/demo/toy/toy\.py changed\) and LAB_BENCH=never forbids measuring"):
        fresh_record(lab, toy_site.root, BenchPolicy.NEVER, set(), log)


def test_auto_policy_measures_a_stale_record_and_reuses_a_fresh_one(toy_site: ToySite) -> None:
    lab = lab_of(toy_site)
    toy_site.write_fresh_record(created_utc="2021-01-01T00:00:00Z")
    record, measured = fresh_record(lab, toy_site.root, BenchPolicy.AUTO, set(), log)
    assert (measured, record["created_utc"]) == (False, "2021-01-01T00:00:00Z")
    (toy_site.root / "labs/demo/toy/toy.py").write_text("VALUE = 2\n")
    record, measured = fresh_record(lab, toy_site.root, BenchPolicy.AUTO, set(), log)
    assert measured and record["created_utc"] != "2021-01-01T00:00:00Z"
    assert not is_stale(record, lab, toy_site.root)


def test_always_policy_measures_once_per_process(toy_site: ToySite) -> None:
    lab, measured_labs = lab_of(toy_site), set()
    toy_site.write_fresh_record(created_utc="2021-01-01T00:00:00Z")
    assert fresh_record(lab, toy_site.root, BenchPolicy.ALWAYS, measured_labs, log)[1] is True
    assert fresh_record(lab, toy_site.root, BenchPolicy.ALWAYS, measured_labs, log)[1] is False


def test_a_hung_benchmark_is_stopped_at_the_deadline_and_the_record_kept(
    toy_site: ToySite, monkeypatch: pytest.MonkeyPatch
) -> None:
    import site_hooks.orchestrate as orchestrate

    record = toy_site.write_fresh_record()
    (toy_site.root / "bench.py").write_text("import sys, threading\nprint('benchmark: started', file=sys.stderr, flush=True)\n"
                                            "threading.Event().wait()\n")  # hangs until the deadline kills it
    monkeypatch.setattr(orchestrate, "BENCH_TIMEOUT_S", 1)
    with pytest.raises(SiteBuildError, match=r"benchmark exceeded 1 s and was stopped; results/toy\.json keeps"):
        orchestrate.run_benchmark(lab_of(toy_site), toy_site.root, log)
    assert json.loads(toy_site.record_path.read_text()) == record


def test_corrupt_record_is_not_overwritten_by_a_measurement(toy_site: ToySite) -> None:
    toy_site.record_path.write_text("{ not json")
    with pytest.raises(SiteBuildError, match=r"toy\.json: measurement record is not valid JSON"):
        read_record(lab_of(toy_site), toy_site.root)
    assert toy_site.record_path.read_text() == "{ not json"


def test_a_machine_label_the_schema_might_let_through_is_refused_by_the_header_check(record: dict[str, Any]) -> None:
    record["machine"] = "abc\n"
    with pytest.raises(RecordError, match=r"^r\.json: field \$\.machine: machine label 'abc\\n' must be"):
        check_header(record, "r.json")


# A record is a regular file inside the repository, of at most MAX_RECORD_BYTES, read once. Each hostile
# file is read in a subprocess with a deadline and an address-space limit, so a loader that reads
# /dev/zero for ever or waits on a FIFO fails the test instead of hanging or exhausting the machine.
READ_EVERY_RECORD = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from site_hooks.errors import SiteBuildError
from site_hooks.orchestrate import other_machines, read_record
from conftest import LAB
root = Path(sys.argv[1])
try:
    other_machines(LAB, root, read_record(LAB, root))
except SiteBuildError as error:
    print(f"refused: {error}")
else:
    print("accepted")
"""


def hostile_copy(tmp_path: Path, name: str) -> Path:
    """A repository copy (schemas and the kv-cache reference) with one hostile record file ``name``."""
    root = tmp_path / "repo"
    (root / "results").mkdir(parents=True)
    for path in (ROOT / "results").glob("*.schema.json"):
        shutil.copyfile(path, root / "results" / path.name)
    shutil.copyfile(ROOT / LAB.record, root / LAB.record)
    folder = root / "results" / "machines" / "kv-cache"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    valid = json.loads((ROOT / LAB.record).read_text())
    valid["machine"] = "box"
    (outside / "box.json").write_text(json.dumps(valid))
    if name == "dev-zero":
        (folder / "box.json").symlink_to("/dev/zero")
    elif name == "fifo":
        os.mkfifo(folder / "box.json")
    elif name == "dangling":
        (folder / "box.json").symlink_to(folder / "gone.json")
    elif name == "self":
        (folder / "box.json").symlink_to(folder / "box.json")
    elif name == "oversized":  # sparse: 17 MiB on paper, nothing on disk
        with open(folder / "box.json", "wb") as stream:
            stream.truncate(17 * 2**20)
    elif name == "outside":
        (folder / "box.json").symlink_to(outside / "box.json")
    elif name == "folder-outside":
        folder.rmdir()
        folder.symlink_to(outside, target_is_directory=True)
    elif name == "reference-outside":
        shutil.move(root / LAB.record, outside / LAB.record.name)
        (root / LAB.record).symlink_to(outside / LAB.record.name)
    return root


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("dev-zero", "results/machines/kv-cache/box.json: measurement record is a character device; a record must be a regular file"),
        ("fifo", "results/machines/kv-cache/box.json: measurement record is a FIFO (named pipe); a record must be a regular file"),
        ("dangling", "results/machines/kv-cache/box.json: measurement record not found (a symlink to nothing)"),
        ("self", "results/machines/kv-cache/box.json: cannot read measurement record: Too many levels of symbolic links"),
        ("oversized", f"results/machines/kv-cache/box.json: measurement record is {17 * 2**20} bytes, more than the limit of {16 * 2**20} bytes (16 MiB) for a record"),
        ("outside", "results/machines/kv-cache/box.json: measurement record resolves to {outside}/box.json, outside the repository {root}; a record must be a file of the repository"),
        ("folder-outside", "results/machines/kv-cache: folder of machine records resolves to {outside}, outside the repository {root}; its records must be files of the repository"),
        ("reference-outside", "results/cache-results.json: measurement record resolves to {outside}/cache-results.json, outside the repository {root}; a record must be a file of the repository"),
    ],
)
def test_a_record_that_is_not_a_bounded_regular_file_of_the_repository_is_refused_in_one_line_without_reading_it(
        tmp_path: Path, name: str, message: str) -> None:
    root = hostile_copy(tmp_path, name)
    finished = run([sys.executable, "-c", READ_EVERY_RECORD, str(root)], f"the build to refuse the {name} record",
                   capture_output=True, text=True, cwd=ROOT / "tests", env=os.environ | {"PYTHONPATH": str(ROOT / "tests")})
    expected = message.format(outside=os.path.realpath(tmp_path / "outside"), root=os.path.realpath(root))
    assert finished.stdout == f"refused: {expected}\n", finished.stderr[-2000:]


def test_a_record_within_the_size_limit_reached_through_a_symlink_inside_the_repository_is_read(tmp_path: Path) -> None:
    root = hostile_copy(tmp_path, "none")
    folder = root / "results" / "machines" / "kv-cache"
    shutil.copyfile(tmp_path / "outside" / "box.json", root / "results" / "box-copy.json")
    (folder / "box.json").symlink_to(root / "results" / "box-copy.json")
    reference = read_record(LAB, root)
    assert reference is not None
    assert [other.path for other in other_machines(LAB, root, reference)] == ["results/machines/kv-cache/box.json"]


def test_the_cached_test_report_is_keyed_on_the_sources_only_the_tests_import(tmp_path: Path) -> None:
    """lab.toml's tests.sources: code the tests import but the record does not measure (the serving lab's
    trained-model server runs llm_models/llama/) reruns the tests when it changes, and leaves the fingerprint."""
    folder = tmp_path / "labs" / "demo" / "keyed-lab"
    folder.mkdir(parents=True)
    dependency = tmp_path / "labs" / "demo" / "other" / "dep.py"
    dependency.parent.mkdir()
    dependency.write_text("A = 1\n")
    unrelated = dependency.parent / "notes.txt"
    unrelated.write_text("x\n")
    (folder / "lab.toml").write_text(
        'name = "keyed-lab"\ntitle = "t"\nrecord = "r.json"\nschema = "s.json"\nbenchmark = ["b.py"]\n'
        'tests = { start = "x", pattern = "test_*.py", sources = ["labs/demo/other/*.py"] }\n')
    (tmp_path / "b.py").write_text("B = 1\n")  # the benchmark: it imports none of the tests' sources
    lab = load_lab(folder / "lab.toml", tmp_path)
    assert lab.test_sources == ("labs/demo/other/*.py",)
    before = digest_of_tests(lab, tmp_path)
    unrelated.write_text("y\n")
    assert digest_of_tests(lab, tmp_path) == before
    dependency.write_text("A = 2\n")
    assert digest_of_tests(lab, tmp_path) != before
    serving = load_lab(ROOT / "labs" / "llm" / "kv-serving" / "lab.toml", ROOT)
    assert "labs/llm/llm_models/llama/*.py" in serving.test_sources
    assert any(ROOT.glob("labs/llm/llm_models/llama/*.py"))


@pytest.mark.parametrize("apart", ['["x/test_a.py"]', '"test_a.py"', '["test_a.txt"]', '[1]'])
def test_files_to_run_apart_that_are_not_a_list_of_test_file_names_are_refused_naming_the_field(
        tmp_path: Path, apart: str) -> None:
    (tmp_path / "lab.toml").write_text(
        'name = "l"\ntitle = "t"\nrecord = "r.json"\nschema = "s.json"\nbenchmark = ["b.py"]\n'
        f'tests = {{ start = "x", pattern = "test_*.py", apart = {apart} }}\n')
    with pytest.raises(ManifestError, match="field tests.apart must be a list of test file names"):
        load_lab(tmp_path / "lab.toml", tmp_path)
    serving = load_lab(ROOT / "labs" / "llm" / "kv-serving" / "lab.toml", ROOT)
    assert all((ROOT / serving.tests[0] / name).is_file() for name in serving.tests_apart)


# A record's strings, depth and text are bounded by the loader, whatever its lab's schema says: one line naming
# the file and the field, never a traceback, and never a page many times the record's size.
def nested(levels: int) -> Any:
    """An edit of a record's text: a field ``deep`` of ``levels`` arrays, one inside the other."""
    return lambda t: t.replace('"lab": ', f'"deep": {"[" * levels}{"]" * levels}, "lab": ', 1)


def cpu_model(text: str) -> Any:
    """An edit of a record's text: ``text`` (JSON, escapes allowed) as the recording machine's CPU name."""
    return lambda t: re.sub(r'"model": "[^"]*"', lambda _: f'"model": "{text}"', t, count=1)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (nested(100_000), "measurement record nests arrays or objects too deeply to parse, more than the 32 levels "
                          "a record may"),
        (nested(900), "field $.deep" + "[0]" * 31 + " nests arrays or objects more than 32 levels deep"),
        (nested(33), "field $.deep" + "[0]" * 31 + " nests arrays or objects more than 32 levels deep"),
        (cpu_model("x" * 15 * 2**20), "field $.environment.cpu.model is a string of 15728640 characters, more than "
                                      "the 65536 a string of a record may hold"),
        (cpu_model("x" * 1000), "field $.environment.cpu.model is invalid: 'xxxxxxxx"),
        (cpu_model("AMD \\ud800 EPYC"), "field $.environment.cpu.model is a string holding a lone surrogate "
                                        "(\\ud800 at character 4), which no UTF-8 text can carry"),
        (lambda t: t.replace('"lab": ', '"\\udc00": 1, "lab": ', 1),
         "field $ holds a key holding a lone surrogate (\\udc00 at character 0)"),
        (lambda t: t.replace('"lab": ', f'"{"k" * 70_000}": 1, "lab": ', 1),
         "field $ holds a key of 70000 characters, more than the 65536"),
    ],
    ids=["100000-deep", "900-deep", "33-deep", "15-mib-cpu", "long-cpu", "lone-surrogate", "surrogate-key",
         "long-key"],
)
def test_a_record_nested_too_deep_or_with_an_unbounded_or_invalid_string_is_refused_in_one_line(
        tmp_path: Path, edit: Any, message: str) -> None:
    assert message in refusal(tmp_path, LAB, edit((ROOT / LAB.record).read_text()))


def test_every_string_of_the_shared_header_is_bounded_by_the_schema() -> None:
    common = json.loads((ROOT / "results" / "record-common.schema.json").read_text())["$defs"]

    def strings(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
        found = [(path, schema)] if "string" in ([schema["type"]] if isinstance(schema.get("type"), str) else
                                                schema.get("type", [])) else []
        for name, part in schema.get("properties", {}).items():
            found += strings(part, f"{path}.{name}")
        return found

    header = strings(common["header"], "header") + strings(common["environment"], "environment")
    assert len(header) >= 15
    unbounded = [path for path, schema in header
                 if "maxLength" not in schema and "const" not in schema and "pattern" not in schema]
    assert unbounded == []


# A record's fingerprint is checked whole: the overall digest decides freshness, and the per-file list must agree
# with it (labkit.fingerprint.changed_since). The lab here measures four files.
def fingerprinted_lab(root: Path) -> Lab:
    folder = root / "labs" / "demo" / "print-lab"
    folder.mkdir(parents=True)
    for name in ("a", "b", "c", "d"):
        (folder / f"{name}.py").write_text(f"{name.upper()} = 1\n")
    (folder / "a.py").write_text("import b, c, d\n\nA = 1\n")  # the benchmark, and what it measures with
    (folder / "lab.toml").write_text(
        'name = "print-lab"\ntitle = "t"\nrecord = "results/print.json"\nschema = "s.json"\n'
        'benchmark = ["labs/demo/print-lab/a.py"]\ntests = { start = "x", pattern = "test_*.py" }\n')
    return load_lab(folder / "lab.toml", root)


def measured(lab: Lab, root: Path) -> dict[str, Any]:
    from labkit.fingerprint import lab_fingerprint

    return {"fingerprint": lab_fingerprint(lab, root)}


def drop_one(files: dict[str, str]) -> None:
    files.pop(sorted(files)[1])


def keep_one(files: dict[str, str]) -> None:
    for name in sorted(files)[1:]:
        files.pop(name)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (drop_one, "field $.fingerprint.files lists 3 files, but the lab's benchmark measures with 4 (not listed: "
                   "labs/demo/print-lab/b.py), while $.fingerprint.digest is the digest of exactly those 4 files as "
                   "they are: the list was edited"),
        (keep_one, "field $.fingerprint.files lists 1 files, but the lab's benchmark measures with 4 (not listed: "
                   "labs/demo/print-lab/b.py, labs/demo/print-lab/c.py, labs/demo/print-lab/d.py)"),
        (lambda files: files.update({"labs/demo/print-lab/bogus.py": "0" * 64}),
         "lists 5 files, but the lab's benchmark measures with 4 (measured by no benchmark: labs/demo/print-lab/bogus.py)"),
        (lambda files: files.update({"labs/demo/print-lab/e.py": files.pop("labs/demo/print-lab/d.py")}),
         "(not listed: labs/demo/print-lab/d.py; measured by no benchmark: labs/demo/print-lab/e.py)"),
        (lambda files: files.update({"labs/demo/print-lab/c.py": "f" * 64}),
         f'field $.fingerprint.files["labs/demo/print-lab/c.py"] is {"f" * 64}, but the file\'s sha256 is '),
    ],
    ids=["one-dropped", "all-but-one-dropped", "bogus-added", "renamed", "hash-corrupted"],
)
def test_a_fresh_record_whose_fingerprint_list_disagrees_with_its_digest_is_refused_in_one_line_naming_the_file(
        tmp_path: Path, edit: Any, message: str) -> None:
    lab = fingerprinted_lab(tmp_path)
    record = measured(lab, tmp_path)
    assert not is_stale(record, lab, tmp_path)  # whole, it is fresh
    edit(record["fingerprint"]["files"])
    with pytest.raises(SiteBuildError) as refused:
        is_stale(record, lab, tmp_path)
    assert "\n" not in str(refused.value) and str(refused.value).startswith("results/print.json: ")
    assert message in str(refused.value)
    with pytest.raises(SiteBuildError, match=r"^results/machines/print-lab/box\.json: field \$\.fingerprint"):
        is_stale(record, lab, tmp_path, "results/machines/print-lab/box.json")  # a machine record is named as such


def test_a_stale_record_stays_stale_whatever_its_list_says_and_names_the_files_that_changed(tmp_path: Path) -> None:
    lab = fingerprinted_lab(tmp_path)
    folder = tmp_path / "labs" / "demo" / "print-lab"
    record = measured(lab, tmp_path)
    (folder / "b.py").write_text("B = 2\n")  # the code changed since the measurement
    assert stale_files(record, lab, tmp_path) == ["labs/demo/print-lab/b.py"]
    edited = copy.deepcopy(record)  # b's hash edited to today's: only the digest can tell, and it does
    edited["fingerprint"]["files"] = measured(lab, tmp_path)["fingerprint"]["files"]
    with pytest.raises(SiteBuildError, match=r"^results/print\.json: field \$\.fingerprint\.digest is [0-9a-f]{64}, "
                                             r"but each of the 4 files it lists has the sha256 the record gives it"):
        stale_files(edited, lab, tmp_path)
    corrupted = copy.deepcopy(record)  # another file's hash corrupted: still stale, never fresh
    corrupted["fingerprint"]["files"]["labs/demo/print-lab/a.py"] = "0" * 64
    assert stale_files(corrupted, lab, tmp_path) == ["labs/demo/print-lab/a.py", "labs/demo/print-lab/b.py"]
    (folder / "e.py").write_text("E = 1\n")  # a module the benchmark now imports, and one it no longer does:
    (folder / "d.py").unlink()  # stale, not corrupt
    (folder / "a.py").write_text("import b, c, e\n\nA = 1\n")
    assert stale_files(record, lab, tmp_path) == ["labs/demo/print-lab/a.py", "labs/demo/print-lab/b.py",
                                                  "labs/demo/print-lab/d.py", "labs/demo/print-lab/e.py"]

