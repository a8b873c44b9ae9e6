"""The course as one static website that works offline: ``make site`` (or ``python -m course.site``).

Every executed lesson in ``notebooks/`` (whatever ``NN_*.ipynb`` files are there, in order) becomes one page,
exported by ``helpers.viewing.head_view.export_html``: head views stay interactive, drawn by the package's own
JavaScript from the data a committed lesson keeps in each view's output (``course.notebook_metadata``: lessons hold
no widget state), and the page fetches nothing from a network. This
module only wraps those pages: a landing page with the lesson table, a sidebar (the lessons, the sections of
the lesson open, a search box), previous/next links, and solution cells folded behind a "Show the solution"
button. Search runs in the page over an index written as a script (``_static/search-index.js``), so it works
from ``file://`` too. Formulas (TeX between ``$`` or ``$$`` in the lessons' prose) are drawn in the browser by
KaTeX, whose files the site carries (``course/site_static/katex``, with its licence), in the pages and in search
results. A finished site is checked for scripts, style sheets, fonts or images that would be fetched from a
network; the site is written to a temporary folder first and moved into place only when
complete, so a failed build leaves the previous site as it was.

``--no-solutions`` (``make site SOLUTIONS=0``) builds the site for the weeks a lesson is graded: every solution
region is the student's stub (its cell's outputs cleared), ``solution-only`` cells are left out, and notes about a
folded solution are dropped, as in a student copy; the rest of each lesson stays as executed.

A lesson's file name becomes a page name in every page's links, so only ``NN_[a-z0-9_]+.ipynb`` is accepted
(a name like ``02_x" onmouseover="….ipynb`` is refused), and every attribute is escaped all the same.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import nbformat

from course.assignments import SOLUTION_ONLY_TAG, drop_folded_notes, is_solution_cell, strip_solutions
from helpers.viewing.head_view import HEAD_VIEW_IDS, SAVED_HEAD_VIEW, WIDGET_STATE, WIDGET_VIEW, export_html

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = ROOT / "notebooks"
README = ROOT / "README.md"
DEFAULT_OUT = ROOT / "build" / "site"
LESSON_GLOB = "[0-9][0-9]_*.ipynb"
LESSON_NAME = re.compile(r"[0-9]{2}_[a-z0-9_]+\.ipynb")  # what a page name may be built from
SOLUTION_TAG = "site-solution"  # added to solution cells on the way to export; nbconvert writes celltag_<tag>
MARKER = ".course-site"  # in every built site: a folder without it is never replaced
STATIC = "_static"
SITE_STATIC = Path(__file__).resolve().parent / "site_static"  # the site's own script and style, and KaTeX
KATEX = "katex"  # KaTeX's dist (its licence beside it), in site_static/ and in every site's _static/
COURSE_TITLE = "Multi-head attention, step by step"


class SiteError(RuntimeError):
    """The site cannot be built as asked (no lessons, a lesson not executed, an output folder not ours)."""


@dataclass
class Lesson:
    """One lesson: its notebook, its number (the file's NN_ prefix), title, one-line summary and page name."""

    path: Path
    number: str
    title: str
    summary: str
    head_views: int
    page: str = field(init=False)

    def __post_init__(self):
        self.page = f"{self.path.stem}.html"

    @property
    def short_title(self) -> str:
        """The title without its "Lesson NN:" (the sidebar shows the number beside it)."""
        return re.sub(r"^(?:Lesson\s+)?\d+\s*[:·.—-]\s*", "", self.title)


# ---------------------------------------------------------------------------------------------
# Reading the lessons
# ---------------------------------------------------------------------------------------------
def head_view_count(nb: dict) -> int:
    """How many head views a notebook shows whose data was saved (those the site draws interactively)."""
    models = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    count = 0
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            if SAVED_HEAD_VIEW in output.get("metadata", {}):  # a committed lesson: no widget state, the data here
                count += 1
                continue
            model_id = output.get("data", {}).get(WIDGET_VIEW, {}).get("model_id")
            state = models.get(model_id, {}).get("state", {}) if model_id else {}
            count += state.get("_anywidget_id") in HEAD_VIEW_IDS  # the first view, and the stubs after it
    return count


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _readme_summaries(readme: Path | None) -> dict[str, str]:
    """Notebook file name -> the README lesson table's "what you will be able to do" cell."""
    if readme is None or not readme.exists():
        return {}
    summaries = {}
    for line in readme.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\|\s*\d+\s*\|\s*\[[^\]]*\]\((?:\./)?notebooks/([^)]+\.ipynb)\)\s*\|(.*)\|\s*$", line)
        if match:
            summaries[match.group(1)] = match.group(2).strip()
    return summaries


