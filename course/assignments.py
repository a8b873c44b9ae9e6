"""Student copies of the lessons: the solutions come out, everything else that teaches stays.

Every lesson in ``notebooks/`` is a *solution notebook*. An exercise is the body of a function,
written between two single-hash markers on lines of their own, indented like the code they hold::

    def positional_encoding(num_positions, dim):
        # BEGIN SOLUTION
        ...reference solution...
        # END SOLUTION

A release writes one student copy per lesson, with the same file name, into an output folder::

    python -m course.assignments release --out DIR      # or: make release  (DIR = student/)
    python -m course.assignments list                   # the exercises each lesson holds
    python -m course.assignments check FILE.ipynb ...   # grade handed-in copies: rows, grades/gradebook.csv, totals
    python -m course.assignments nbgrader               # nbgrader sources in classroom/source (--hide-checks: exam)
    python -m course.assignments collapse               # hide solution cells in JupyterLab (metadata only)

What a student copy is:

* Each marked region is replaced by ``# YOUR CODE HERE`` and ``raise NotImplementedError()`` at
  the indentation of its ``# BEGIN SOLUTION`` line (what nbgrader writes), so the cell still runs
  and defines the function, and the lesson's check cell reports "not attempted yet".
* Cells tagged ``solution-only`` (any cell type) are removed: use the tag for a worked answer, an
  explanation of the solution, or a cell that only demonstrates the solved function.
* A markdown paragraph that speaks of a folded solution ("... folded away ... click the bar") is dropped:
  a copy holds no solution to unfold.
* Outputs and execution counts are cleared. Cell metadata keeps only ``tags`` (and, in raw cells,
  the ``format``/``raw_mimetype`` that say what the raw text is); notebook metadata keeps only
  ``kernelspec`` and ``language_info``. Widget state (``metadata.widgets``), nbgrader's records
  and anything else a tool stored there are dropped, because any of them can carry solution text.

The release refuses, naming notebook and cell, and writes nothing at all, when a notebook has an
unbalanced marker (``BEGIN`` without ``END`` in the same cell, or ``END`` without ``BEGIN``), a
nested region, a marker in a markdown or raw cell, or a line that looks like a marker but is not
exactly one (``### BEGIN SOLUTION``, ``# begin solution``, ``# BEGIN SOLUTION  # hint``): nbgrader
treats any line containing ``BEGIN SOLUTION`` as a marker and otter-grader does not accept the
triple-hash form, so only the exact single-hash line keeps all three tools in agreement. It also
refuses when removing a region would leave a cell that is no longer valid Python.

Writing is safe to repeat: every notebook is converted in memory first, then each file is written
to a temporary file in the output folder and moved into place (``os.replace``), so a reader never
sees a half-written copy. Output is byte-for-byte deterministic, and an unchanged copy is not
rewritten. Files in the output folder that the release does not produce (a teacher's notes, an
old copy of a renamed lesson) are left alone; stale ``.ipynb`` files are listed, never deleted.
The output folder may not be the lessons' folder or lie inside it (nbval would collect the copies).

Only notebooks are written: a student copy imports ``helpers`` (its checks and the reference code
that later cells use), so students need the course installed (``make lab``); docs/teaching.md
says how to hand copies out, check them, and use nbgrader or otter-grader instead.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbformat.v4.rwbase import rejoin_lines

from course.grading.checker import CHECK_ISOLATION, CheckResult, SubmissionReport, check_submission, run_submission
from helpers.tools.files import write_atomically

__all__ = [
    "BEGIN_MARKER",
    "CHECK_ISOLATION",
    "END_MARKER",
    "NOTEBOOKS_DIR",
    "PLACEHOLDER",
    "SOLUTION_ONLY_TAG",
    "CheckResult",
    "Exercise",
    "ReleaseError",
    "SubmissionReport",
    "check_submission",
    "collapse_solutions",
    "find_exercises",
    "main",
    "nbgrader_source",
    "release",
    "run_submission",
    "strip_solutions",
    "student_copy",
]

BEGIN_MARKER = "# BEGIN SOLUTION"
END_MARKER = "# END SOLUTION"
# What replaces a region, line by line, at the BEGIN marker's indentation (nbgrader's stub).
PLACEHOLDER = ("# YOUR CODE HERE", "raise NotImplementedError()")
SOLUTION_ONLY_TAG = "solution-only"
NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"

# Anything that a person (or nbgrader, which matches the substring "BEGIN SOLUTION") could take
# for a marker. A line that matches this but is not exactly a marker is refused, never ignored:
# ignoring it would publish the solution below it.
_LOOKS_LIKE_MARKER = re.compile(r"\b(BEGIN|END)[ \t]*SOLUTION\b", re.IGNORECASE)
_KEPT_CELL_METADATA = {"code": ("tags",), "markdown": ("tags",), "raw": ("tags", "format", "raw_mimetype")}
_KEPT_NOTEBOOK_METADATA = ("kernelspec", "language_info")


class ReleaseError(ValueError):
    """A notebook that cannot be released safely; the message names the notebook and the cell.

    ``cell_index`` counts from 0 in the *source* notebook (the cell is number ``cell_index + 1``
    counting from the top, as a person does in JupyterLab); it is None for notebook-wide problems.
    """

    def __init__(self, notebook: str, cell_index: int | None, problem: str, cell_source: str = "") -> None:
        self.notebook = notebook
        self.cell_index = cell_index
        self.problem = problem
        if cell_index is None:
            where = notebook
        else:
            first_line = next((line.strip() for line in cell_source.splitlines() if line.strip()), "")
            where = f"{notebook}, cell index {cell_index} (cell {cell_index + 1} from the top"
            where += f", starting {first_line[:60]!r})" if first_line else ")"
        super().__init__(f"{where}: {problem}")


class _MarkerProblem(ValueError):
    """A problem inside one cell's text, before we know which notebook and cell it is in."""


