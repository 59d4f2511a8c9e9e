"""Each lab page reads as an explanation a learner can follow: short enough outside its collapsed blocks, with
its check-yourself questions beside the sections they test, and no word about how the work was organised.

Counted on the real built site (``built_site``): the words a reader meets in the article, outside collapsed
``<details>`` blocks, pictures, code listings and scripts.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

MAX_WORDS = 4_000  # outside collapsed blocks: a page a reader finishes (most sit near 3,000)
MIN_QUESTIONS = 2
QUESTIONS_BEFORE = 2 / 3  # each question starts before the last third of the visible words
HIDDEN = {"details", "svg", "pre", "script", "style"}
VOID = {"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "embed", "source", "track", "wbr"}
PROCESS_WORDS = re.compile(r"\b(the issue|this issue|an issue|closing note|as requested|the task)\b", re.I)


class Reading(HTMLParser):
    """The visible words of a page's article, and where each question block starts among them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, str]] = []  # (tag, class) from the article down
        self.in_article = False
        self.words: list[str] = []
        self.questions_at: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = dict(attrs).get("class") or ""
        if tag == "article":
            self.in_article = True
        if not self.in_article or tag in VOID:
            return
        if tag == "details" and "question" in classes.split() and not self.hidden():
            self.questions_at.append(len(self.words))
        self.open.append((tag, classes))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        for index in range(len(self.open) - 1, -1, -1):
            if self.open[index][0] == tag:
                del self.open[index:]
                break
        if tag == "article":
            self.in_article = False

    def hidden(self) -> bool:
        return any(tag in HIDDEN or "headerlink" in classes for tag, classes in self.open)

    def handle_data(self, data: str) -> None:
        if self.in_article and not self.hidden():
            self.words += data.split()


def lab_pages(site: Path) -> list[Path]:
    return sorted(site.glob("llm/*/index.html"))


def reading(page: Path) -> Reading:
    parsed = Reading()
    parsed.feed(page.read_text(encoding="utf-8"))
    return parsed


def test_there_are_lab_pages_to_read(built_site: tuple[Path, str]) -> None:
    assert len(lab_pages(built_site[0])) >= 5


@pytest.mark.parametrize("check", ["words", "questions", "process"])
def test_every_lab_page_reads_as_an_explanation(built_site: tuple[Path, str], check: str) -> None:
    problems = []
    for page in lab_pages(built_site[0]):
        found = reading(page)
        name, count = page.parent.name, len(found.words)
        if check == "words" and count > MAX_WORDS:
            problems.append(f"{name}: {count:,} words outside collapsed blocks, more than {MAX_WORDS:,}")
        if check == "questions":
            early = [at for at in found.questions_at if at < QUESTIONS_BEFORE * count]
            if len(early) < MIN_QUESTIONS:
                shares = ", ".join(f"{at / count:.0%}" for at in found.questions_at) or "none"
                problems.append(f"{name}: {len(early)} questions before the last third (questions at {shares})")
        if check == "process":
            said = sorted({match.group(0).lower() for match in PROCESS_WORDS.finditer(" ".join(found.words))})
            if said:
                problems.append(f"{name}: speaks of how the work was organised: {said}")
    assert problems == []


def test_every_lab_page_names_its_machine_and_run_once_where_a_reader_sees_it(built_site: tuple[Path, str]) -> None:
    import json

    root = Path(__file__).resolve().parents[1]
    problems = []
    for page in lab_pages(built_site[0]):
        text = " ".join(reading(page).words)
        lines = re.findall(r"Measured on (.+?), (?:run (\S+) started \S+ \S+ UTC|no run named, on \S+): (results/\S+\.json)\.",
                           text)
        if len(lines) != 1:
            problems.append(f"{page.parent.name}: {len(lines)} lines naming its record, machine and run")
            continue
        machine, run, path = lines[0]
        record = json.loads((root / path).read_text(encoding="utf-8"))
        if not machine.startswith(record["environment"]["cpu"]["model"].strip()):
            problems.append(f"{page.parent.name}: machine {machine!r}, its record says {record['environment']['cpu']}")
        if run != ((record.get("run") or {}).get("id") or ""):
            problems.append(f"{page.parent.name}: run {run!r}, its record says {record.get('run')}")
    assert problems == []


def test_the_reader_counts_visible_words_and_places_questions() -> None:
    html = ("<article><p>one two three</p><details class='note'><p>hidden words here</p></details>"
            "<details class='question'><summary>q</summary><p>answer words</p></details><svg><text>x</text></svg>"
            "<p>four five</p></article><p>outside</p>")
    parsed = Reading()
    parsed.feed(html)
    assert parsed.words == ["one", "two", "three", "four", "five"]
    assert parsed.questions_at == [3]


@pytest.mark.parametrize("page", ["decode-bandwidth", "kv-serving"])
def test_the_accelerator_section_is_labelled_arithmetic_and_links_its_datasheet(
    built_site: tuple[Path, str], page: str
) -> None:
    from llm_models.hardware import H100_SXM

    html = (built_site[0] / "llm" / page / "index.html").read_text(encoding="utf-8")
    section = html[html.index('id="on-an-accelerator"'):]
    section = section[:section.index("<h2")]
    assert "arithmetic, not a measurement" in section
    assert f'href="{H100_SXM.source}"' in section
    assert "no accelerator ran here" in section
