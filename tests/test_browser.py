"""The built article in headless Chromium: tables and chart visible, no console errors, screenshots kept."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from labkit.waiting import HANG_S

from conftest import LAB, OUTPUT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium as root in a container, with no network beyond loopback: no sandbox, no background calls.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
PLAYWRIGHT_TIMEOUT_MS = HANG_S * 1000

if not Path(CHROMIUM).exists():
    if os.environ.get("REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"REQUIRE_BROWSER=1 but no chromium at {CHROMIUM}: apt-get install chromium")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import Browser, Page, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def server(built_site: tuple[Path, str]) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(built_site[0]))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=PLAYWRIGHT_TIMEOUT_MS)
        yield launched
        launched.close()


def bounded_page(browser: Browser, **options: object) -> Page:
    """A new page whose every wait (navigation, load state, locator) is bounded for a hang only, not Playwright's
    default of 30 s: a loaded machine renders slowly, and a wait on a state is not a claim about speed."""
    page = browser.new_page(**options)  # type: ignore[arg-type]
    page.set_default_timeout(PLAYWRIGHT_TIMEOUT_MS)
    page.set_default_navigation_timeout(PLAYWRIGHT_TIMEOUT_MS)
    return page


def open_page(browser: Browser, url: str) -> tuple[Page, list[str]]:
    page = bounded_page(browser, viewport={"width": 1366, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.goto(url)
    return page, problems


@pytest.fixture(scope="module")
def browser_page(browser: Browser, server: str) -> Iterator[tuple[Page, list[str]]]:
    page, problems = open_page(browser, server + "/")
    # Let the landing page finish loading first: a click while its requests are in flight aborts them,
    # and an aborted request would be reported as a failure of the article.
    page.wait_for_load_state("networkidle")
    page.get_by_role("link", name="The KV cache").first.click()
    page.wait_for_load_state("networkidle")
    yield page, problems
    page.close()


def test_landing_page_links_to_the_article(browser_page: tuple[Page, list[str]]) -> None:
    page, _ = browser_page
    assert page.url.endswith("/llm/kv-cache/")
    assert page.locator("h1").first.is_visible()


@pytest.mark.parametrize("selector", [
    ".lab-environment table", ".lab-raw table", ".lab-medians table", ".lab-equivalence table",
    ".lab-cache-bytes table", ".lab-config table", ".lab-provenance table", ".lab-chart svg",
])
def test_rendered_tables_and_chart_are_visible(browser_page: tuple[Page, list[str]], selector: str) -> None:
    page, _ = browser_page
    element = page.locator(selector).first
    # Method and provenance sit in the collapsed "Reproduce" appendix: open it as a reader would.
    element.evaluate("el => { for (let e = el; e; e = e.parentElement) if (e.tagName === 'DETAILS') e.open = true; }")
    details = page.locator(".lab-raw details").first
    if selector.startswith(".lab-raw") and details.get_attribute("open") is None:
        details.locator("summary").click()  # the raw data is collapsed by default: open it as a reader would
    box = element.bounding_box()
    # The narrowest is the two-column model settings table (about 200 px with the compact record-table cells);
    # a table that collapsed or lost its content is far smaller than either bound.
    assert element.is_visible() and box is not None and box["height"] > 50 and box["width"] > 150, (selector, box)
    folder = OUTPUT / "browser"
    folder.mkdir(parents=True, exist_ok=True)
    element.screenshot(path=str(folder / f"{selector.split()[0].lstrip('.')}.png"))


def test_chart_draws_one_line_per_mode_with_axis_titles(browser_page: tuple[Page, list[str]]) -> None:
    page, _ = browser_page
    chart = page.locator(".lab-chart").first
    assert chart.locator("svg polyline").count() == 2
    assert "Record results/cache-results.json, measured on" in chart.locator("figcaption").inner_text()
    labels = chart.locator("svg text").all_text_contents()
    assert "Prefix length (tokens, log scale)" in labels and "Median ms per measured run (log scale)" in labels


def test_raw_data_starts_collapsed_with_its_run_count(browser_page: tuple[Page, list[str]]) -> None:
    page, _ = browser_page
    summary = page.locator(".lab-raw details summary").first
    assert summary.is_visible() and "runs, in the order they happened" in summary.inner_text()


def test_record_link_downloads_the_json_the_page_was_built_from(
    browser_page: tuple[Page, list[str]], server: str
) -> None:
    page, _ = browser_page
    href = page.locator(".lab-environment a[download]").first.get_attribute("href")
    assert href is not None and href.endswith("results/cache-results.json")
    response = page.request.get(page.url + href)
    assert response.ok and response.json()["lab"] == "kv-cache"


def test_page_has_no_console_errors_and_a_full_screenshot_is_saved(browser_page: tuple[Page, list[str]]) -> None:
    page, problems = browser_page
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "kv-cache-article.png"), full_page=True)
    assert (OUTPUT / "kv-cache-article.png").stat().st_size > 10_000
    assert problems == []


@pytest.mark.parametrize("page_path", ["llm/kv-storage/", "llm/decode-bandwidth/", "llm/kv-serving/", "llm/kv-quant/",
                                       "llm/kv-window/", "llm/kv-prefix/"])
def test_every_lab_page_renders_its_views_without_errors(browser: Browser, server: str, page_path: str) -> None:
    """Each lab page in a real browser: every rendered view outside a closed collapsible has a size, no console
    error, a screenshot kept."""
    page, problems = open_page(browser, f"{server}/{page_path}")
    page.wait_for_load_state("networkidle")
    views = page.locator(".lab-view")
    assert views.count() >= 5
    for index in range(views.count()):
        if views.nth(index).evaluate("view => view.closest('details:not([open])') !== null"):
            continue  # collapsed by design (check-yourself answers, the Reproduce appendix)
        box = views.nth(index).bounding_box()
        assert box is not None and box["height"] > 10 and box["width"] > 200, (page_path, index, box)
    for chart in page.locator(".lab-chart svg").all():
        if chart.evaluate("svg => svg.closest('details:not([open])') !== null"):
            continue  # inside a closed collapsible: measured once it is opened, below
        assert (chart.bounding_box() or {"width": 0})["width"] > 400, page_path  # charts use the column
    page.evaluate("() => document.querySelectorAll('details:not([open])').forEach(d => { d.open = true; d.dataset.opened = 'test'; })")
    for chart in page.locator(".lab-chart svg").all():  # every chart, collapsed ones opened, uses the column
        assert (chart.bounding_box() or {"width": 0})["width"] > 400, page_path
    OUTPUT.mkdir(exist_ok=True)
    page.evaluate("() => document.querySelectorAll('details[data-opened]').forEach(d => { d.open = false; })")
    page.screenshot(path=str(OUTPUT / f"{page_path.strip('/').replace('/', '-')}.png"), full_page=True)
    page.close()
    assert problems == []


PAGES = ["", "llm/kv-cache/", "llm/kv-storage/", "llm/decode-bandwidth/", "llm/kv-serving/", "llm/kv-quant/",
         "llm/kv-window/", "llm/kv-prefix/"]
# The page's widest element may exceed the viewport only inside something that scrolls by itself.
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const scrolls = el => { for (let e = el; e; e = e.parentElement) {
    const s = getComputedStyle(e); if (['auto', 'scroll'].includes(s.overflowX) && e.scrollWidth > e.clientWidth) return true;
  } return false; };
  const out = [...document.querySelectorAll('article *')].filter(e => {
    const r = e.getBoundingClientRect(); return r.width > 0 && r.right > width + 1 && !scrolls(e);
  }).map(e => e.tagName + '.' + e.className).slice(0, 5);
  const hidden = [...document.querySelectorAll('article *')].filter(e => {
    const s = getComputedStyle(e); return ['auto', 'scroll'].includes(s.overflowX) && e.scrollWidth > e.clientWidth + 1;
  }).filter(e => !(e.tagName === 'TABLE' || e.querySelector('table')))  // a table may scroll: its numbers stay whole
    .map(e => e.tagName + ': ' + (e.textContent || '').trim().slice(0, 60)).slice(0, 5);
  return {page: document.documentElement.scrollWidth - width, out, hidden};
}"""
# A number a table cell shows, split across two lines of its cell: every collapsed block opened, each number standing
# as a word of its own (digits with their thousands commas and decimal point, not a digit inside an identifier such as a
# test name, which may break) whose rendered boxes sit on more than one line.
SPLIT_NUMBERS = r"""() => {
  document.querySelectorAll('article details:not([open])').forEach(d => { d.open = true; });
  const split = [];
  for (const cell of document.querySelectorAll('article td, article th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(/(?<![\w.,])\d(?:[\d,.]*\d)?(?![\w])/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1) split.push(`${match[0]} in "${cell.textContent.trim().slice(0, 60)}"`);
      }
    }
  }
  return split.slice(0, 5);
}"""
DESKTOP = 1220  # from this width (Material's 76.25em) a code line may not hide any of itself behind a scroll bar; a table
# wider than the column scrolls inside itself rather than break a number (SPLIT_NUMBERS)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("page_path", PAGES)
def test_every_page_fits_its_width_in_both_schemes_with_every_diagram_visible(
    browser: Browser, server: str, page_path: str, width: int, scheme: str
) -> None:
    page = bounded_page(browser, viewport={"width": width, "height": 900}, color_scheme=scheme)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{server}/{page_path}")
    page.wait_for_load_state("networkidle")
    overflow = page.evaluate(OVERFLOW)
    assert overflow["page"] <= 0 and overflow["out"] == [], (page_path, width, overflow)
    if width >= DESKTOP:  # a code block that scrolls at a desktop width hides its line ends
        assert overflow["hidden"] == [], (page_path, width, overflow["hidden"])
    for diagram in page.locator("figure.lab-diagram svg").all():
        box = diagram.bounding_box()
        assert diagram.is_visible() and box is not None and box["width"] > 150 and box["height"] > 80, (page_path, box)
    folder = OUTPUT / "pages"
    folder.mkdir(parents=True, exist_ok=True)
    name = (page_path.strip("/").replace("llm/", "") or "index") + f"-{width}-{scheme}.png"
    page.screenshot(path=str(folder / name), full_page=True)
    split = page.evaluate(SPLIT_NUMBERS)  # after the screenshot: it opens every collapsed block
    page.close()
    assert problems == [], problems
    assert split == [], (page_path, width, split)


