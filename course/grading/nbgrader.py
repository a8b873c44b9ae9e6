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
unless the teacher changed it). The two tables mean the same by each column: every released lesson (every
assignment in the gradebook) is counted for every student, one not handed in as 0 of its points with ``no`` under
"handed in", and "not graded" counts the exercises no verdict decided: a check whose verdict is ``[ERROR]`` in the
autograded notebook (it could not run or did not finish; ``check``'s ``error`` rows), and a cell nbgrader left for
a manual grade.
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
    """Per student, from nbgrader's gradebook ``database`` (its ``gradebook.db``): a row per released lesson
    (student, lesson, points, out of, not graded, handed in; ``TOTALS_COLUMNS``, as ``check``'s totals.csv), then
    one ``(all lessons)`` row. A lesson a student handed nothing in for scores 0 of its points and says ``no``;
    "not graded" is read from the autograded notebooks beside the database (:func:`_errored_checks`)."""
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
    rows = []
    with Gradebook(f"sqlite:///{database}") as gradebook:
        assignments = sorted(gradebook.assignments, key=lambda assignment: assignment.name)
        for student in sorted(gradebook.students, key=lambda student: student.id):
            counted, handed_in = [], 0
            for assignment in assignments:
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:
                    counts = [0.0, float(assignment.max_score or 0.0), 0]
                    rows.append([student.id, assignment.name, *_numbers(counts), "no"])
                    counted.append(counts)
                    continue
                handed_in += 1
                counts = [0.0, 0.0, 0]
                for notebook in submission.notebooks:
                    errored = _errored_checks(database.parent, student.id, assignment.name, notebook.name)
                    for grade in notebook.grades:
                        counts[0] += grade.score or 0.0
                        counts[1] += grade.max_score or 0.0
                        counts[2] += 1 if grade.needs_manual_grade else errored.get(grade.name, 0)
                rows.append([student.id, assignment.name, *_numbers(counts), "yes"])
                counted.append(counts)
            overall = [sum(counts[i] for counts in counted) for i in range(3)]
            rows.append([student.id, ALL_LESSONS, *_numbers(overall), f"{handed_in} of {len(assignments)}"])
    return rows


def _errored_checks(course_root: Path, student: str, assignment: str, notebook: str) -> dict[str, int]:
    """grade id -> how many of the test cell's checks could not be graded: the ``[ERROR]`` verdict lines that
    :func:`course.grading.nbgrader_tests.verdict_outputs` wrote into the autograded notebook (nbgrader's default
    folder, ``autograded/<student>/<assignment>/``). Nothing where that notebook is not there."""
    path = course_root / "autograded" / student / assignment / f"{notebook}.ipynb"
    if not path.is_file():
        return {}
    import nbformat

    errored: dict[str, int] = {}
    for cell in nbformat.read(path, as_version=4).cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.get("cell_type") != "code" or not grade_id:
            continue
        text = "".join(output.get("text", "") for output in cell.get("outputs", []) if output.get("name") == "stdout")
        errors = sum(line.startswith("[ERROR] ") for line in text.splitlines())
        if errors:
            errored[grade_id] = errors
    return errored


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
