"""course.site on small lessons made here: what the pages hold, the lesson order, refusals, nothing remote.

The real lessons in a real browser: tests/test_site_browser.py.
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from course import site
from helpers.viewing.head_view import HEAD_VIEW_ID, WIDGET_STATE, WIDGET_VIEW, head_view_data


def _head_view_output(model_id: str) -> dict:
    return nbformat.v4.new_output(
        "display_data", data={WIDGET_VIEW: {"model_id": model_id, "version_major": 2}, "text/plain": "HeadView()"}
    )


def _widget_state(model_id: str) -> dict:
    weights = [[[[0.7, 0.3], [0.4, 0.6]], [[1.0, 0.0], [0.5, 0.5]]]]  # (n_layers, h, L, S) = (1, 2, 2, 2)
    state = head_view_data(weights, ["Eine", "Mutter"]) | {"_anywidget_id": HEAD_VIEW_ID, "layer": 0, "head": -1}
    return {model_id: {"model_name": "AnyModel", "model_module": "anywidget", "state": state}}


def _lesson(folder: Path, name: str, title: str, *, head_view: bool = False, executed: bool = True) -> Path:
    cells = [
        nbformat.v4.new_markdown_cell(f"# {title}\n\nThis lesson is about {name} and nothing else at all.\n"),
        nbformat.v4.new_markdown_cell(f"## 1. First part of {name}\n\nWords about zebrafish {name}."),
        nbformat.v4.new_code_cell("x = 1\nprint(x)", execution_count=1 if executed else None),
        nbformat.v4.new_code_cell(
            "def answer():\n    # BEGIN SOLUTION\n    return 42\n    # END SOLUTION", execution_count=2
        ),
        nbformat.v4.new_markdown_cell("## 2. Second part\n\nMore words."),
        nbformat.v4.new_markdown_cell("A model answer: quokka.", metadata={"tags": ["solution-only"]}),
    ]
    cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb = nbformat.v4.new_notebook(cells=cells)
    if head_view:
        view = nbformat.v4.new_code_cell("head_view(...)", execution_count=3)
        view.outputs = [_head_view_output("m1")]
        nb.cells.append(view)
        nb.metadata["widgets"] = {WIDGET_STATE: {"state": _widget_state("m1"), "version_major": 2}}
    path = folder / name
    nbformat.write(nb, path)
    return path


def _three_lessons(folder: Path) -> Path:
    folder.mkdir()
    _lesson(folder, "02_second.ipynb", "Lesson 02: The second", head_view=True)
    _lesson(folder, "01_first.ipynb", "Lesson 01: The first")
    _lesson(folder, "10_tenth.ipynb", "Lesson 10: The tenth")  # any NN_ lesson counts, none is listed anywhere
    (folder / "scratch.ipynb").write_text((folder / "01_first.ipynb").read_text())  # not a lesson: no NN_
    return folder


@pytest.fixture
def lessons(tmp_path):
    return _three_lessons(tmp_path / "notebooks")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One site of the three lessons, for the tests that only read it."""
    root = tmp_path_factory.mktemp("built")
    out = root / "site"
    return out, site.build(out, _three_lessons(root / "notebooks"), readme=None)


def test_lessons_are_every_numbered_notebook_in_file_name_order(lessons):
    found = site.find_lessons(lessons, readme=None)
    assert [lesson.path.name for lesson in found] == ["01_first.ipynb", "02_second.ipynb", "10_tenth.ipynb"]
    assert [lesson.number for lesson in found] == ["01", "02", "10"]
    assert found[1].title == "Lesson 02: The second" and found[1].short_title == "The second"
    assert [lesson.head_views for lesson in found] == [0, 1, 0]
    assert found[0].summary == "This lesson is about 01_first.ipynb and nothing else at all."


