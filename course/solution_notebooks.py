"""Solution notebooks as the course reads them: markers, exercises, the checks a lesson imports, the student copy.

Every lesson in ``notebooks/`` is a *solution notebook*: an exercise is the body of a function between two
single-hash markers on lines of their own (``# BEGIN SOLUTION`` / ``# END SOLUTION``), and the code cell after it
calls the exercise's check, imported from a ``course.exercises`` module. This module reads that format and nothing
more; the commands built on it live above it, so the import graph has one direction::

    course.solution_notebooks  <-  course.grading.checker   (runs handed-in notebooks)
                               <-  course.assignments       (release, nbgrader, collapse, list, and the check CLI)

The rules of the format (which lines are markers, what a student copy keeps) are described in
:mod:`course.assignments`, whose commands apply them.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbformat.v4.rwbase import rejoin_lines

__all__ = [
    "BEGIN_MARKER",
    "END_MARKER",
    "NOTEBOOKS_DIR",
    "PLACEHOLDER",
    "SOLUTION_ONLY_TAG",
    "Exercise",
    "MarkerProblem",
    "ReleaseError",
    "cell_tags",
    "check_imports",
    "drop_folded_notes",
    "file_kind",
    "find_exercises",
    "notebook_from_bytes",
    "plain_python",
    "python_of",
    "read_notebook",
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


class MarkerProblem(ValueError):
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
        raise MarkerProblem(
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
                raise MarkerProblem(
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
                raise MarkerProblem(
                    f"line {number}: {END_MARKER!r} without a {BEGIN_MARKER!r} above it in the same cell."
                )
            open_line = None
        elif open_line is None:
            kept.append(line)
    if open_line is not None:
        raise MarkerProblem(
            f"line {open_line}: {BEGIN_MARKER!r} has no {END_MARKER!r} below it in the same cell "
            "(a region must start and end in one code cell)."
        )
    return "\n".join(kept), regions


def python_of(cell_source: str) -> str | None:
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
    if python_of(original) is None:
        return  # not ours to judge: the lesson's own cell does not parse
    if python_of(stripped) is None:
        try:
            compile(stripped, "<cell>", "exec")
            detail = ""
        except SyntaxError as error:
            detail = f" ({error.msg}, line {error.lineno} of the student cell)"
        raise MarkerProblem(
            f"without its solution the cell is no longer valid Python{detail}. Indent "
            f"{BEGIN_MARKER!r} exactly like the first line of the code it hides: the placeholder "
            "is written at the marker's indentation."
        )


def cell_tags(cell: NotebookNode) -> list[str]:
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
        except MarkerProblem:
            is_marker = True  # a look-alike: still a marker in the wrong place
        if is_marker:
            raise MarkerProblem(
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
    """One kept cell as students get it; raises ``MarkerProblem`` for any marker problem."""
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
        if SOLUTION_ONLY_TAG in cell_tags(cell):
            continue  # removed whole, markers and all
        try:
            kept = _student_cell(cell)
        except MarkerProblem as problem:
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
        if cell.cell_type != "code" or SOLUTION_ONLY_TAG in cell_tags(cell):
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


def read_notebook(path: Path) -> NotebookNode:
    """Read a notebook as stored, without nbformat inventing (random) cell ids along the way.

    Only a regular file is read: a FIFO or a device named like a notebook is refused without waiting on it
    (opened non-blocking, checked with ``fstat`` before a byte is read). Raises ``ReleaseError``."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as error:
        raise ReleaseError(str(path), None, f"cannot be read as a notebook: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        kind = file_kind(os.fstat(descriptor).st_mode)
        if kind != "a regular file":
            raise ReleaseError(str(path), None, f"is {kind}, not a notebook file: expected a regular .ipynb file")
        data = file.read()
    return notebook_from_bytes(data, str(path))


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a regular file", "a FIFO (named pipe)", ...)."""
    kinds = [(stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
             (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device")]  # fmt: skip
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def notebook_from_bytes(data: bytes, name: str) -> NotebookNode:
    """The notebook stored in ``data`` (a ``.ipynb`` file's bytes); ``name`` is for messages.

    Refuses, with ``ReleaseError``, what is not JSON, not nbformat 4, or not shaped as one: every part the course
    reads (the cells, their type, source, metadata and outputs) must have its type, so that one odd file is one
    clear error and never a crash further on."""
    try:
        notebook = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ReleaseError(name, None, f"cannot be read as a notebook: {error}") from None
    except RecursionError:  # JSON's reader recurses once a level: far deeper than the limit below
        notebook = _NESTED_TOO_DEEP
    except ValueError as error:  # Python's limit on the digits of a number read from text (against denial of service)
        digits = f"{sys.get_int_max_str_digits():,}"
        why = f"it holds a number of more than {digits} digits" if "digits" in str(error) else str(error)
        raise ReleaseError(name, None, f"cannot be read as a notebook: {why}") from None
    if notebook is _NESTED_TOO_DEEP or _nesting(notebook) > NESTING_LIMIT:
        why = f"its JSON is nested more than {NESTING_LIMIT} levels deep (a lesson's is about 10)"
        raise ReleaseError(name, None, f"cannot be read as a notebook: {why}")
    if not isinstance(notebook, dict) or notebook.get("nbformat") != 4:
        raise ReleaseError(name, None, "expected an nbformat 4 notebook (a JSON object with nbformat 4)")
    problem = _shape_problem(notebook)
    if problem:
        raise ReleaseError(name, None, f"is not shaped as an nbformat 4 notebook: {problem}")
    return rejoin_lines(nbformat.from_dict(notebook))  # sources stored as lists of lines -> one string


# A notebook's JSON is about 10 levels deep (a widget's state, an output's JSON); one far deeper is refused as it is
# read, before anything (nbformat, the checker's copies, the supervisor's job) recurses through it.
NESTING_LIMIT = 100
_NESTED_TOO_DEEP = object()


def _nesting(value: object) -> int:
    """How many lists and objects deep ``value`` goes (counted without recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= NESTING_LIMIT:
                todo.extend((inner, depth + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return deepest


def _type_name(value: object) -> str:
    return {str: "a string", list: "a list", dict: "an object", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def _shape_problem(notebook: dict) -> str | None:
    """What in a notebook's JSON has the wrong type (None: each part the course reads has its own)."""
    if not isinstance(notebook.get("metadata", {}), dict):
        return f"its metadata should be an object, got {_type_name(notebook['metadata'])}"
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        return f'"cells" should be a list of cells, got {_type_name(cells)}'
    for number, cell in enumerate(cells, start=1):
        where = f"cell {number} from the top"
        if not isinstance(cell, dict):
            return f"{where} should be an object, got {_type_name(cell)}"
        if cell.get("cell_type") not in ("code", "markdown", "raw"):
            return f'{where}: "cell_type" should be "code", "markdown" or "raw", got {cell.get("cell_type")!r}'
        source = cell.get("source")
        if not (isinstance(source, str) or (isinstance(source, list) and all(isinstance(s, str) for s in source))):
            return f'{where}: "source" should be a string or a list of strings, got {_type_name(source)} {source!r:.60}'
        metadata = cell.setdefault("metadata", {})  # absent: nothing to read (nbformat's schema wants it)
        if not isinstance(metadata, dict):
            return f'{where}: "metadata" should be an object, got {_type_name(metadata)}'
        tags = metadata.get("tags", [])
        if not (isinstance(tags, list) and all(isinstance(tag, str) for tag in tags)):
            return f'{where}: its "tags" should be a list of strings, got {tags!r:.60}'
        if cell["cell_type"] == "code" and not isinstance(cell.setdefault("outputs", []), list):
            return f'{where}: "outputs" should be a list, got {_type_name(cell["outputs"])}'
    return None


def check_imports(notebook: NotebookNode) -> dict[str, str]:
    """check_... name -> the course.exercises module a lesson imports it from."""
    found = {}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(plain_python(cell.source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("course.exercises."):
                for alias in node.names:
                    if alias.name.startswith("check_"):
                        found[alias.asname or alias.name] = node.module
    return found


def plain_python(source: str) -> str:
    """A cell's text with IPython's magics and shell lines blanked (enough to parse imports and defs)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))
