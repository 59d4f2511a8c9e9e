"""MkDocs hooks: test every lab, keep its record fresh, and render records into pages.

Registered in mkdocs.yml under `hooks:`. The functions here only orchestrate;
loading, checking and rendering live in the modules beside this one.

A view's HTML never passes through Markdown: on_page_markdown leaves a token
where the placeholder was, and on_page_content puts the HTML in its place, so
no Markdown extension can reinterpret text that came from a record.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url, normalize_url

from labkit.manifest import ManifestError, discover_labs
from site_hooks.errors import SiteBuildError
from site_hooks.evidence import Evidence
from site_hooks.orchestrate import bench_policy, check_machine_folders, gather_evidence, run_all_lab_tests
from site_hooks.placeholders import after_title, labs_named, substitute, substitute_site
from site_hooks.site_views import SITE_VIEWS, render_site_view
from site_hooks.views import load_warning, measured_note, render_view, views_for

log = logging.getLogger("mkdocs.plugins.site_hooks")
RECORDS_DIR = "results"  # where the built site keeps a copy of every record a page was built from

# Deliberate per-process state: the evidence of the current build, which labs this process has
# already measured (so LAB_BENCH=always measures once, not on every `mkdocs serve` reload), and the
# rendered HTML waiting for its page's HTML (token -> HTML).
_evidence: dict[str, Evidence] = {}
_measured: set[str] = set()
_rendered: dict[str, str] = {}


def _site_root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_pre_build(config: MkDocsConfig) -> None:
    """Run every lab's tests and make sure its record is present, valid and fresh."""
    root = _site_root(config)
    _evidence.clear()
    try:
        policy = bench_policy(os.environ)
        labs = discover_labs(root)
        check_machine_folders(root, labs)
        reports = run_all_lab_tests(labs, root, log)  # every lab's tests before any record is read or measured
        for lab in labs:
            _evidence[lab.name] = gather_evidence(lab, root, policy, _measured, log, reports[lab.name])
    except (SiteBuildError, ManifestError) as error:
        raise PluginError(str(error)) from None


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the page's lab placeholders with tokens; their HTML is rendered now, inserted later. Under a lab
    page's title, one line names its own record (the first lab it names), the machine and the run that measured it;
    a page that renders a record measured under load says so there too."""
    source = f"docs/{page.file.src_uri}"

    def token_for(html: str) -> str:
        token = f"LABVIEW{len(_rendered)}X{secrets.token_hex(8)}"
        _rendered[token] = html
        return token

    def render(lab: str, view: str) -> str:
        evidence = _evidence[lab]
        record_url = get_relative_url(f"{RECORDS_DIR}/{evidence.lab.record.name}", page.url)
        return token_for(render_view(view, dataclasses.replace(evidence, record_url=record_url)))

    def render_site(view: str) -> str:
        return token_for(render_site_view(view, _evidence))

    try:
        views = {name: set(views_for(evidence.lab)) for name, evidence in _evidence.items()}
        named = labs_named(markdown)
        markdown = substitute(substitute_site(markdown, source, set(SITE_VIEWS), render_site), source, views, render)
        for lab in reversed(named):  # each goes right under the title: the first lab's warning ends up first
            warning = load_warning(_evidence[lab])
            markdown = after_title(markdown, token_for(warning)) if warning else markdown
        if named:  # last, so it sits first: a lab page is its first-named lab's, whose record its numbers come from
            markdown = after_title(markdown, token_for(measured_note(_evidence[named[0]])))
        return markdown
    except SiteBuildError as error:
        raise PluginError(str(error)) from None
    except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, AttributeError, TemplateError) as error:
        # a record the schema and the consistency checks let through, but a view still cannot use
        log.debug(f"{source}: the view failed here:", exc_info=True)
        raise PluginError(f"{source}: cannot render from the record: {type(error).__name__}: {error} "
                          f"(mkdocs build -v shows where)") from None


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Put each view's HTML where its token landed, after Markdown is done with the page."""
    for token in [t for t in _rendered if t in html]:
        view_html = _rendered.pop(token)
        html = html.replace(f"<p>{token}</p>", view_html).replace(token, view_html)
    return html


def on_template_context(context: Any, template_name: str, config: MkDocsConfig) -> Any:
    """Error pages (404.html) link relative to the site's root, as every other page links relative to itself.

    MkDocs renders an error page with absolute links from ``site_url``'s path ('/' when it is empty, as here), so
    a server can show it at any missing URL; those links break when the site is opened from disk or served under a
    subpath. Relative to the root, 404.html works from disk and wherever a server shows it at the site's top level."""
    if template_name != "404.html":
        return context
    context["base_url"] = "."
    context["extra_css"] = [normalize_url(str(path), None, ".") for path in config.extra_css]
    context["extra_javascript"] = [normalize_url(str(script), None, ".") for script in config.extra_javascript]
    return context


def on_serve(server: Any, config: MkDocsConfig, builder: Any) -> Any:
    """`mkdocs serve` reloads when any lab's folder changes, whatever area it is in."""
    root = _site_root(config)
    for lab in discover_labs(root):
        server.watch(str(root / lab.folder))
    return server


def on_post_build(config: MkDocsConfig, **kwargs: Any) -> None:
    """Copy each record into the site, so a page can link the JSON it was built from; log the sources."""
    folder = Path(config.site_dir) / RECORDS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    root = _site_root(config)
    for name, evidence in sorted(_evidence.items()):
        shutil.copyfile(root / evidence.lab.record, folder / evidence.lab.record.name)
        state = "measured during this build" if evidence.measured_now else "reused"
        log.info(f"lab {name}: pages rendered from {evidence.lab.record} ({state})")
    _rendered.clear()