def test_the_readme_table_gives_the_summary_where_it_has_a_row(lessons, tmp_path):
    readme = tmp_path / "README.md"
    row = "| 02 | [x](notebooks/02_second.ipynb) | use `nn.Linear` |"
    readme.write_text(f"| # | notebook | what |\n|---|---|---|\n{row}\n")
    found = site.find_lessons(lessons, readme=readme)
    assert found[1].summary == "use `nn.Linear`"
    assert found[0].summary.startswith("This lesson is about")  # no row: the lesson's first paragraph
    site.build(tmp_path / "site", lessons, readme=readme)
    assert "<td>use <code>nn.Linear</code></td>" in (tmp_path / "site" / "index.html").read_text()


def test_build_writes_a_landing_page_lesson_pages_a_pager_and_a_sidebar(built):
    out, built = built
    pages = [lesson.page for lesson in built]
    index = (out / "index.html").read_text()
    assert re.findall(r'class="site-lesson-link" href="([^"]+)"', index) == pages
    assert index.count("and nothing else at all.</td>") == 3  # each lesson's summary in the table
    for n, page in enumerate(pages):
        text = (out / page).read_text()
        assert f"<title>{built[n].title} · " in text
        sidebar = re.search(r'<nav class="site-sidebar".*?</nav>', text, re.DOTALL).group(0)
        assert re.findall(r'<li><a href="([^"#]+)"', sidebar) == pages
        assert re.findall(r'aria-current="page"', sidebar) == ['aria-current="page"']
        assert f'href="{page}" aria-current="page"' in sidebar
        previous = re.findall(r'rel="prev" class="site-prev" href="([^"]+)"', text)
        following = re.findall(r'rel="next" class="site-next" href="([^"]+)"', text)
        assert previous == [pages[n - 1] if n else "index.html"] * 2  # top and bottom
        assert following == ([pages[n + 1]] * 2 if n + 1 < len(pages) else [])
        # the lesson's ## sections in the sidebar, linked to the headings' anchors in the page
        anchors = re.findall(r'<ul class="site-sections">.*?</ul>', sidebar, re.DOTALL)[0]
        for anchor in re.findall(r'href="#([^"]+)"', anchors):
            assert f'id="{anchor}"' in text
        assert "First part" in anchors and "Second part" in anchors
        # the solution cell is marked for folding; the other code cells are not
        assert text.count("celltag_site-solution") == 2  # the code solution and the model answer
        assert text.count(f'src="{site.STATIC}/site.js"') == 1
    assert "hv-standalone" in (out / "02_second.html").read_text()  # the head view, drawn from saved state
    assert (out / site.STATIC / "site.js").exists() and (out / site.STATIC / "site.css").exists()


def test_the_search_index_has_each_section_with_its_anchor(built):
    out, _ = built
    text = (out / site.STATIC / "search-index.js").read_text()
    entries = json.loads(text.removeprefix("window.COURSE_SEARCH = ").rstrip().removesuffix(";"))
    zebra = [e for e in entries if "zebrafish 02_second" in e["text"]]
    assert len(zebra) == 1 and zebra[0]["heading"] == "1. First part of 02_second.ipynb"
    page, _, anchor = zebra[0]["href"].partition("#")
    assert page == "02_second.html" and f'id="{anchor}"' in (out / page).read_text()
    assert not any("return 42" in e["text"] or "quokka" in e["text"] for e in entries), "solutions are not searched"
    assert any("More words." in e["text"] for e in entries)


