"""The teacher's gradebook: every row ``check`` ever graded, kept in ``grades/gradebook.csv``, totals beside it.

One row per student × lesson × exercise (``COLUMNS``), plus a ``(notebook)`` row where something stopped a
notebook. Each ``check`` run *adds* to the gradebook: its rows replace the rows of the same student and lesson
(a re-graded notebook replaces its old rows, a stale ``(notebook)`` error included), and every other row is
kept, so grading lesson 02, then 03 and 09, keeps all three. ``totals.csv`` is computed from the whole gradebook:
one row per student and lesson (every lesson graded for anyone: a lesson not handed in scores 0 and says so), and
one ``(all lessons)`` row per student (:func:`totals`).

The files are data for a spreadsheet, never formulas:

* a cell that begins with ``= + - @`` (or a tab or carriage return) is a formula to Excel, LibreOffice and
  Google Sheets; such a cell is written with a leading ``'`` (OWASP's rule for CSV injection), and so is one
  that already begins with ``'``, so that reading the gradebook back gives exactly the text graded;
* a control character (newline, tab, escape, a Unicode line separator) in a message is written as a visible
  escape (``\\x1b``), so a line-based reader (``grep``, ``cut``, ``awk``) sees one row per line; student and
  lesson names are not escaped but refused (:func:`name_problem`), before anything runs.

Both files are written atomically (a reader never sees half of one), under a lock on their folder, so two
``check`` runs that finish at the same time both keep their rows.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from helpers.tools.files import write_atomically

__all__ = [
    "ALL_LESSONS",
    "COLUMNS",
    "NOTEBOOK_ROW",
    "TOTALS_COLUMNS",
    "GradebookError",
    "merge",
    "name_problem",
    "read_cell",
    "read_gradebook",
    "safe_cell",
    "table_text",
    "totals",
    "write_gradebook",
]

COLUMNS = ("student", "lesson", "exercise", "verdict", "points", "message")
TOTALS_COLUMNS = ("student", "lesson", "points", "out of", "not graded", "handed in")
NOTEBOOK_ROW = "(notebook)"  # the exercise column of the row that says what stopped a notebook
ALL_LESSONS = "(all lessons)"  # the lesson column of a student's total over every lesson
# Every check is worth one point (course.grading.checker.GradedExercise.points); the gradebook's columns,
# which nbgrader's comparison reads too, hold the points scored, so the points possible come from this rule.
POINTS_PER_CHECK = 1

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_CONTROL_CATEGORIES = {"Cc", "Cf", "Zl", "Zp"}  # controls, format characters (bidi overrides), line separators


class GradebookError(ValueError):
    """A gradebook file that ``check`` did not write (or that was edited): the message names file and line."""


def _is_control(character: str) -> bool:
    return unicodedata.category(character) in _CONTROL_CATEGORIES


def _escape_controls(text: str) -> str:
    return "".join(
        (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") if _is_control(c) else c for c in text
    )


def safe_cell(text: str) -> str:
    """``text`` as a spreadsheet reads it as text: control characters escaped, a formula start quoted."""
    text = str(text)
    quoted = "'" if text.startswith((*_FORMULA_STARTS, "'")) else ""  # OWASP: a leading tab or CR too
    return quoted + _escape_controls(text)


def read_cell(text: str) -> str:
    """The text :func:`safe_cell` was given (control characters stay escaped: they were never kept)."""
    return text[1:] if text.startswith("'") else text


def name_problem(name: str, what: str) -> str | None:
    """Why ``name`` (a student's folder, a lesson's file name) cannot go into the gradebook, or None."""
    bad = sorted({c for c in name if _is_control(c)})
    if not bad:
        return None
    shown = ", ".join(_escape_controls(c) for c in bad)
    return (
        f"the {what} name {name!r} holds control character(s) {shown}: a gradebook row must be one line of "
        f"printable text. Rename the {what} and run check again"
    )


def table_text(rows: Iterable[Sequence[str]], delimiter: str = ",") -> str:
    """Rows as CSV (or TSV) text, every cell made safe: what ``check`` writes to files and to stdout."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    writer.writerows([safe_cell(cell) for cell in row] for row in rows)
    return buffer.getvalue()


