"""What a graded kernel finds at ``course.exercises``: no check and no reference answer.

Under ``python -m course.assignments check``, and under ``nbgrader autograde`` with the course's configuration, the
sandbox shows this folder in place of ``course/exercises``: the checks, and the ``reference_*`` answers beside them,
run in the checker's (or nbgrader's) process (:mod:`course.grading.remote`), out of the kernel's reach. A
lesson's first cell still imports its checks (``from course.exercises.lesson03 import check_attention_weights``),
so every ``course.exercises.<module>`` imports, and each ``check_...`` name in it is a stand-in that says the
checker grades; any other name (``reference_...``, ``Verdict``) is not there.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

GRADED_ELSEWHERE = "(graded by the course's checker, outside this kernel: the verdict is in the gradebook)"


def _stand_in_check(name: str):
    def check(*args, **kwargs) -> None:
        print(f"{name}: {GRADED_ELSEWHERE}")

    check.__name__ = check.__qualname__ = name
    return check


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("check_"):
            return _stand_in_check(name)
        raise AttributeError(f"{self.__name__}.{name} is not in a graded kernel (the checks run outside it)")


def __getattr__(name: str):
    if name.startswith("check_"):
        return _stand_in_check(name)
    raise AttributeError(f"course.exercises.{name} is not in a graded kernel (the checks run outside it)")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds every ``course.exercises.<module>`` as a stand-in module."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(__name__ + "."):
            return None
        # `from course.exercises.lesson11 import reference_x` looks for a submodule of that name once the
        # attribute is missing: refuse it here, or the learner would be handed a stand-in module to call.
        if fullname.rpartition(".")[2].startswith("reference_"):
            raise ImportError(
                f"{fullname} is not in a graded kernel: no reference answer is (the checks run outside it)"
            )
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return _StandInModule(spec.name)

    def exec_module(self, module) -> None:
        module.__path__ = []  # a package too, so that deeper names import alike


if not any(isinstance(finder, _StandInFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _StandInFinder())
