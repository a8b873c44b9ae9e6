"""The course website (`make site`) in a real browser with every network request refused.

The site is built from the committed lessons (whatever notebooks/NN_*.ipynb there are). Headless Chromium
(Debian's `chromium`, driven by Playwright for Python) opens the landing page, follows the lesson table's first
link and then each page's "next" link through every lesson, and on each page checks the title, the sidebar and
the pager, that the solutions are folded until clicked, that every formula is drawn by KaTeX, and that every head
view saved in the notebook is drawn; one head view per lesson that has one is driven (hover a token, click a head,
open a thumbnail). The search box must lead to a lesson's section, and a result's formula is drawn, not shown as
TeX. The console must stay free of errors. Screenshots: test-artifacts/site/.
Without a `chromium` on PATH the tests are skipped with a warning; `.ci/run` installs it first.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from chromium import CHROMIUM, CHROMIUM_FLAGS, skip_without_browser, sync_playwright

from course import site

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "site"
pytestmark = skip_without_browser


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    lessons = site.build(out)
    return {"out": out, "lessons": lessons}


@pytest.fixture(scope="module")
def offline_page(built):
    """A page in a browser context that refuses every request that is not for a local file."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        context = browser.new_context(offline=True, viewport={"width": 1300, "height": 1000})
        refused: list[str] = []

        def refuse_the_network(route):
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        context.route("**/*", refuse_the_network)
        page = context.new_page()
        page.set_default_timeout(30_000)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        yield {"page": page, "refused": refused, "errors": errors}
        page.screenshot(path=ARTIFACTS / "last-page.png")
        browser.close()


# A formula in a lesson's prose, as site.js finds it: TeX between $$ … $$ or $ … $, outside code.
_FORMULA = re.compile(r"\$\$[\s\S]+?\$\$|\$[^$\n]+?\$")


def _formulas(lesson) -> int:
    """Formulas in the lesson's markdown (code blocks and inline code left out), counted from the notebook."""
    count = 0
    for cell in nbformat.read(lesson.path, as_version=4).cells:
        if cell.cell_type == "markdown":
            prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", cell.source, flags=re.DOTALL))
            count += len(_FORMULA.findall(prose))
    return count


def _saved_head_views(lesson) -> int:
    """Head views in the lesson's saved widget state, counted from the notebook (not from the page)."""
    return site.head_view_count(nbformat.read(lesson.path, as_version=4))


def _drive_head_view(page, view, label: str) -> None:
    """Hover a query token: only its lines stay; click head 1: it alone; a grid thumbnail opens its head."""
    view.scroll_into_view_if_needed()
    if view.locator(".hv-lines-view").count() == 0:
        view.locator(".hv-view-button[data-view='lines']").click()
    lines = view.locator(".hv-line:not(.hv-hidden)")
    everything = lines.count()
    view.locator(".hv-query-token").nth(1).hover()
    focused = lines.count()
    assert 0 < focused < everything, f"{label}: hovering a token should keep only its lines ({everything} -> {focused})"
    page.screenshot(path=ARTIFACTS / f"{label}-hover.png")
    page.mouse.move(0, 0)
    swatches = view.locator(".hv-head-swatch")
    if swatches.count() > 1:
        swatches.nth(1).click()
        heads = set(view.locator(".hv-line").evaluate_all("ls => ls.map(l => l.dataset.head)"))
        assert heads == {"1"}, f"{label}: clicking head 1 should show it alone, got heads {sorted(heads)}"
    view.locator(".hv-view-button[data-view='grid']").click()
    thumbnails = view.locator(".hv-thumb")
    last = thumbnails.nth(thumbnails.count() - 1)
    head = last.get_attribute("data-head")
    last.click()
    assert view.locator(".hv-head-swatch.hv-active").get_attribute("data-head") == head, label