def read_gradebook(path: Path) -> list[list[str]]:
    """The rows of a gradebook ``check`` wrote (header left out); none if there is no file yet."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        lines = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise GradebookError(f"{path}: cannot be read as the course's gradebook ({error})") from None
    fix = "move the file away (check then starts a new gradebook) or put back the rows check wrote"
    if not lines or [read_cell(cell) for cell in lines[0]] != list(COLUMNS):
        raise GradebookError(f"{path}: expected the header {','.join(COLUMNS)}; {fix}")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        row = [read_cell(cell) for cell in line]
        if len(row) != len(COLUMNS):
            raise GradebookError(f"{path}, line {number}: expected {len(COLUMNS)} cells, got {len(row)}; {fix}")
        expected_points = ("",) if row[2] == NOTEBOOK_ROW else ("0", str(POINTS_PER_CHECK))
        if row[4] not in expected_points:
            raise GradebookError(
                f"{path}, line {number}: points {row[4]!r}, expected one of {expected_points} for {row[2]!r}; {fix}"
            )
        rows.append(row)
    return rows


def merge(old: Sequence[Sequence[str]], new: Sequence[Sequence[str]]) -> list[list[str]]:
    """``old`` rows with every (student, lesson) that ``new`` grades replaced by ``new``'s rows.

    The result is ordered by student, then lesson; within one notebook the rows keep their order (the lesson's).
    """
    regraded = {(row[0], row[1]) for row in new}
    kept = [list(row) for row in old if (row[0], row[1]) not in regraded] + [list(row) for row in new]
    return sorted(kept, key=lambda row: (row[0], row[1]))  # sorted() is stable: exercise order is kept


def totals(rows: Sequence[Sequence[str]]) -> list[list[str]]:
    """Per student: a row per released lesson (points, out of, not graded, handed in), then one over all lessons.

    The released lessons are every lesson the gradebook holds rows for, and every student is totalled over all of
    them: a lesson a student handed nothing in for scores 0 of its exercises and says ``no`` under "handed in", so
    that "out of" is the same for the whole class. "Not graded" counts the exercises no verdict decided (rows
    ``error``: the check could not run or did not finish), which score 0 until they are graded again; a notebook
    that stopped before any exercise was graded (only its ``(notebook)`` row) counts every exercise of its lesson.
    The ``(all lessons)`` row says how many lessons were handed in, as ``2 of 3``.
    """
    exercises: dict[str, list[str]] = {}  # lesson -> its exercises, as any student's rows name them
    table: dict[str, dict[str, list[int]]] = {}  # student -> lesson -> [points, out of, not graded]
    for student, lesson, exercise, verdict, points, _ in rows:
        known = exercises.setdefault(lesson, [])
        entry = table.setdefault(student, {}).setdefault(lesson, [0, 0, 0])
        if exercise == NOTEBOOK_ROW:
            continue
        if exercise not in known:
            known.append(exercise)
        entry[0] += int(points)
        entry[1] += POINTS_PER_CHECK
        entry[2] += verdict == "error"
    result = []
    for student in sorted(table):
        handed_in = table[student]
        counted = []
        for lesson in sorted(exercises):
            possible = len(exercises[lesson]) * POINTS_PER_CHECK
            counts = handed_in.get(lesson)
            if counts is None:
                counts = [0, possible, 0]
            elif counts[1] == 0:  # stopped before any exercise: none of them was graded
                counts = [0, possible, len(exercises[lesson])]
            counted.append(counts)
            result.append([student, lesson, *map(str, counts), "yes" if lesson in handed_in else "no"])
        overall = [sum(counts[i] for counts in counted) for i in range(3)]
        result.append([student, ALL_LESSONS, *map(str, overall), f"{len(handed_in)} of {len(exercises)}"])
    return result


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (no-op where ``fcntl`` is missing): one read-merge-write at a time."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; two runs finishing at once could lose one's rows
        yield
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def write_gradebook(out_dir: Path, new: Sequence[Sequence[str]]) -> tuple[list[list[str]], list[list[str]]]:
    """Add ``new`` rows to ``out_dir``'s gradebook and rewrite its totals; returns (all rows, totals)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _locked(out_dir):
        rows = merge(read_gradebook(out_dir / "gradebook.csv"), new)
        total_rows = totals(rows)
        write_atomically(out_dir / "gradebook.csv", table_text([COLUMNS, *rows]))
        write_atomically(out_dir / "totals.csv", table_text([TOTALS_COLUMNS, *total_rows]))
    return rows, total_rows