@dataclass(frozen=True)
class Exercise:
    """One solution region: where it is and the function whose body it is (None at top level)."""

    notebook: str
    cell_index: int
    function: str | None
    lines: int  # how many solution lines the learner has to write (non-blank, markers excluded)


def _marker_kind(line: str) -> str | None:
    """Say whether ``line`` is a BEGIN or END marker ("begin"/"end"/None); refuse look-alikes."""
    stripped = line.strip()
    if stripped == BEGIN_MARKER:
        return "begin"
    if stripped == END_MARKER:
        return "end"
    if _LOOKS_LIKE_MARKER.search(line):
        raise _MarkerProblem(
            f"{stripped!r} looks like a solution marker but is not exactly {BEGIN_MARKER!r} or "
            f"{END_MARKER!r} on a line of its own (one '#', one space, upper case). Write the marker "
            "exactly: nbgrader treats any line containing 'BEGIN SOLUTION' as a marker, otter-grader "
            "does not accept '### BEGIN SOLUTION', and a marker this tool ignored would publish the "
            "solution below it."
        )
    return None


def strip_solutions(source: str) -> tuple[str, int]:
    """Replace each marked region of one code cell's text by the placeholder.

    Returns the new text and how many regions were replaced. Raises ``ValueError`` for an
    unbalanced, nested or malformed marker (``student_copy`` adds notebook and cell to it).
    """
    kept: list[str] = []
    open_line: int | None = None  # 1-based line of the BEGIN marker of the region we are in
    regions = 0
    for number, line in enumerate(source.split("\n"), start=1):
        kind = _marker_kind(line)
        if kind == "begin":
            if open_line is not None:
                raise _MarkerProblem(
                    f"line {number}: {BEGIN_MARKER!r} inside the region opened on line {open_line}; "
                    f"regions cannot nest (nbgrader refuses them too). Close the first region with "
                    f"{END_MARKER!r} before opening the next."
                )
            open_line = number
            regions += 1
            indent = line[: len(line) - len(line.lstrip())]  # the placeholder sits where the marker sat
            kept.extend(indent + placeholder for placeholder in PLACEHOLDER)
        elif kind == "end":
            if open_line is None:
                raise _MarkerProblem(
                    f"line {number}: {END_MARKER!r} without a {BEGIN_MARKER!r} above it in the same cell."
                )
            open_line = None
        elif open_line is None:
            kept.append(line)
    if open_line is not None:
        raise _MarkerProblem(
            f"line {open_line}: {BEGIN_MARKER!r} has no {END_MARKER!r} below it in the same cell "
            "(a region must start and end in one code cell)."
        )
    return "\n".join(kept), regions