def test_a_lesson_that_is_not_executed_is_refused_and_the_old_site_stays(lessons, tmp_path):
    out = tmp_path / "site"
    site.build(out, lessons, readme=None)
    before = sorted(p.name for p in out.iterdir())
    _lesson(lessons, "03_raw.ipynb", "Lesson 03: Raw", executed=False)
    with pytest.raises(site.SiteError, match=r"03_raw.ipynb is not executed .*make notebooks NB="):
        site.build(out, lessons, readme=None)
    assert sorted(p.name for p in out.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []  # nothing half-written left


def test_no_lessons_no_title_and_a_folder_not_ours_are_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(site.SiteError, match="no lessons in"):
        site.build(tmp_path / "site", empty, readme=None)
    untitled = tmp_path / "untitled"
    untitled.mkdir()
    path = _lesson(untitled, "01_x.ipynb", "x")
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = "No heading here."
    nbformat.write(nb, path)
    with pytest.raises(site.SiteError, match=r"01_x\.ipynb has no title"):
        site.build(tmp_path / "site", untitled, readme=None)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("precious")
    _lesson(untitled, "01_x.ipynb", "Lesson 01: X")
    with pytest.raises(site.SiteError, match=r"is not a site built by course\.site"):
        site.build(mine, untitled, readme=None)
    assert (mine / "thesis.txt").read_text() == "precious"
    with pytest.raises(site.SiteError, match="would hold the lessons"):
        site.build(tmp_path, untitled, readme=None)


def test_a_second_build_replaces_the_first(lessons, tmp_path):
    out = tmp_path / "site"
    site.build(out, lessons, readme=None)
    (lessons / "10_tenth.ipynb").unlink()
    site.build(out, lessons, readme=None)
    assert not (out / "10_tenth.html").exists() and (out / "02_second.html").exists()


@pytest.mark.parametrize(
    ("text", "remote"),
    [
        ('<script src="https://cdn.example/require.js"></script>', True),
        ("<link rel='stylesheet' href='//fonts.example/css'>", True),
        ('<img src="http://example.org/a.png">', True),
        ("@font-face { src: url(https://fonts.example/x.woff2) }", True),
        ('@import "https://example.org/a.css";', True),
        ('<a href="https://example.org/paper">a link to read</a>', False),
        ('<script src="_static/site.js"></script><img src="data:image/png;base64,AAAA">', False),
        ("/* https://meyerweb.com/eric/tools/color-blend/ */", False),
    ],
)
def test_remote_fetches_finds_what_a_browser_would_load(text, remote):
    assert bool(site.remote_fetches(text)) is remote


def test_a_site_that_would_load_from_a_network_is_refused(tmp_path):
    (tmp_path / "page.html").write_text('<html><script src="https://cdn.example/x.js"></script></html>')
    with pytest.raises(site.SiteError, match=r"page.html: <script src=\"https://cdn.example/x.js"):
        site.check_offline(tmp_path)


def test_the_command_line_reports_an_error_without_a_traceback(tmp_path, capsys):
    assert site.main(["--out", str(tmp_path / "site"), "--notebooks", str(tmp_path)]) == 1
    assert "course.site: no lessons in" in capsys.readouterr().err


def test_a_lesson_name_that_would_break_out_of_an_attribute_is_refused(lessons, tmp_path):
    evil = '02_x" onmouseover="alert(1).ipynb'
    (lessons / evil).write_text((lessons / "01_first.ipynb").read_text())
    out = tmp_path / "site"
    with pytest.raises(site.SiteError, match=re.escape(repr(evil))):
        site.build(out, lessons, readme=None)
    assert not out.exists()
    for odd in ("03_Copy.ipynb", "03_first-Copy1.ipynb", "03_ä.ipynb"):  # JupyterLab's copies, capitals, accents
        (lessons / evil).unlink(missing_ok=True)
        for leftover in lessons.glob("03_*"):
            leftover.unlink()
        (lessons / odd).write_text((lessons / "01_first.ipynb").read_text())
        with pytest.raises(site.SiteError, match="lower-case letters, digits and underscores"):
            site.find_lessons(lessons, readme=None)


class _Attributes(HTMLParser):
    """Every (tag, attribute names) of a page, to see that no value broke out of its quotes."""

    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, list[str], dict]] = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, [name for name, _ in attrs], dict(attrs)))