def _first_paragraph(markdown: str) -> str:
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", markdown) if p.strip()]
    prose = [p for p in paragraphs if not p.startswith(("#", "|", "```", "-", "*", "<"))]
    if not prose:
        return ""
    text = " ".join(prose[0].split())
    sentence = re.match(r"^(.{40,}?[.!?])\s", text + " ")
    return sentence.group(1) if sentence else text


def read_lesson(path: Path, summaries: dict[str, str] | None = None) -> Lesson:
    """The lesson in ``path``; refuses one that is not executed or has no title (a "# ..." first line)."""
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source.strip() and cell.get("execution_count") is None:
            raise SiteError(
                f"{path.name} is not executed (code cell {index} has no execution count): the site shows "
                f"the lessons as executed, so run `make notebooks NB={path}` first"
            )
    markdown = [cell for cell in nb.cells if cell.cell_type == "markdown"]
    first = _source(markdown[0]) if markdown else ""
    if not first.startswith("# "):
        raise SiteError(f"{path.name} has no title: its first markdown cell should start with '# Lesson NN: ...'")
    title, _, rest = first.partition("\n")
    summary = (summaries or {}).get(path.name) or _first_paragraph(rest)
    return Lesson(path, path.name[:2], title[2:].strip(), summary, head_view_count(nb))


def find_lessons(notebooks_dir: Path = NOTEBOOKS_DIR, readme: Path | None = README) -> list[Lesson]:
    """Every ``NN_*.ipynb`` in ``notebooks_dir``, in file-name order; refuses a name outside ``NN_[a-z0-9_]+``."""
    paths = sorted(Path(notebooks_dir).glob(LESSON_GLOB))
    if not paths:
        raise SiteError(f"no lessons in {notebooks_dir}: expected notebooks named like 01_embeddings.ipynb")
    odd = [path.name for path in paths if not LESSON_NAME.fullmatch(path.name)]
    if odd:
        raise SiteError(
            f"lesson file names must be two digits, an underscore, then lower-case letters, digits and underscores "
            f"(like 01_embeddings.ipynb), since each becomes a page name in every page's links; rename or move "
            f"{', '.join(repr(name) for name in odd)}"
        )
    summaries = _readme_summaries(readme)
    return [read_lesson(path, summaries) for path in paths]


# ---------------------------------------------------------------------------------------------
# The search index: each markdown section of each exported page, with its heading's anchor
# ---------------------------------------------------------------------------------------------
class _Sections(HTMLParser):
    """Collects (heading id, heading text, text) from the rendered markdown cells of an exported page,
    leaving out solution cells (class celltag_site-solution). nbconvert closes every <div>, so counting divs
    finds where a cell ends."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sections: list[dict] = [{"anchor": "", "heading": "", "text": []}]
        self.depth = 0
        self.markdown_depth: int | None = None
        self.heading: str | None = None
        self.skip = 0
        self.solution_depth: int | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "div":
            self.depth += 1
            classes = (attributes.get("class") or "").split()
            if self.solution_depth is None and f"celltag_{SOLUTION_TAG}" in classes:
                self.solution_depth = self.depth
            if self.markdown_depth is None and self.solution_depth is None and "jp-RenderedMarkdown" in classes:
                self.markdown_depth = self.depth
        elif tag in ("script", "style"):
            self.skip += 1
        elif self.markdown_depth is not None and re.fullmatch(r"h[1-6]", tag) and attributes.get("id"):
            self.heading = tag
            self.sections.append({"anchor": attributes["id"], "heading": "", "text": []})

    def handle_endtag(self, tag):
        if tag == "div":
            if self.markdown_depth == self.depth:
                self.markdown_depth = None
            if self.solution_depth == self.depth:
                self.solution_depth = None
            self.depth -= 1
        elif tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        elif tag == self.heading:
            self.heading = None

    def handle_data(self, data):
        if self.markdown_depth is None or self.skip:
            return
        section = self.sections[-1]
        if self.heading:
            section["heading"] += data.replace("¶", "")
        else:
            section["text"].append(data)


def search_entries(lesson: Lesson, page_html: str) -> list[dict]:
    """The search index's entries for one exported lesson page: one per section with text."""
    parser = _Sections()
    parser.feed(page_html)
    entries = []
    for section in parser.sections:
        heading = " ".join(section["heading"].split())
        text = " ".join("".join(section["text"]).split())
        if heading or text:
            href = lesson.page + (f"#{section['anchor']}" if section["anchor"] else "")
            entries.append({"lesson": lesson.title, "href": href, "heading": heading or lesson.title, "text": text})
    return entries