def _python_of(cell_source: str) -> str | None:
    """The cell as plain Python (IPython magics translated), or None if it does not parse."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # no IPython: cells with magics cannot be checked, plain ones still can
        python = cell_source
    else:
        python = TransformerManager().transform_cell(cell_source)
    try:
        compile(python, "<cell>", "exec")
    except SyntaxError:
        return None
    return python


def _check_still_python(original: str, stripped: str) -> None:
    """Refuse a replacement that breaks a cell which was valid Python before (bad marker indent)."""
    if _python_of(original) is None:
        return  # not ours to judge: the lesson's own cell does not parse
    if _python_of(stripped) is None:
        try:
            compile(stripped, "<cell>", "exec")
            detail = ""
        except SyntaxError as error:
            detail = f" ({error.msg}, line {error.lineno} of the student cell)"
        raise _MarkerProblem(
            f"without its solution the cell is no longer valid Python{detail}. Indent "
            f"{BEGIN_MARKER!r} exactly like the first line of the code it hides: the placeholder "
            "is written at the marker's indentation."
        )


def _tags(cell: NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _clean_cell(cell: NotebookNode) -> NotebookNode:
    """A copy of ``cell`` with no outputs, no execution count and only harmless metadata."""
    cell = copy.deepcopy(cell)
    kept_keys = _KEPT_CELL_METADATA.get(cell.cell_type, ("tags",))
    cell.metadata = nbformat.from_dict({k: cell.metadata[k] for k in kept_keys if k in cell.metadata})
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None
    return cell


def _refuse_markers_outside_code(cell: NotebookNode) -> None:
    """A marker (or look-alike) in a markdown or raw cell would be published as it stands."""
    for number, line in enumerate(cell.source.split("\n"), start=1):
        try:
            is_marker = _marker_kind(line) is not None
        except _MarkerProblem:
            is_marker = True  # a look-alike: still a marker in the wrong place
        if is_marker:
            raise _MarkerProblem(
                f"line {number} of this {cell.cell_type} cell holds a solution marker "
                f"({line.strip()!r}); markers only work in code cells. To keep a whole "
                f"{cell.cell_type} cell out of student copies, tag it {SOLUTION_ONLY_TAG!r}."
            )


# A paragraph that tells a self-learner where the folded solution is ("The reference solution in the cell below is
# folded away: ... click the bar ..."): untrue in a copy that holds no solution, so copies drop it.
_FOLDED_NOTE = re.compile(r"\bfolded\b.*\bsolution|\bsolution\b.*\bfolded\b", re.IGNORECASE | re.DOTALL)


def drop_folded_notes(markdown: str) -> str:
    """``markdown`` without its paragraphs that speak of a folded solution (blank-line separated)."""
    paragraphs = re.split(r"\n[ \t]*\n", markdown)
    kept = [paragraph for paragraph in paragraphs if not _FOLDED_NOTE.search(paragraph)]
    return markdown if len(kept) == len(paragraphs) else "\n\n".join(kept).rstrip("\n")


def _student_cell(cell: NotebookNode) -> NotebookNode:
    """One kept cell as students get it; raises ``_MarkerProblem`` for any marker problem."""
    student = _clean_cell(cell)
    if cell.cell_type != "code":
        _refuse_markers_outside_code(cell)
        if cell.cell_type == "markdown":
            student.source = drop_folded_notes(student.source)
        return student
    student.source, regions = strip_solutions(cell.source)
    if regions:
        _check_still_python(cell.source, student.source)
    return student


def student_copy(notebook: NotebookNode, name: str) -> NotebookNode:
    """The student copy of one solution notebook (the input is not modified).

    ``name`` is only used in error messages (e.g. "notebooks/03_scaled_dot_product_attention.ipynb").
    Raises ``ReleaseError`` naming the notebook and the cell for every kind of marker problem.
    """
    if notebook.get("nbformat") != 4:
        raise ReleaseError(name, None, f"expected an nbformat 4 notebook, got nbformat {notebook.get('nbformat')}")
    student = copy.deepcopy(notebook)
    student.metadata = nbformat.from_dict(
        {k: notebook.metadata[k] for k in _KEPT_NOTEBOOK_METADATA if k in notebook.metadata}
    )
    needs_ids = notebook.get("nbformat_minor", 0) >= 5
    student.cells = []
    for index, cell in enumerate(notebook.cells):
        if SOLUTION_ONLY_TAG in _tags(cell):
            continue  # removed whole, markers and all
        try:
            kept = _student_cell(cell)
        except _MarkerProblem as problem:
            raise ReleaseError(name, index, str(problem), cell.get("source", "")) from None
        if needs_ids and "id" not in kept:
            kept.id = f"cell-{index}"  # nbformat would invent a random one: keep output deterministic
        student.cells.append(kept)
    return student


def _enclosing_function(lines: list[str], marker_line: int) -> str | None:
    """Name of the innermost ``def`` that encloses line ``marker_line`` (0-based), if any."""
    indent = len(lines[marker_line]) - len(lines[marker_line].lstrip())
    for line in reversed(lines[:marker_line]):
        stripped = line.lstrip()
        line_indent = len(line) - len(stripped)
        if stripped and line_indent < indent:
            match = re.match(r"(?:async\s+)?def\s+(\w+)", stripped)
            if match:
                return match.group(1)
            indent = line_indent  # an enclosing `if`/`for`/`class`: keep looking further out
    return None


def find_exercises(notebook: NotebookNode, name: str) -> list[Exercise]:
    """Every solution region of a (valid) solution notebook, in order, with its function's name."""
    student_copy(notebook, name)  # the same validation as a release, so a listing never lies
    found = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or SOLUTION_ONLY_TAG in _tags(cell):
            continue
        lines = cell.source.split("\n")
        start = None
        for number, line in enumerate(lines):
            if line.strip() == BEGIN_MARKER:
                start = number
            elif line.strip() == END_MARKER and start is not None:
                body = [text for text in lines[start + 1 : number] if text.strip()]
                found.append(Exercise(name, index, _enclosing_function(lines, start), len(body)))
                start = None
    return found


