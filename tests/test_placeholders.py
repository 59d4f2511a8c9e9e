"""Placeholder syntax: known ones are replaced, anything else stops the build naming page and line."""

from __future__ import annotations

import pytest

from site_hooks.errors import SiteBuildError
from site_hooks.placeholders import after_title, labs_named, substitute

VIEWS = {"kv-cache": {"medians", "chart"}}


def render(lab: str, view: str) -> str:
    return f"<div>{lab}/{view}</div>"


def test_known_placeholders_are_replaced_and_other_text_is_kept() -> None:
    text = "# Title\n\n{{ lab:kv-cache:medians }}\n\nprose {{ not a lab }}\n\n  {{lab:kv-cache:chart}}"
    assert substitute(text, "docs/a.md", VIEWS, render) == (
        "# Title\n\n<div>kv-cache/medians</div>\n\nprose {{ not a lab }}\n\n  <div>kv-cache/chart</div>")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x\n\n{{ lab:kv-cache:median }}\n", r"docs/a\.md:3: .* unknown view 'median'; views of lab kv-cache: chart, medians"),
        ("{{ lab:kv-cach:medians }}", r"docs/a\.md:1: .* unknown lab 'kv-cach'; known labs: kv-cache"),
        ("{{ lab:kv-cache }}", r"docs/a\.md:1: placeholder '\{\{ lab:kv-cache \}\}' is malformed"),
        ("{{ lab:kv-cache:Medians }}", r"is malformed"),
        ("text before {{ lab:kv-cache:chart }}", r"docs/a\.md:1: .* must stand alone on its line"),
    ],
)
def test_bad_placeholders_fail_with_page_and_line(text: str, message: str) -> None:
    with pytest.raises(SiteBuildError, match=message):
        substitute(text, "docs/a.md", VIEWS, render)


def test_site_placeholders_are_replaced_and_a_bad_one_names_page_line_and_choices() -> None:
    from site_hooks.placeholders import substitute_site

    text = "# Start\n\n{{ site:machines }}\n\n{{ lab:kv-cache:chart }}\n"
    assert substitute_site(text, "docs/index.md", {"machines", "tests"}, lambda view: f"<div>{view}</div>") == (
        "# Start\n\n<div>machines</div>\n\n{{ lab:kv-cache:chart }}\n")
    for bad, message in (("\n{{ site:machine }}", r"docs/index\.md:2: .* unknown site view 'machine'; site views: "
                                                   r"machines, tests"),
                         ("{{ site:Machines }}", r"is malformed; write \{\{ site:<view> \}\}"),
                         ("see {{ site:tests }}", r"must stand alone on its line")):
        with pytest.raises(SiteBuildError, match=message):
            substitute_site(bad, "docs/index.md", {"machines", "tests"}, lambda view: view)


def test_the_labs_a_page_renders_are_named_once_in_the_order_they_appear() -> None:
    text = "# T\n\n{{ lab:kv-storage:medians }}\n\n{{ lab:kv-cache:chart }}\n\n{{lab:kv-storage:chart}}\n{{ lab:Bad }}"
    assert labs_named(text) == ["kv-storage", "kv-cache"]


def test_a_block_goes_right_under_the_pages_title_or_first_without_one() -> None:
    assert after_title("# Title {#top}\n\nProse.\n\n## Part\n", "WARN") == "# Title {#top}\n\nWARN\n\nProse.\n\n## Part\n"
    assert after_title("Prose first.\n\n## Part\n", "WARN") == "WARN\n\nProse first.\n\n## Part\n"
