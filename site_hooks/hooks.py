"""MkDocs hooks: test every lab, keep its record fresh, and render records into pages.

Registered in mkdocs.yml under `hooks:`. The functions here only orchestrate;
loading, checking and rendering live in the modules beside this one.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "labs"):  # MkDocs loads this file by path; make its package importable
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from labkit.manifest import ManifestError, discover_labs  # noqa: E402
from site_hooks.errors import SiteBuildError  # noqa: E402
from site_hooks.orchestrate import Evidence, bench_policy, gather_evidence  # noqa: E402
from site_hooks.placeholders import substitute  # noqa: E402
from site_hooks.views import VIEWS, render_view  # noqa: E402

log = logging.getLogger("mkdocs.plugins.site_hooks")

# Deliberate per-process state: the evidence of the current build, and which labs this process
# has already measured (so LAB_BENCH=always measures once, not on every `mkdocs serve` reload).
_evidence: dict[str, Evidence] = {}
_measured: set[str] = set()


def _site_root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_pre_build(config: MkDocsConfig) -> None:
    """Run every lab's tests and make sure its record is present, valid and fresh."""
    root = _site_root(config)
    _evidence.clear()
    try:
        policy = bench_policy(os.environ)
        for lab in discover_labs(root):
            _evidence[lab.name] = gather_evidence(lab, root, policy, _measured, log)
    except (SiteBuildError, ManifestError) as error:
        raise PluginError(str(error)) from None


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the page's lab placeholders with views rendered from the evidence."""
    source = f"docs/{page.file.src_uri}"
    try:
        return substitute(markdown, source, set(_evidence), set(VIEWS),
                          lambda lab, view: render_view(view, _evidence[lab]))
    except SiteBuildError as error:
        raise PluginError(str(error)) from None
    except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, TemplateError) as error:
        # a record the schema and the consistency checks let through, but a view still cannot use
        raise PluginError(f"{source}: cannot render from the record: {type(error).__name__}: {error}") from None


def on_post_build(config: MkDocsConfig, **kwargs: Any) -> None:
    """Say which records the pages were rendered from."""
    for name, evidence in sorted(_evidence.items()):
        state = "measured during this build" if evidence.measured_now else "reused"
        log.info(f"lab {name}: pages rendered from {evidence.lab.record} ({state})")
