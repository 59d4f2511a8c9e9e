"""Every lab's own suite, run as the site build runs it, and its report kept under the build's key.

A lab's tests live beside it (unittest style) and run in a subprocess through ``labkit.testreport``, two labs at
a time (site_hooks/orchestrate.py). The report is cached under ``.cache/site_hooks/`` keyed by a digest of
everything the tests can see (the lab's files, the sources it measures, labkit, the pinned packages, its record
and schema, the interpreter), so ``make site`` then ``make test`` runs each suite once, not twice: a suite whose
inputs changed since it last passed runs again, and a failing suite is never cached. ``pytest labs/llm/<lab>``
runs one lab's tests directly, with pytest's own reporting.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from labkit.manifest import discover_labs
from site_hooks.errors import SiteBuildError
from site_hooks.orchestrate import TEST_WORKERS, longest_first, run_lab_tests

ROOT = Path(__file__).resolve().parents[1]
LABS = discover_labs(ROOT)
LOG = logging.getLogger("lab-suites")


@pytest.fixture(scope="session")
def lab_reports() -> dict[str, dict[str, Any] | str]:
    """Each lab's passing report, or the one-line reason its suite failed."""
    cache_dir = ROOT / ".cache" / "site_hooks"

    def one(lab: Any) -> dict[str, Any] | str:
        try:
            return run_lab_tests(lab, ROOT, cache_dir, LOG)
        except SiteBuildError as failed:
            return str(failed)

    with ThreadPoolExecutor(max_workers=TEST_WORKERS, thread_name_prefix="lab-suite") as pool:
        ordered = longest_first(LABS, ROOT)  # as the build starts them
        return dict(zip([lab.name for lab in ordered], pool.map(one, ordered)))


def test_every_lab_is_found() -> None:
    assert {lab.name for lab in LABS} >= {"kv-cache", "kv-storage", "decode-bandwidth", "kv-serving", "kv-quant",
                                          "kv-window", "kv-prefix"}


@pytest.mark.parametrize("name", [lab.name for lab in LABS])
def test_the_labs_own_suite_passes(name: str, lab_reports: dict[str, dict[str, Any] | str]) -> None:
    report = lab_reports[name]
    assert not isinstance(report, str), report  # the failing tests, each with its outcome and detail
    assert report["successful"] and report["ran"] > 0 and report["failed"] == report["errors"] == 0, report
