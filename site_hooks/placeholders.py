"""Placeholders in page Markdown: `{{ lab:<lab-name>:<view> }}` alone on a line, replaced by rendered HTML; and
`{{ site:<view> }}`, a view of every lab at once (site_hooks.site_views), for a page that is no lab's.

Anything that starts like a placeholder but does not name a known lab and
view fails the build, with the page and line, so a typo never ships as text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .errors import SiteBuildError

# Loose on purpose: it finds every attempt, then the parser decides whether it is valid.
CANDIDATE = re.compile(r"\{\{\s*lab\s*:(?P<body>[^}]*)\}\}")
ALONE = re.compile(r"^[ \t]*\{\{[^}]*\}\}[ \t]*$")
VALID = re.compile(r"^(?P<lab>[a-z0-9][a-z0-9-]*):(?P<view>[a-z0-9][a-z0-9-]*)$")
SITE_CANDIDATE = re.compile(r"\{\{\s*site\s*:(?P<body>[^}]*)\}\}")
SITE_VALID = re.compile(r"^(?P<view>[a-z0-9][a-z0-9-]*)$")
TITLE = re.compile(r"^#[ \t].*$", re.MULTILINE)  # a first-level heading in ATX style, as every page opens


def check_alone(markdown: str, match: re.Match[str], where: str) -> None:
    """A placeholder becomes a block of HTML, so it must be the only thing on its line."""
    line_start = markdown.rfind("\n", 0, match.start()) + 1
    line_end = markdown.find("\n", match.end())
    if not ALONE.match(markdown[line_start : None if line_end < 0 else line_end]):
        raise SiteBuildError(f"{where} must stand alone on its line (it becomes a block of HTML)")


def substitute_site(markdown: str, page: str, views: set[str], render: Callable[[str], str]) -> str:
    """Replace each ``{{ site:<view> }}`` with render(view); errors name the page, the line and the choices."""

    def replace(match: re.Match[str]) -> str:
        line = markdown.count("\n", 0, match.start()) + 1
        where = f"{page}:{line}: placeholder {match.group(0)!r}"
        check_alone(markdown, match, where)
        parsed = SITE_VALID.match(match.group("body").strip())
        if parsed is None:
            raise SiteBuildError(f"{where} is malformed; write {{{{ site:<view> }}}}")
        if parsed.group("view") not in views:
            raise SiteBuildError(f"{where} names unknown site view {parsed.group('view')!r}; site views: "
                                 f"{', '.join(sorted(views))}")
        return render(parsed.group("view"))

    return SITE_CANDIDATE.sub(replace, markdown)


def substitute(markdown: str, page: str, views: dict[str, set[str]], render: Callable[[str, str], str]) -> str:
    """Replace each placeholder with render(lab, view); ``views`` maps each lab to the views it has.
    Errors name the page, the line and the choices."""

    def replace(match: re.Match[str]) -> str:
        line = markdown.count("\n", 0, match.start()) + 1
        where = f"{page}:{line}: placeholder {match.group(0)!r}"
        parsed = VALID.match(match.group("body").strip())
        check_alone(markdown, match, where)
        if parsed is None:
            raise SiteBuildError(f"{where} is malformed; write {{{{ lab:<lab>:<view> }}}}")
        lab, view = parsed.group("lab"), parsed.group("view")
        if lab not in views:
            raise SiteBuildError(f"{where} names unknown lab {lab!r}; known labs: {', '.join(sorted(views)) or 'none'}")
        if view not in views[lab]:
            raise SiteBuildError(f"{where} names unknown view {view!r}; views of lab {lab}: "
                                 f"{', '.join(sorted(views[lab]))}")
        return render(lab, view)

    return CANDIDATE.sub(replace, markdown)


def labs_named(markdown: str) -> list[str]:
    """The labs a page's well-formed placeholders name, in the order they first appear (``substitute`` refuses the
    others)."""
    found = [VALID.match(match.group("body").strip()) for match in CANDIDATE.finditer(markdown)]
    return list(dict.fromkeys(parsed.group("lab") for parsed in found if parsed is not None))


def after_title(markdown: str, block: str) -> str:
    """``block`` as a paragraph of its own right after the page's first-level title (first, if it has none)."""
    title = TITLE.search(markdown)
    if title is None:
        return f"{block}\n\n{markdown}"
    rest = markdown[title.end():].lstrip("\n")
    return f"{markdown[:title.end()]}\n\n{block}\n\n{rest}"