# ---------------------------------------------------------------------------------------------
# Page furniture
# ---------------------------------------------------------------------------------------------
def _inline_markdown(text: str) -> str:
    """The little markdown a summary holds (`code`, **bold**) as HTML, everything else escaped."""
    escaped = html.escape(text, quote=False)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


def _attribute(value: str) -> str:
    """``value`` made safe inside a double-quoted HTML attribute (quotes, <, > and & escaped)."""
    return html.escape(value, quote=True)


def _sidebar(lessons: Sequence[Lesson], current: Lesson | None, sections: Sequence[dict]) -> str:
    items = []
    for lesson in lessons:
        here = lesson is current
        attributes = ' aria-current="page" class="site-current"' if here else ""
        items.append(
            f'<li><a href="{_attribute(lesson.page)}"{attributes}><span class="site-number">{lesson.number}</span> '
            f"{html.escape(lesson.short_title)}</a>"
        )
        if here and sections:
            links = "".join(
                f'<li><a href="#{_attribute(s["anchor"])}">{html.escape(s["heading"])}</a></li>' for s in sections
            )
            items.append(f'<ul class="site-sections">{links}</ul>')
        items.append("</li>")
    return (
        '<nav class="site-sidebar" aria-label="course">\n'
        f'<a class="site-home" href="index.html">{html.escape(COURSE_TITLE)}</a>\n'
        '<form class="site-search" role="search" onsubmit="return false">'
        '<input type="search" class="site-search-input" placeholder="Search the lessons" aria-label="search">'
        '<ol class="site-search-results" hidden></ol></form>\n'
        f'<ol class="site-lessons">{"".join(items)}</ol>\n'
        "</nav>\n"
    )


def _pager(previous: Lesson | None, following: Lesson | None, where: str) -> str:
    back = (
        f'<a rel="prev" class="site-prev" href="{_attribute(previous.page)}">← {html.escape(previous.title)}</a>'
        if previous
        else '<a rel="prev" class="site-prev" href="index.html">← all lessons</a>'
    )
    forward = (
        f'<a rel="next" class="site-next" href="{_attribute(following.page)}">{html.escape(following.title)} →</a>'
        if following
        else '<a class="site-next" href="index.html">all lessons ↑</a>'
    )
    return f'<nav class="site-pager site-pager-{where}" aria-label="lessons">{back}{forward}</nav>\n'


def _head_links() -> str:
    # Deferred scripts run in this order once the page is parsed: KaTeX before site.js, which draws with it.
    return (
        f'<link rel="stylesheet" href="{STATIC}/{KATEX}/katex.min.css">\n'
        f'<link rel="stylesheet" href="{STATIC}/site.css">\n'
        f'<script src="{STATIC}/{KATEX}/katex.min.js" defer></script>\n'
        f'<script src="{STATIC}/{KATEX}/contrib/auto-render.min.js" defer></script>\n'
        f'<script src="{STATIC}/search-index.js" defer></script>\n'
        f'<script src="{STATIC}/site.js" defer></script>\n'
    )


def wrap_lesson_page(page_html: str, lessons: Sequence[Lesson], index: int, sections: Sequence[dict]) -> str:
    """An exported lesson page with the site's title, style, sidebar and previous/next links added."""
    lesson = lessons[index]
    previous = lessons[index - 1] if index > 0 else None
    following = lessons[index + 1] if index + 1 < len(lessons) else None
    body = re.search(r"<body\b[^>]*>", page_html)
    if body is None or "</head>" not in page_html or "</body>" not in page_html:
        raise SiteError(f"the export of {lesson.path.name} is not a whole HTML page (no <head> or <body>)")
    title = f"<title>{html.escape(lesson.title)} · {html.escape(COURSE_TITLE)}</title>"
    page_html = re.sub(r"<title>.*?</title>", lambda _: title, page_html, count=1, flags=re.DOTALL)
    head_end = page_html.index("</head>")
    page_html = page_html[:head_end] + _head_links() + page_html[head_end:]
    body = re.search(r"<body\b[^>]*>", page_html)
    assert body is not None, "found above, and only the head changed since"
    opening = body.group(0)
    opening = (
        opening.replace('class="', 'class="site-lesson ', 1)
        if 'class="' in opening
        else opening.replace("<body", '<body class="site-lesson"', 1)
    )
    top = opening + "\n" + _sidebar(lessons, lesson, sections) + _pager(previous, following, "top")
    page_html = page_html[: body.start()] + top + page_html[body.end() :]
    close = page_html.rindex("</body>")
    return page_html[:close] + _pager(previous, following, "bottom") + page_html[close:]