def test_every_link_attribute_is_escaped_whatever_the_page_name():
    lessons = [
        site.Lesson(Path(f'0{n}_a" onmouseover="alert({n}).ipynb'), f"0{n}", f"Lesson 0{n}: <b>", "s", 0)
        for n in (1, 2, 3)
    ]
    sections = [{"anchor": 'x" onclick="y', "heading": "h"}]
    for html_text in (site._sidebar(lessons, lessons[1], sections), site._pager(lessons[0], lessons[2], "top")):
        parser = _Attributes()
        parser.feed(html_text)
        for tag, names, values in parser.found:
            assert tag == "form" or not any(name.startswith("on") for name in names), (tag, names)  # form: ours
            if tag == "a" and "onmouseover" in values.get("href", ""):
                assert values["href"] in [lesson.page for lesson in lessons]  # the whole name, inside the quotes
    parser = _Attributes()
    parser.feed(site.landing_page(lessons))
    assert not any(name.startswith("on") and tag != "form" for tag, names, _ in parser.found for name in names)
    assert "<b>" not in site.landing_page(lessons)


def test_a_site_without_solutions_holds_no_solution_and_says_so(lessons, tmp_path):
    out = tmp_path / "site"
    site.build(out, lessons, readme=None, solutions=False)
    texts = {path.name: path.read_text() for path in out.rglob("*") if path.suffix in (".html", ".js", ".css")}
    for name, text in texts.items():
        words = "".join(re.sub(r"<[^>]+>", "", text).split())  # highlighted code as its text
        assert "return42" not in words and "quokka" not in text, name  # the answer, the model answer
        assert name.endswith(".js") or "celltag_site-solution" not in text, name
    page = re.sub(r"<[^>]+>", "", texts["01_first.html"])
    assert "raise NotImplementedError()" in page and "x = 1" in page and "\n1\n" in page  # stub; the rest as run
    assert "hold no solutions" in texts["index.html"] and "Show the solution" not in texts["index.html"]
    site.build(out, lessons, readme=None)  # the default keeps them, folded
    assert "quokka" in (out / "01_first.html").read_text() and "Show the solution" in (out / "index.html").read_text()


def test_the_command_line_builds_without_solutions(lessons, tmp_path, capsys):
    assert site.main(["--out", str(tmp_path / "site"), "--notebooks", str(lessons), "--no-solutions"]) == 0
    assert "no solutions" in capsys.readouterr().out
    assert "quokka" not in (tmp_path / "site" / "01_first.html").read_text()


# ---------------------------------------------------------------------------------------------
# Formulas, widget snapshots and the folded-solution note (issue 62)
# ---------------------------------------------------------------------------------------------
FORMULA = r"\text{Attention}(Q, K, V) = \text{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V"


def _selection_widget_state() -> dict:
    """A SelectionSlider (it saves the index of its choice) inside a box, as lesson 03's temperature widget."""
    slider = {
        "_model_name": "SelectionSliderModel",
        "description": "d_k",
        "index": 2,
        "_options_labels": ["1", "8", "64"],
    }
    checkbox = {"_model_name": "CheckboxModel", "description": "divide by √d_k", "value": True}
    box = {"_model_name": "VBoxModel", "children": ["IPY_MODEL_s1", "IPY_MODEL_c1"]}
    return {
        name: {"model_name": state["_model_name"], "state": state}
        for name, state in (("s1", slider), ("c1", checkbox), ("b1", box))
    }


