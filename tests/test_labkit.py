"""labkit pieces the site and every benchmark rely on: source state, make bench's interrupt, pruning."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from labkit import run_benchmarks
from labkit.environment import git_state


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)


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


def test_ctrl_c_during_make_bench_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class InterruptedChild:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.waits = 0

        def wait(self, timeout: float | None = None) -> int:
            self.waits += 1
            if self.waits == 1:
                raise KeyboardInterrupt  # Ctrl-C reaches make bench while the child runs
            return 130

    monkeypatch.setattr(run_benchmarks.subprocess, "Popen", InterruptedChild)
    assert run_benchmarks.main(["kv-cache"]) == 130
    err = capsys.readouterr().err
    assert "interrupted during kv-cache" in err and "Traceback" not in err