def _read(path: Path) -> NotebookNode:
    """Read a notebook as stored, without nbformat inventing (random) cell ids along the way."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ReleaseError(str(path), None, f"cannot be read as a notebook: {error}") from None
    if not isinstance(data, dict) or data.get("nbformat") != 4:
        raise ReleaseError(str(path), None, "expected an nbformat 4 notebook (a JSON object with nbformat 4)")
    return rejoin_lines(nbformat.from_dict(data))  # sources stored as lists of lines -> one string


def _serialize(notebook: NotebookNode, name: str) -> bytes:
    """Deterministic bytes: nbformat's writer sorts keys; we also insist the result is valid."""
    try:
        nbformat.validate(notebook)
    except nbformat.ValidationError as error:
        raise ReleaseError(name, None, f"the student copy would not be a valid notebook: {error.message}") from None
    return (nbformat.writes(notebook) + "\n").encode("utf-8")


def _write_atomically(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically (readable by the class); False if it was already so."""
    return write_atomically(path, data, skip_unchanged=True)


def release(out_dir: str | Path, notebooks_dir: str | Path = NOTEBOOKS_DIR) -> list[Path]:
    """Write the student copy of every ``*.ipynb`` in ``notebooks_dir`` into ``out_dir``.

    All notebooks are converted before anything is written, so one bad notebook leaves the
    output folder exactly as it was. Returns the paths of the student copies (sorted).
    """
    notebooks_dir, out_dir = Path(notebooks_dir), Path(out_dir)
    if not notebooks_dir.is_dir():
        raise ReleaseError(str(notebooks_dir), None, "expected a folder of lesson notebooks; it does not exist")
    sources = sorted(notebooks_dir.glob("*.ipynb"))
    if not sources:
        raise ReleaseError(str(notebooks_dir), None, "expected lesson notebooks (*.ipynb) in this folder, found none")
    if out_dir.exists() and not out_dir.is_dir():
        raise ReleaseError(str(out_dir), None, "the output must be a folder, but a file of that name exists")
    _refuse_output_inside_lessons(out_dir, notebooks_dir, "the student copies")

    contents = {source.name: _serialize(student_copy(_read(source), str(source)), str(source)) for source in sources}

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, data in contents.items():
        target = out_dir / file_name
        changed = _write_atomically(target, data)
        print(f"{'wrote' if changed else 'unchanged'}  {target}")
        written.append(target)
    stale = sorted(p.name for p in out_dir.glob("*.ipynb") if p.name not in contents)
    if stale:
        print(f"left untouched (no lesson of that name; delete if they are old copies): {', '.join(stale)}")
    return written


# ---------------------------------------------------------------------------------------------
# nbgrader: the same lessons as nbgrader source notebooks
# ---------------------------------------------------------------------------------------------
def _graded_check(source: str, imports: dict[str, str]) -> tuple[str, int] | None:
    """The check cell's text made into an nbgrader test, and how many checks it calls.

    nbgrader scores a test cell by whether it raises; the course's checks print a verdict and return
    it. So the locked cell imports each check itself (an answer cell that redefines ``check_x`` changes
    nothing), each top-level call ``check_x(function)`` becomes ``_verdict_1 = graded(check_x, "function")``
    (which refuses a check that is not the course's own, see :mod:`course.grading`), and a last line
    asserts that all of them passed, after every check has printed its hint. ``imports`` maps each
    check's name to the course.exercises module the lesson imports it from. None when the cell calls no
    ``check_*`` function (or has magics or invalid Python); ``ValueError`` for a check it cannot import.
    """
    python = _python_of(source)
    if python is None or python.strip() != source.strip():
        return None  # magics or invalid Python: leave it to the teacher
    lines = source.rstrip().split("\n")
    calls = []
    for statement in ast.parse(source).body:
        call = getattr(statement, "value", None)
        is_check = isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("check_")
        if is_check and isinstance(statement, (ast.Expr, ast.Assign)):
            if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Name):
                raise _MarkerProblem(f"{call.func.id}(...) should take the exercise's function alone, e.g. check_x(x)")
            if call.func.id not in imports:
                raise _MarkerProblem(f"{call.func.id} is not imported from course.exercises anywhere in the lesson")
            calls.append((statement.lineno, statement.end_lineno, call.func.id, call.args[0].id))
    if not calls:
        return None
    for number, (first, last, check, function) in reversed(list(enumerate(calls, start=1))):
        lines[first - 1 : last] = [f'_verdict_{number} = graded({check}, "{function}")']
    modules: dict[str, list[str]] = {}
    for _, _, check, _ in calls:
        modules.setdefault(imports[check], []).append(check)
    header = [f"from {module} import {', '.join(dict.fromkeys(checks))}" for module, checks in modules.items()]
    header += ["from course.grading import graded  # refuses a check that is not the course's own", ""]
    names = ", ".join(f"_verdict_{number}" for number in range(1, len(calls) + 1)) + ("," if len(calls) == 1 else "")
    fail = "a check above did not pass: read its verdict"
    lines.append(f'assert all(verdict.passed for verdict in ({names})), "{fail}"')
    return "\n".join(header + lines), len(calls)


def _nbgrader_metadata(grade_id: str, answer: bool, points: int = 0) -> dict:
    """nbgrader's cell metadata (schema 3) for an autograded answer or a locked autograder test."""
    if answer:
        return {
            "grade": False,
            "grade_id": grade_id,
            "locked": False,
            "schema_version": 3,
            "solution": True,
            "task": False,
        }
    return {
        "grade": True,
        "grade_id": grade_id,
        "locked": True,
        "points": points,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }


def nbgrader_source(notebook: NotebookNode, name: str, hide_checks: bool = False) -> NotebookNode:
    """The lesson as an nbgrader *source* notebook: solutions kept, cells marked for nbgrader.

    ``solution-only`` cells are removed (nbgrader does not know the tag), each exercise cell
    becomes an "Autograded answer" cell, and the next code cell, which calls the checks, an
    "Autograder tests" cell worth one point per check that asserts the checks passed. With
    ``hide_checks`` (for an exam) the test cell's lines sit between nbgrader's hidden-test
    markers: students see an empty test cell and get no hints, and nbgrader puts the checks back
    when it autogrades. Raises ``ReleaseError`` like a release does, and for an exercise that is
    not followed by a code cell calling a check.
    """
    from course.grading.checker import _check_imports

    imports = _check_imports(notebook)
    functions: dict[int, list[str]] = {}
    for exercise in find_exercises(notebook, name):  # validates the markers as a release does
        functions.setdefault(exercise.cell_index, []).append(exercise.function or "exercise")
    graded = copy.deepcopy(notebook)
    kept = [index for index, cell in enumerate(notebook.cells) if SOLUTION_ONLY_TAG not in _tags(cell)]
    code_after = {
        index: [later for later in kept if later > index and notebook.cells[later].cell_type == "code"]
        for index in functions
    }
    for index, names in functions.items():
        label = f"{'-'.join(names)}-{index}"
        graded.cells[index].metadata["nbgrader"] = _nbgrader_metadata(f"{label}-answer", answer=True)
        try:
            test = _graded_check(notebook.cells[code_after[index][0]].source, imports) if code_after[index] else None
        except _MarkerProblem as problem:
            raise ReleaseError(
                name, code_after[index][0], str(problem), notebook.cells[code_after[index][0]].source
            ) from None
        if test is None:
            raise ReleaseError(
                name,
                index,
                "this exercise is not followed by a code cell that calls a check_...() function, so nbgrader "
                "would have nothing to grade it with",
                notebook.cells[index].source,
            )
        check = graded.cells[code_after[index][0]]
        check.source = f"### BEGIN HIDDEN TESTS\n{test[0]}\n### END HIDDEN TESTS" if hide_checks else test[0]
        check.metadata["nbgrader"] = _nbgrader_metadata(f"{label}-check", answer=False, points=test[1])
    graded.cells = [graded.cells[index] for index in kept]
    for cell in graded.cells:
        if cell.cell_type == "markdown":
            cell.source = drop_folded_notes(cell.source)  # nbgrader's release holds no solution to unfold
    # The solution run's widget state (31-56 KB a lesson): nbgrader clears outputs on release but keeps this.
    graded.metadata.pop("widgets", None)
    return graded


def _refuse_output_inside_lessons(out_dir: Path, notebooks_dir: Path, what: str) -> None:
    """nbval and `make test` collect every notebook under the lessons' folder: never write copies there."""
    if out_dir.exists() and out_dir.resolve() == notebooks_dir.resolve():
        raise ReleaseError(
            str(out_dir), None, f"the output folder is the lessons' own folder; {what} would overwrite the solutions"
        )
    if notebooks_dir.resolve() in out_dir.resolve().parents:
        raise ReleaseError(
            str(out_dir),
            None,
            f"the output folder is inside the lessons' folder {notebooks_dir}; nbval and `make test` would take "
            f"the {what} for lessons. Choose a folder outside it.",
        )


def _nbgrader(out_dir: Path, notebooks_dir: Path, hide_checks: bool) -> None:
    _refuse_output_inside_lessons(out_dir, notebooks_dir, "nbgrader notebooks (with solutions)")
    sources = sorted(notebooks_dir.glob("*.ipynb"))
    if not sources:
        raise ReleaseError(str(notebooks_dir), None, "expected lesson notebooks (*.ipynb) in this folder, found none")
    contents = {
        source: _serialize(nbgrader_source(_read(source), str(source), hide_checks), str(source)) for source in sources
    }
    for source, data in contents.items():
        target = out_dir / source.stem / source.name  # nbgrader: source/<assignment>/<notebook>.ipynb
        target.parent.mkdir(parents=True, exist_ok=True)
        print(f"{'wrote' if _write_atomically(target, data) else 'unchanged'}  {target}")
    from course.grading.nbgrader import write_config

    config = write_config(out_dir.parent)
    print(f"wrote  {config} (a template: set your course id and students)" if config else "kept  nbgrader_config.py")


# ---------------------------------------------------------------------------------------------
# Solutions out of sight in the lessons themselves (self-study)
# ---------------------------------------------------------------------------------------------
def is_solution_cell(cell: dict) -> bool:
    """A cell that holds a solution: a code cell with a ``# BEGIN SOLUTION`` line, or one tagged ``solution-only``."""
    source = cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else source
    tagged = SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", [])
    return tagged or (
        cell.get("cell_type") == "code" and any(line.strip() == BEGIN_MARKER for line in text.split("\n"))
    )


def collapse_solutions(notebook: dict) -> int:
    """Set ``metadata.jupyter.source_hidden`` on every solution cell (JupyterLab shows them collapsed).

    Works on the notebook as stored (a JSON dict), so nothing else changes; returns how many cells changed.
    Idempotent: a second call changes nothing. Student copies drop this metadata (they keep only tags).
    """
    changed = 0
    for cell in notebook.get("cells", []):
        if is_solution_cell(cell):
            jupyter = cell.setdefault("metadata", {}).setdefault("jupyter", {})
            if jupyter.get("source_hidden") is not True:
                jupyter["source_hidden"] = True
                changed += 1
    return changed


def _collapse(notebooks_dir: Path, check_only: bool) -> int:
    """Collapse every lesson's solution cells in place (metadata only); 1 if ``check_only`` finds one open."""
    open_cells = 0
    for source in sorted(notebooks_dir.glob("*.ipynb")):
        notebook = json.loads(source.read_text(encoding="utf-8"))
        changed = collapse_solutions(notebook)
        open_cells += changed
        if changed and not check_only:  # nbformat's own layout, so that only the metadata lines differ
            write_atomically(source, json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
        verb = "would collapse" if check_only else "collapsed"
        print(f"{source.name}: {verb} {changed} solution cell(s)" if changed else f"{source.name}: unchanged")
    return 1 if check_only and open_cells else 0


def _list(notebooks_dir: Path) -> None:
    for source in sorted(notebooks_dir.glob("*.ipynb")):
        exercises = find_exercises(_read(source), str(source))
        print(f"{source.name}: {len(exercises)} exercise(s)")
        for exercise in exercises:
            function = exercise.function or "(top level)"
            print(f"  cell index {exercise.cell_index:3d}  {function:32s} {exercise.lines} solution line(s)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of seconds, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 second, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``release``, ``list``, ``nbgrader`` or ``check``; exit status 1 on errors."""
    parser = argparse.ArgumentParser(prog="python -m course.assignments", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    release_parser = commands.add_parser("release", help="write student copies (no solutions) of every lesson")
    release_parser.add_argument(
        "--out", required=True, type=Path, help="folder for the student copies (created if missing)"
    )
    list_parser = commands.add_parser("list", help="list the exercises (solution regions) of every lesson")
    nbgrader_parser = commands.add_parser(
        "nbgrader", help="write nbgrader source notebooks, one assignment folder per lesson"
    )
    nbgrader_parser.add_argument(
        "--out",
        type=Path,
        default=Path("classroom/source"),
        help="nbgrader's source/ folder, outside the package (default: %(default)s; nbgrader_config.py is "
        "written beside it if missing)",
    )
    nbgrader_parser.add_argument(
        "--hide-checks",
        action="store_true",
        help="exam mode: students see no checks and no hints; nbgrader runs them when grading",
    )
    collapse_parser = commands.add_parser(
        "collapse",
        help="collapse every solution cell of the lessons in JupyterLab (cell metadata only; run after editing)",
    )
    collapse_parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a solution cell is not collapsed"
    )
    for sub in (release_parser, list_parser, nbgrader_parser, collapse_parser):
        sub.add_argument(
            "--notebooks", type=Path, default=NOTEBOOKS_DIR, help="folder of solution notebooks (default: %(default)s)"
        )
    check_parser = commands.add_parser(
        "check",
        help="run handed-in notebooks and write a gradebook (a row per exercise; tab-separated on stdout)",
        description="Run handed-in notebooks, one at a time, and print one tab-separated row per exercise of each "
        "(student, lesson, exercise, verdict, points, message; verdict 'error' where it could not be graded, "
        "and a '(notebook)' row saying what stopped a notebook), then write gradebook.csv and totals.csv to --out. "
        "The exit status is 1 when any row is 'error'.\n\n" + CHECK_ISOLATION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check_parser.add_argument(
        "submissions", nargs="+", type=Path, help="student notebooks to run (their code is executed)"
    )
    check_parser.add_argument(
        "--timeout", type=_positive_int, default=600, help="seconds one cell may run (default: %(default)s)"
    )
    check_parser.add_argument(
        "--notebook-timeout",
        type=_positive_int,
        default=1800,
        help="seconds a whole notebook may run (default: %(default)s)",
    )
    check_parser.add_argument(
        "--output-cap",
        type=_positive_int,
        default=10_000_000,
        help="bytes of cell outputs kept per notebook; more is dropped (default: %(default)s)",
    )
    check_parser.add_argument(
        "--out",
        type=Path,
        default=Path("grades"),
        help="folder for gradebook.csv and totals.csv (default: %(default)s)",
    )
    check_parser.add_argument(
        "--notebooks", type=Path, default=NOTEBOOKS_DIR, help="folder of the lessons (default: %(default)s)"
    )
    check_parser.add_argument(
        "--memory",
        type=_positive_int,
        default=8192,
        help="MiB of address space each process of a notebook may use (default: %(default)s)",
    )
    check_parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run the notebooks without bubblewrap's sandbox: for a machine without bwrap, and only for students "
        "you trust (see 'What it does NOT stop' above)",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "release":
            copies = release(args.out, args.notebooks)
            print(f"{len(copies)} student copies in {args.out}")
        elif args.command == "nbgrader":
            _nbgrader(args.out, args.notebooks, args.hide_checks)
        elif args.command == "collapse":
            return _collapse(args.notebooks, args.check)
        elif args.command == "check":
            from course.grading.checker import check_command, refuse_to_check

            refused = refuse_to_check(args.out, sandboxed=not args.no_sandbox)
            if refused:
                print(f"error: {refused}", file=sys.stderr)
                return 2
            return check_command(
                args.submissions,
                args.timeout,
                args.notebook_timeout,
                args.out,
                args.notebooks,
                args.output_cap,
                sandboxed=not args.no_sandbox,
                memory_mib=args.memory,
            )
        else:
            _list(args.notebooks)
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        if args.command in ("release", "nbgrader"):
            print("error: nothing was written; fix the notebook and run the release again.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