@pytest.fixture(scope="module")
def with_formulas(tmp_path_factory):
    """A site of one lesson whose prose holds a display formula and an inline one, a folded solution with the
    lessons' note above it, and a saved widget with a selection slider."""
    root = tmp_path_factory.mktemp("formulas")
    folder = root / "notebooks"
    folder.mkdir()
    path = _lesson(folder, "01_first.ipynb", "Lesson 01: The first")
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(
        2,
        nbformat.v4.new_markdown_cell(
            f"## 3. Scores\n\nThe weights are\n\n$${FORMULA}$$\n\nwith $d_k$ the size of a key. After it, more prose."
        ),
    )
    nb.cells.insert(
        3,
        nbformat.v4.new_markdown_cell(
            f"*The reference solution in the cell below is folded away: try the exercise first, then "
            f"{site._JUPYTERLAB_UNFOLD} to compare.*"
        ),
    )
    widget = nbformat.v4.new_code_cell("temperature_explorer()", execution_count=5)
    widget.outputs = [
        nbformat.v4.new_output(
            "display_data", data={WIDGET_VIEW: {"model_id": "b1", "version_major": 2}, "text/plain": "interactive(...)"}
        )
    ]
    nb.cells.append(widget)
    nb.metadata["widgets"] = {WIDGET_STATE: {"state": _selection_widget_state(), "version_major": 2}}
    nbformat.write(nb, path)
    out = root / "site"
    site.build(out, folder, readme=None)
    return out


def test_the_site_carries_katex_with_its_licence_and_every_page_loads_it_before_site_js(with_formulas, built):
    out = with_formulas
    katex = out / site.STATIC / site.KATEX
    assert "MIT License" in (katex / "LICENSE").read_text()
    css = (katex / "katex.min.css").read_text()
    fonts = re.findall(r"url\((fonts/[^)]+\.woff2)\)", css)
    assert len(fonts) >= 19 and all((katex / font).is_file() for font in fonts), (
        "every font the style sheet reads first"
    )
    for page in (out / "01_first.html", out / "index.html", built[0] / "02_second.html"):
        text = page.read_text()
        order = [
            text.index(f'src="{site.STATIC}/{name}"')
            for name in (f"{site.KATEX}/katex.min.js", f"{site.KATEX}/contrib/auto-render.min.js", "site.js")
        ]
        assert order == sorted(order), page.name  # deferred scripts run in order: KaTeX first
        assert f'href="{site.STATIC}/{site.KATEX}/katex.min.css"' in text
        for link in re.findall(r'(?:src|href)="(_static/[^"]+)"', text):
            assert (out / link).is_file(), link
    site.check_offline(out)  # KaTeX's files included: nothing they would fetch
    index = (out / "index.html").read_text()
    assert "TeX source" not in index and "KaTeX" in index


def test_formulas_reach_the_page_and_the_search_index_whole_for_katex_to_draw(with_formulas):
    page = html.unescape((with_formulas / "01_first.html").read_text())
    assert f"$${FORMULA}$$" in page and "$d_k$" in page  # as written: site.js hands them to KaTeX
    entries = json.loads(
        (with_formulas / site.STATIC / "search-index.js")
        .read_text()
        .removeprefix("window.COURSE_SEARCH = ")
        .rstrip()
        .removesuffix(";")
    )
    scores = [entry for entry in entries if entry["heading"] == "3. Scores"]
    assert len(scores) == 1 and f"$${FORMULA}$$" in scores[0]["text"] and "$d_k$" in scores[0]["text"]
    script = (site.SITE_STATIC / "site.js").read_text()
    assert "renderMathInElement" in script and "katex.render(" in script  # pages and search results


def test_a_selection_widget_snapshot_shows_its_choice(with_formulas):
    page = (with_formulas / "01_first.html").read_text()
    snapshot = re.search(r'<div class="widget-snapshot".*?</div></div>', page, re.DOTALL).group(0)
    assert "d_k: 64" in snapshot and "divide by √d_k: True" in snapshot


def test_the_folded_solution_note_points_at_the_button_without_repeating_its_label(with_formulas):
    page = re.sub(r"<[^>]+>", "", (with_formulas / "01_first.html").read_text())
    assert "then open it with the button below to compare" in page
    label = re.search(r'textContent = "([^"]+)";', (site.SITE_STATIC / "site.js").read_text()).group(1)
    assert label == "Show the solution" and label not in page  # only the button says it