def test_the_calculator_agrees_with_the_python_function_for_every_model_and_format(
    browser: Browser, server: str
) -> None:
    from kv_cache.memory import KV_FORMATS
    from site_hooks.labviews import lab_module

    capacity = lab_module(LAB, "kv_cache.figures")  # the lab's figures, loaded from its folder as the build does
    assert capacity is not None

    page, problems = open_page(browser, f"{server}/llm/kv-cache/")
    calculator = page.locator("[data-calculator]")
    for model in capacity.models():
        calculator.locator("select[name=model]").select_option(model["name"])
        for fmt in KV_FORMATS:
            calculator.locator("select[name=format]").select_option(fmt)
            for batch, context in ((1, 8192), (8, 131072)):
                calculator.locator("input[name=batch]").fill(str(batch))
                calculator.locator("input[name=context]").fill(str(context))
                value = {k: float(calculator.locator(f'[data-out="{k}"]').get_attribute("data-value") or "nan")
                         for k in ("per_token", "total", "fit")}
                expected = capacity.per_token(model, fmt)
                assert value["per_token"] == expected, (model["name"], fmt)
                assert value["total"] == expected * batch * context, (model["name"], fmt, batch)
                assert value["fit"] == capacity.fit(model, fmt), (model["name"], fmt)
    refusals = (("batch", "0.5", "batch (sequences) must be a whole number from 1 to 1,000,000, got 0.5"),
                ("context", "0", "context (tokens per sequence) must be a whole number from 1 to 1,000,000,000, got 0"),
                ("batch", "1e308", "batch (sequences) must be a whole number from 1 to 1,000,000, got 1e308"),
                ("memory", "-1", "memory must be a number of GiB from 0 to 1,000,000, got -1"))
    for name, value, refusal in refusals:  # a fraction of a sequence, or a number beyond any machine: one line
        before = calculator.locator(f"input[name={name}]").input_value()
        calculator.locator(f"input[name={name}]").fill(value)
        assert calculator.locator('[data-out="total"]').text_content() == refusal
        assert calculator.locator('[data-out="total"]').get_attribute("data-value") == ""
        calculator.locator(f"input[name={name}]").fill(before)
    # "none fits" says what does not: the weights alone, or the one token's KV that what they leave cannot hold
    calculator.locator("input[name=memory]").fill("0.001")
    assert (calculator.locator('[data-out="fit"]').text_content() or "").startswith("none: the weights alone take ")
    calculator.locator("input[name=parameters]").fill("0")
    calculator.locator("input[name=memory]").fill("0.0000001")  # about 107 bytes, less than any model's token
    assert (calculator.locator('[data-out="fit"]').text_content() or "").startswith("none: the weights leave 107.4 bytes, "
                                                                                     "less than one token's ")
    calculator.locator("input[name=layers]").fill("1e300")
    assert calculator.locator('[data-out="per_token"]').text_content() == (
        "layers must be a whole number from 1 to 12,800, got 1e300")
    calculator.locator("input[name=layers]").fill("4")  # typed numbers leave the model list, as any edit of them does
    assert calculator.locator("select[name=model]").input_value() == ""
    page.screenshot(path=str(OUTPUT / "kv-cache-calculator.png"), full_page=False)
    page.close()
    assert problems == []
