"""nbgrader's side of the course: the configuration template and a guard against mixing the two hand-out routes.

A notebook handed out with ``make release`` carries no nbgrader cell metadata, so nbgrader cannot tell its
answer cells from its tests and would score it 0 ("needs manual grade") without a word. The template's
configuration puts :class:`RefuseReleaseCopies` first in autograde's chain: such a notebook is refused, with a
message that says which route grades it (``python -m course.assignments check``). Its autograde runs each lesson's
cells under that lesson's grading timeout (:class:`LessonTimeoutExecute`), as ``check`` does.
"""

from __future__ import annotations

from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from course.lessons import grading_timeout

__all__ = [
    "CONFIG_TEMPLATE",
    "RefuseReleaseCopies",
    "ReleaseCopyError",
    "autograde_preprocessors",
    "lesson_timeout_execute",
    "write_config",
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
    """nbgrader's ``Execute`` whose cell timeout is the lesson's (``course.lessons.grading_timeout`` of the notebook
    being graded, nbgrader's notebook id), unless the configuration sets ``ExecutePreprocessor.timeout``."""

    class LessonTimeoutExecute(_execute()):
        def preprocess(self, nb, resources=None, km=None):
            if not _configured(self, "timeout"):
                self.timeout = grading_timeout((resources or {}).get("nbgrader", {}).get("notebook", ""))
            return super().preprocess(nb, resources, km)

    return LessonTimeoutExecute


def autograde_preprocessors() -> list:
    """nbgrader's own autograde chain with its ``Execute`` replaced by :func:`lesson_timeout_execute`'s."""
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
