"""Several machines' records of one lab: a reader's run sits beside the reference and never replaces it."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kv_cache import benchmark
from labkit import run_benchmarks
from labkit.machines import derived_label
from site_hooks.errors import SiteBuildError
from site_hooks.evidence import Evidence, MachineRecord
from site_hooks.machines_view import agreement_sentences
from site_hooks.orchestrate import other_machines, read_record
from site_hooks.views import render_view

from conftest import LAB, ROOT, STORAGE_LAB


@pytest.fixture(scope="module")
def site_copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A copy of results/ with a second machine's --quick record made by the real benchmark."""
    root = tmp_path_factory.mktemp("copy")
    shutil.copytree(ROOT / "results", root / "results", ignore=shutil.ignore_patterns("machines"))
    reference = (root / LAB.record).read_bytes()
    output = root / "results" / "machines" / "kv-cache" / "second-box.json"
    output.parent.mkdir(parents=True)
    with contextlib.redirect_stderr(io.StringIO()):
        code = benchmark.main(["--quick", "--machine", "second-box", "--output", str(output)])
    assert code == 0
    return root, reference


def evidence_from(root: Path, evidence: Evidence) -> Evidence:
    reference = read_record(LAB, root)  # as the build reads it: its figures derived
    assert reference is not None
    machines = (MachineRecord(LAB.record.as_posix(), reference, True, []), *other_machines(LAB, root, reference))
    return dataclasses.replace(evidence, record=reference, machines=machines)


def test_a_second_machine_renders_beside_the_reference_which_stays_byte_identical(
    site_copy: tuple[Path, bytes], evidence: Evidence
) -> None:
    root, reference_bytes = site_copy
    html = render_view("machines", evidence_from(root, evidence))
    reference_label = json.loads(reference_bytes)["machine"]
    assert f"<code>{reference_label}</code> <small>(reference" in html  # "(reference, this build machine)" here
    assert "<code>second-box</code> <small>(quick run" in html  # a smoke test, not a peer
    assert html.count("<tr>") == 3  # header, reference, second machine
    quick = json.loads((root / "results/machines/kv-cache/second-box.json").read_text())
    assert quick["config"]["benchmark"]["quick"] is True
    for entry in quick["lengths"]:  # --quick measured other lengths: their ratios get columns of their own
        assert f"<th>full / cached at {entry['length']} tokens</th>" in html
    assert "measured on second-box (quick run) only" in html and "A quick run (the benchmark&#39;s --quick" in html
    assert (root / LAB.record).read_bytes() == reference_bytes


def test_make_bench_writes_this_machines_record_and_reference_1_the_reference() -> None:
    label = derived_label()
    mine = run_benchmarks.arguments_for(LAB, reference=False, label=label)
    assert f"results/machines/kv-cache/{label}.json" in mine and LAB.record.as_posix() not in mine
    assert LAB.record.as_posix() in run_benchmarks.arguments_for(LAB, reference=True, label=label)


def place(root: Path, name: str, record: dict[str, Any]) -> None:
    folder = root / "results" / "machines" / "kv-cache"
    for old in folder.glob("*.json"):
        old.unlink()
    (folder / name).write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("other-box.json", lambda r: r.update(machine="second-box"),
         "results/machines/kv-cache/other-box.json: field $.machine claims machine 'second-box', but the file is named for machine 'other-box'"),
        ("Bad Label!.json", lambda r: None, "results/machines/kv-cache/Bad Label!.json: machine label 'Bad Label!' must be"),
        ("other-box.json", lambda r: r.update(lab="kv-storage"), "this record belongs to lab 'kv-storage'"),
        ("other-box.json", lambda r: r.update(schema_version=2), "field $.schema_version is invalid"),
        ("{reference}.json", lambda r: None, "is the reference record's (results/cache-results.json); a machine "
                                             "record needs a label of its own"),
    ],
    ids=["claims-another-label", "bad-characters", "wrong-lab", "wrong-schema", "the-reference-label"],
)
def test_a_bad_machine_record_fails_in_one_line_naming_the_file(
    site_copy: tuple[Path, bytes], name: str, edit: Any, message: str
) -> None:
    root, reference_bytes = site_copy
    reference = json.loads(reference_bytes)
    record = json.loads((ROOT / LAB.record).read_text()) | {"machine": Path(name).stem.format(reference=reference["machine"])}
    edit(record)
    place(root, name.format(reference=reference["machine"]), record)
    with pytest.raises(SiteBuildError) as refused:
        other_machines(LAB, root, reference)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert STORAGE_LAB.name == "kv-storage"


def test_a_machines_folder_named_for_no_lab_fails_the_build_naming_it(tmp_path: Path) -> None:
    from labkit.manifest import discover_labs
    from site_hooks.orchestrate import check_machine_folders

    (tmp_path / "results" / "machines" / "kv-cahce").mkdir(parents=True)
    with pytest.raises(SiteBuildError, match=r"^results/machines/kv-cahce: holds machine records of no lab"):
        check_machine_folders(tmp_path, discover_labs(ROOT))


def test_two_machines_under_one_label_both_count_in_the_agreement() -> None:
    """The build refuses such records; the sentences must not silently drop one even so."""
    rows = [{"label": "box", "quick": False, "ratios": [2.0]}, {"label": "box", "quick": False, "ratios": [0.5]}]
    (sentence,) = agreement_sentences(["full / cached"], rows)
    assert sentence.startswith("full / cached: the machines differ (0.50× to 2.00×): above 1 on box, at or below 1 on box")
