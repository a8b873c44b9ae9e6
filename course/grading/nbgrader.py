"""nbgrader's side of the course: the configuration template, a guard against mixing the two hand-out routes, and
per-student totals from nbgrader's gradebook.

A notebook handed out with ``make release`` carries no nbgrader cell metadata, so nbgrader cannot tell its
answer cells from its tests and would score it 0 ("needs manual grade") without a word. The template's
configuration puts :class:`RefuseReleaseCopies` first in autograde's chain: such a notebook is refused, with a
message that says which route grades it (``python -m course.assignments check``). Its autograde runs each lesson's
cells under that lesson's grading timeout (:class:`LessonTimeoutExecute`), as ``check`` does.

``check`` writes ``totals.csv`` beside its gradebook (:mod:`course.grading.gradebook`); :func:`nbgrader_totals`
gives the nbgrader route the same table, read from nbgrader's ``gradebook.db`` after ``nbgrader autograde``: a row
per student and lesson (an nbgrader assignment) with the points scored, the points possible and the cells not
graded, then an ``(all lessons)`` row per student. nbgrader's points are its own (a cell's max score, 1 per check
unless the teacher changed it), and "not graded" counts the cells nbgrader left for a manual grade.
"""

from __future__ import annotations

from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from course.grading.gradebook import ALL_LESSONS, TOTALS_COLUMNS, table_text
from course.lessons import grading_timeout
from helpers.tools.files import write_atomically

__all__ = [
    "CONFIG_TEMPLATE",
    "RefuseReleaseCopies",
    "ReleaseCopyError",
    "autograde_preprocessors",
    "lesson_timeout_execute",
    "nbgrader_totals",
    "write_config",
    "write_nbgrader_totals",
]

CONFIG_TEMPLATE = Path(__file__).with_name("nbgrader_config.template")


class ReleaseCopyError(ValueError):
    """A notebook without nbgrader's cell metadata: a ``make release`` copy, not an nbgrader release."""


class RefuseReleaseCopies(Preprocessor):
    """Refuse a submitted notebook in which no cell carries nbgrader metadata (a ``make release`` copy)."""

    enabled = Bool(True)  # nbconvert runs a preprocessor only when it is enabled

    def preprocess(self, nb, resources):
        if not any("nbgrader" in cell.get("metadata", {}) for cell in nb.cells):
            raise ReleaseCopyError(
                "this notebook has no nbgrader cell metadata: it is a `make release` student copy, which nbgrader "
                "cannot grade (every cell would score 0). Grade it with `python -m course.assignments check`, or "
                "hand out nbgrader's own release (`nbgrader generate_assignment`) next time."
            )
        return nb, resources


def _execute():
    from nbgrader.preprocessors import Execute  # nbgrader is the grading extra's: imported only where it runs

    return Execute


def _configured(preprocessor, trait: str) -> bool:
    """Whether the configuration names ``trait`` for ``preprocessor``'s class or a class it inherits from."""
    return any(trait in preprocessor.config.get(cls.__name__, {}) for cls in type(preprocessor).mro())


def lesson_timeout_execute():
    """nbgrader's ``Execute`` in the course's sandbox (``nbgrader_kernel.SandboxedExecute``) whose cell timeout is
    the lesson's (``course.lessons.grading_timeout`` of the notebook being graded, nbgrader's notebook id), unless
    the configuration sets ``ExecutePreprocessor.timeout``."""
    from course.grading.nbgrader_kernel import SandboxedExecute  # imports nbgrader: only where it runs

    class LessonTimeoutExecute(SandboxedExecute):
        def preprocess(self, nb, resources=None, km=None):
            if not _configured(self, "timeout"):
                self.timeout = grading_timeout((resources or {}).get("nbgrader", {}).get("notebook", ""))
            return super().preprocess(nb, resources, km)

    return LessonTimeoutExecute


def autograde_preprocessors() -> list:
    """nbgrader's own autograde chain with its ``Execute`` replaced by :func:`lesson_timeout_execute`'s: students'
    code runs in the course's sandbox, each cell under its lesson's timeout."""
    from nbgrader.converters import Autograde

    execute, ours = _execute(), lesson_timeout_execute()
    return [ours if step is execute else step for step in Autograde.class_traits()["autograde_preprocessors"].default()]


def write_config(course_root: Path) -> Path | None:
    """Write the template as ``course_root/nbgrader_config.py`` unless one is there; the path, or None."""
    target = Path(course_root) / "nbgrader_config.py"
    if target.exists():
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(CONFIG_TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    return target


def nbgrader_totals(database: Path) -> list[list[str]]:
    """Per student, from nbgrader's gradebook ``database`` (its ``gradebook.db``): a row per lesson graded
    (student, lesson, points, out of, not graded; ``TOTALS_COLUMNS``, as ``check``'s totals.csv), then one
    ``(all lessons)`` row. A lesson a student handed nothing in for has no row, as in ``check``'s totals."""
    database = Path(database)
    if not database.is_file():  # nbgrader's Gradebook would create an empty database there
        raise FileNotFoundError(
            f"no nbgrader gradebook at {database}: expected the gradebook.db that `nbgrader autograde` fills, in the "
            "nbgrader course folder (classroom/)"
        )
    try:
        from nbgrader.api import Gradebook, MissingEntry
    except ImportError:
        raise ImportError("reading nbgrader's gradebook needs nbgrader: pip install -e '.[grading]'") from None
    table: dict[str, dict[str, list[float]]] = {}
    with Gradebook(f"sqlite:///{database}") as gradebook:
        for assignment in gradebook.assignments:
            for student in gradebook.students:
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:
                    continue
                entry = table.setdefault(student.id, {}).setdefault(assignment.name, [0.0, 0.0, 0])
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        entry[0] += grade.score or 0.0
                        entry[1] += grade.max_score or 0.0
                        entry[2] += bool(grade.needs_manual_grade)
    rows = []
    for student in sorted(table):
        for lesson, counts in sorted(table[student].items()):
            rows.append([student, lesson, *_numbers(counts)])
        overall = [sum(counts[i] for counts in table[student].values()) for i in range(3)]
        rows.append([student, ALL_LESSONS, *_numbers(overall)])
    return rows


def _numbers(counts: list[float]) -> list[str]:
    """Points as nbgrader keeps them (floats) written as check writes them: 3, not 3.0; 1.5 stays 1.5."""
    return [f"{value:g}" for value in counts]


def write_nbgrader_totals(database: Path, out: Path | None = None) -> Path:
    """Write :func:`nbgrader_totals` as a CSV file (atomically) at ``out``, by default ``totals.csv`` beside the
    database (in nbgrader's course folder, apart from ``check``'s grades/); returns its path."""
    rows = nbgrader_totals(database)
    target = Path(out) if out is not None else Path(database).with_name("totals.csv")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, table_text([TOTALS_COLUMNS, *rows]))
    return target