def landing_page(lessons: Sequence[Lesson], solutions: bool = True) -> str:
    """index.html: what the course is, the lesson table, and the sidebar."""
    exercises = (
        "Exercise solutions are folded: try first, then click <em>Show the solution</em>."
        if solutions
        else "These pages hold no solutions: solve the exercises in your own copy of the lessons."
    )
    rows = "".join(
        f'<tr><td class="site-number">{lesson.number}</td>'
        f'<td><a class="site-lesson-link" href="{_attribute(lesson.page)}">{html.escape(lesson.title)}</a></td>'
        f"<td>{_inline_markdown(lesson.summary)}</td>"
        f"<td>{lesson.head_views or ''}</td></tr>\n"
        for lesson in lessons
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
        f"<title>{html.escape(COURSE_TITLE)}</title>\n{_head_links()}</head>\n"
        '<body class="site-index">\n'
        f"{_sidebar(lessons, None, [])}"
        '<main class="site-main">\n'
        f"<h1>{html.escape(COURSE_TITLE)}</h1>\n"
        "<p>A hands-on course on multi-head attention, from token embeddings to real pretrained models. "
        "These pages are the lessons as executed: read them here, then run them in JupyterLab "
        "(<code>make lab</code>) to change the code and solve the exercises. The head views are live: hover a "
        f"token, click a head. {exercises} Formulas are drawn by KaTeX, which the site carries: nothing is "
        "loaded from a network.</p>\n"
        '<table class="site-lesson-table">\n<thead><tr><th>#</th><th>lesson</th>'
        "<th>what you will be able to do</th><th>head views</th></tr></thead>\n"
        f"<tbody>\n{rows}</tbody>\n</table>\n</main>\n</body>\n</html>\n"
    )


# ---------------------------------------------------------------------------------------------
# Nothing from a network
# ---------------------------------------------------------------------------------------------
_REMOTE_PATTERNS = [
    # an element that the browser loads by itself (links to read, <a href>, are fine)
    re.compile(
        r"<(?:script|link|img|iframe|source|video|audio|embed|object|track)\b[^>]*?\b(?:src|href|data|srcset)"
        r"\s*=\s*[\"']?\s*(?:https?:)?//[^\s\"'>]+",
        re.IGNORECASE,
    ),
    re.compile(r"@import\s+(?:url\()?\s*[\"']?\s*(?:https?:)?//[^\s\"')]+", re.IGNORECASE),  # CSS imports
    re.compile(r"url\(\s*[\"']?\s*(?:https?:)?//[^\s\"')]+", re.IGNORECASE),  # fonts, images in CSS
]


def remote_fetches(text: str) -> list[str]:
    """What an HTML, CSS or JavaScript text would fetch from a network by itself (scripts, styles, fonts...)."""
    return [match.group(0) for pattern in _REMOTE_PATTERNS for match in pattern.finditer(text)]


def check_offline(site: Path) -> None:
    """Raise SiteError if any page, style sheet or script of ``site`` would load something from a network."""
    found = []
    for path in sorted(site.rglob("*")):
        if path.suffix in (".html", ".css", ".js"):
            found += [f"{path.relative_to(site)}: {hit[:120]}" for hit in remote_fetches(path.read_text("utf-8"))]
    if found:
        raise SiteError("the site would load from a network:\n  " + "\n  ".join(found))


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------
# The lessons tell a reader of JupyterLab where a folded solution opens; the site folds it behind a button. The note
# points at the button without repeating its label: words that read like the button invite a click that does nothing.
_JUPYTERLAB_UNFOLD = "click the bar to the left of the folded cell"
_SITE_UNFOLD = "open it with the button below"


def _with_folded_solutions(nb: nbformat.NotebookNode) -> None:
    """Tag the solution cells (celltag_site-solution) for site.js to fold, and say how to unfold them here."""
    for cell in nb.cells:
        if is_solution_cell(cell):
            tags = cell.metadata.setdefault("tags", [])
            if SOLUTION_TAG not in tags:
                tags.append(SOLUTION_TAG)
        elif cell.cell_type == "markdown":
            cell.source = cell.source.replace(_JUPYTERLAB_UNFOLD, _SITE_UNFOLD)