def test_every_lesson_is_reached_by_its_links_and_works_offline(built, offline_page):
    page, lessons = offline_page["page"], built["lessons"]
    page.goto((built["out"] / "index.html").as_uri())
    table = page.locator(".site-lesson-table a.site-lesson-link")
    assert table.all_inner_texts() == [lesson.title for lesson in lessons]
    page.screenshot(path=ARTIFACTS / "index.png")
    table.first.click()
    for n, lesson in enumerate(lessons):
        page.wait_for_load_state()
        assert Path(page.url).name == lesson.page, f"expected lesson {lesson.number}, at {page.url}"
        assert page.title().startswith(lesson.title)
        sidebar = page.locator(".site-sidebar .site-lessons > li > a")
        assert sidebar.count() == len(lessons)
        assert page.locator(".site-sidebar a[aria-current='page']").get_attribute("href") == lesson.page
        # solutions folded: hidden until "Show the solution" is clicked
        toggles = page.locator(".site-solution-toggle")
        solutions = page.locator(".celltag_site-solution .jp-Cell-inputWrapper")
        assert toggles.count() == solutions.count()
        if toggles.count():
            assert not solutions.first.is_visible(), f"lesson {lesson.number}: a solution is shown unfolded"
            toggles.first.click()
            assert solutions.first.is_visible() and "BEGIN SOLUTION" in solutions.first.inner_text()
            toggles.first.click()
            assert not solutions.first.is_visible()
        # every formula of the lesson's prose drawn by KaTeX, none left as TeX or drawn as an error
        formulas = page.locator(".jp-RenderedMarkdown .katex")
        assert formulas.count() == _formulas(lesson), f"lesson {lesson.number}: formulas drawn"
        assert page.locator(".katex-error").count() == 0, page.locator(".katex-error").all_inner_texts()
        if formulas.count():
            formulas.first.scroll_into_view_if_needed()
            page.screenshot(path=ARTIFACTS / f"lesson-{lesson.number}-formula.png")
        # every head view saved in the notebook is drawn, and the first one answers the mouse
        views = page.locator(".hv-root")
        assert views.count() == _saved_head_views(lesson), f"lesson {lesson.number}: head views drawn"
        if views.count():
            _drive_head_view(page, views.first, f"lesson-{lesson.number}")
        page.screenshot(path=ARTIFACTS / f"lesson-{lesson.number}.png")
        nexts = page.locator(".site-pager-bottom a[rel='next']")
        if n + 1 < len(lessons):
            assert nexts.count() == 1
            nexts.click()
        else:
            assert nexts.count() == 0, "the last lesson has no next lesson"
            page.locator(".site-pager-bottom a.site-next").click()  # back to the lesson table
            page.wait_for_load_state()
            assert Path(page.url).name == "index.html"
    assert offline_page["refused"] == [], f"the site tried to fetch {offline_page['refused']}"
    assert offline_page["errors"] == []


def test_the_search_box_leads_to_a_lesson_section(built, offline_page):
    page, lessons = offline_page["page"], built["lessons"]
    page.goto((built["out"] / "index.html").as_uri())
    # a word from the last lesson's own title that no other lesson's title has (a word every lesson shares, such as
    # "Attention", may fill the capped result list with other lessons): found, and the result opens that lesson
    lesson = lessons[-1]
    others = {w.strip(",.:;—").lower() for other in lessons[:-1] for w in other.short_title.split()}
    words = [w.strip(",.:;—") for w in lesson.short_title.split()]
    word = max((w for w in words if w.lower() not in others), key=len, default=max(words, key=len))
    page.fill(".site-search-input", word)
    results = page.locator(".site-search-results a.site-search-result")
    results.first.wait_for()
    hrefs = results.evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert any(h.startswith(lesson.page) for h in hrefs), f"searching {word!r} found {hrefs}"
    page.screenshot(path=ARTIFACTS / "search.png")
    results.nth([h.startswith(lesson.page) for h in hrefs].index(True)).click()
    page.wait_for_load_state()
    assert Path(page.url.partition("#")[0]).name == lesson.page
    page.fill(".site-search-input", "qqqxyzzy")
    assert page.locator(".site-search-none").inner_text() == "Nothing found."
    assert offline_page["refused"] == [] and offline_page["errors"] == []


def test_a_search_result_shows_a_formula_drawn_not_its_tex(built, offline_page):
    page = offline_page["page"]
    page.goto((built["out"] / "index.html").as_uri())
    entries = page.evaluate("window.COURSE_SEARCH")
    with_formula = [entry for entry in entries if _FORMULA.search(entry["text"])]
    assert with_formula, "no lesson section has a formula: nothing to check"
    entry = with_formula[0]
    before = entry["text"][: _FORMULA.search(entry["text"]).start()].split()
    words = [w for w in before if re.fullmatch(r"[A-Za-z]{4,}", w)]  # a plain word just before the formula
    assert words, entry["text"][:200]
    page.fill(".site-search-input", f"{words[-1]} {entry['heading'].split()[-1]}")
    result = page.locator(f".site-search-results a.site-search-result[href='{entry['href']}']")
    result.wait_for()
    snippet = result.locator(".site-search-snippet")
    assert snippet.locator(".katex").count() >= 1
    assert "$" not in snippet.inner_text() and "\\" not in snippet.inner_text(), snippet.inner_text()
    page.screenshot(path=ARTIFACTS / "search-formula.png")
    assert offline_page["refused"] == [] and offline_page["errors"] == []
