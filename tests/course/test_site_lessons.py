"""course.site on the real lessons, without a browser (issue 38): a site built with ``--no-solutions`` holds no
exercise's solution, the folded-solution note points at the button the site shows, and every title starts
upper-case. The browser checks of the real site are in tests/test_site_browser.py; the rule for what gives a solution
away is tests/solution_text.py's."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import nbformat
import pytest
from solution_text import giveaways, squeeze

from course import site
from course.assignments import _read, student_copy

LESSONS = sorted(site.NOTEBOOKS_DIR.glob(site.LESSON_GLOB))


def _strings(value) -> list[str]:
    """Every string inside a notebook's JSON (sources, outputs, widget state), unescaped."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _visible(nb) -> str:
    """What an export of ``nb`` can show, squeezed: every string it holds, HTML outputs as their text."""
    return squeeze("\n".join(re.sub(r"<[^>]+>", "", text) for text in _strings(json.loads(nbformat.writes(nb)))))


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.stem[:2])
def test_a_site_without_solutions_shows_no_solution_of_the_lesson(path):
    secret = giveaways(path)
    in_the_copy = _visible(student_copy(_read(path), str(path)))  # what students are given anyway
    secret = {text for text in secret if text not in in_the_copy}
    assert secret, "the lesson has solution text that its student copy does not show"
    full = nbformat.read(path, as_version=4)
    assert any(text in _visible(full) for text in secret)  # the lesson as committed shows them, so this can fail
    site._without_solutions(full)
    shown = _visible(full)
    assert not [text for text in secret if text in shown]


def test_an_exported_page_without_solutions_shows_no_solution(tmp_path):
    path = LESSONS[0]
    lesson = site.read_lesson(path)
    secret = giveaways(path) - {text for text in giveaways(path) if text in _visible(student_copy(_read(path), ""))}
    for solutions, expected in ((True, True), (False, False)):
        page = site._export(lesson, tmp_path, solutions)
        text = squeeze(html.unescape(re.sub(r"<[^>]+>", "", page)))
        assert any(item in text for item in secret) is expected, solutions


def test_the_folded_solution_note_points_at_the_sites_button():
    noted = 0
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        noted += any(site._JUPYTERLAB_UNFOLD in cell.source for cell in nb.cells if cell.cell_type == "markdown")
        site._with_folded_solutions(nb)
        for cell in nb.cells:
            assert "click the bar" not in cell.source, (path.name, cell.source)
            assert "Show the solution" not in cell.source, (path.name, cell.source)  # the button's words, only on it
    assert noted, "no lesson says how to unfold a solution in JupyterLab any more: update the site's wording"
    assert "button" in site._SITE_UNFOLD
    assert "Show the solution" in Path(site.__file__).with_name("site_static").joinpath("site.js").read_text()


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.stem[:2])
def test_every_lesson_title_starts_with_a_capital_as_the_others_do(path):
    title = site.read_lesson(path).short_title
    assert title[:1].isupper(), f"{path.name}'s title {title!r}: the site lists it beside titles that start upper-case"