def _without_solutions(nb: nbformat.NotebookNode) -> None:
    """Take out what gives an exercise away, as a student copy does, and keep every other output as executed."""
    kept = []
    for cell in nb.cells:
        if SOLUTION_ONLY_TAG in cell.metadata.get("tags", []):
            continue
        if cell.cell_type == "code" and is_solution_cell(cell):
            cell.source, _ = strip_solutions(cell.source)
            cell.outputs = []  # whatever the solution printed
        elif cell.cell_type == "markdown":
            cell.source = drop_folded_notes(cell.source)
        kept.append(cell)
    nb.cells = kept


def _export(lesson: Lesson, work: Path, solutions: bool = True) -> str:
    """The lesson exported by export_html: solutions folded for site.js, or (``solutions=False``) taken out."""
    nb = nbformat.read(lesson.path, as_version=4)
    if solutions:
        _with_folded_solutions(nb)
    else:
        _without_solutions(nb)
    copy = work / lesson.path.name
    nbformat.write(nb, copy)
    return export_html(copy, work / lesson.page).read_text(encoding="utf-8")


def _replace(out: Path, built: Path) -> None:
    """Move ``built`` to ``out``; an existing ``out`` must be a site built here (it holds MARKER)."""
    if out.exists():
        if not (out / MARKER).exists():
            raise SiteError(f"{out} exists and is not a site built by course.site: refusing to replace it")
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        out.rename(old / out.name)
        built.rename(out)
        shutil.rmtree(old)
    else:
        built.rename(out)


def build(
    out: str | Path = DEFAULT_OUT,
    notebooks_dir: str | Path = NOTEBOOKS_DIR,
    readme: Path | None = README,
    solutions: bool = True,
) -> list[Lesson]:
    """Build the site from every executed lesson in ``notebooks_dir`` into ``out``; returns the lessons.
    ``solutions=False``: a site without any exercise's solution (for the weeks a lesson is graded)."""
    out = Path(out).resolve()
    notebooks_dir = Path(notebooks_dir).resolve()
    if out == notebooks_dir or notebooks_dir.is_relative_to(out):
        raise SiteError(f"the site's folder {out} would hold the lessons themselves: choose another --out")
    lessons = find_lessons(notebooks_dir, readme)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        site = staging / out.name
        (site / STATIC).mkdir(parents=True)
        entries = []
        with tempfile.TemporaryDirectory(prefix="course-site-") as work:
            for index, lesson in enumerate(lessons):
                page = _export(lesson, Path(work), solutions)
                found = search_entries(lesson, page)
                wrapped = wrap_lesson_page(page, lessons, index, _main_sections(page, found))
                (site / lesson.page).write_text(wrapped, encoding="utf-8")
                entries += found
        (site / "index.html").write_text(landing_page(lessons, solutions), encoding="utf-8")
        for name in ("site.css", "site.js"):
            shutil.copy(SITE_STATIC / name, site / STATIC / name)
        shutil.copytree(SITE_STATIC / KATEX, site / STATIC / KATEX)
        index_js = "window.COURSE_SEARCH = " + json.dumps(entries, ensure_ascii=False).replace("</", "<\\/") + ";\n"
        (site / STATIC / "search-index.js").write_text(index_js, encoding="utf-8")
        (site / MARKER).write_text("built by python -m course.site; replaced on every build\n")
        check_offline(site)
        _replace(out, site)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return lessons


def _main_sections(page_html: str, entries: Sequence[dict]) -> list[dict]:
    """The search entries whose heading is an <h2> of the page (the lesson's numbered parts), with anchors."""
    h2 = set(re.findall(r"<h2\b[^>]*\bid=\"([^\"]+)\"", page_html))
    sections = [entry | {"anchor": entry["href"].partition("#")[2]} for entry in entries]
    return [section for section in sections if section["anchor"] in h2]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the site's folder (default: build/site)")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS_DIR, help="the lessons (default: notebooks/)")
    parser.add_argument(
        "--no-solutions",
        action="store_true",
        help="leave every exercise's solution out (make site SOLUTIONS=0): for the weeks a lesson is graded",
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        lessons = build(args.out, args.notebooks, solutions=not args.no_solutions)
    except SiteError as error:
        print(f"course.site: {error}", file=sys.stderr)
        return 1
    views = sum(lesson.head_views for lesson in lessons)
    solutions = "no solutions" if args.no_solutions else "solutions folded"
    print(
        f"wrote {len(lessons)} lessons ({views} interactive head views, {solutions}) to {args.out / 'index.html'} "
        f"in {time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
