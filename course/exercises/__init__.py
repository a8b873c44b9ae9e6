"""Checks for the lessons' exercises, one module per lesson.

Every check takes the learner's answer (usually a function), runs it on small inputs, and prints
one clear verdict: a pass, a specific hint naming the likely mistake, or "not attempted yet" when
the answer still raises ``NotImplementedError`` (as it does in a student copy).
Each check also returns a ``Verdict`` so tests and graders can read the result; in a notebook the
returned verdict does not show a second time, so a check cell is just ``check_x(x)``. Checks run in
``torch.random.fork_rng()`` and never move the notebook's random numbers (see ``feedback.py``).

The checks of the lessons whose registry entry says ``exports_checks`` (course/lessons.py: lessons 08 and 10-12)
are importable from the package as well as from their module: ``from course.exercises import check_stack_qkv``.
"""

import importlib

from course.exercises.feedback import Verdict
from course.lessons import LESSONS

__all__ = ["Verdict"]


def _export_checks(module_name: str) -> list[str]:
    """Put every ``check_*`` that ``module_name`` defines into this package's namespace; their names."""
    module = importlib.import_module(f"course.exercises.{module_name}")
    names = sorted(
        name
        for name, value in vars(module).items()
        if name.startswith("check_") and getattr(value, "__module__", "") == module.__name__
    )
    taken = sorted(set(names) & set(globals()))
    if taken:
        raise ImportError(f"course.exercises.{module_name} defines {taken}, which another lesson exports already")
    globals().update({name: getattr(module, name) for name in names})
    return names


for _lesson in LESSONS:
    if _lesson.exports_checks:
        __all__ += _export_checks(f"lesson{_lesson.number}")
