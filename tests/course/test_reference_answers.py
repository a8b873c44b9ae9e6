"""An answer that just calls the course's reference answer (``reference_*`` in course.exercises) gets a friendly NOT YET
that says so, in every lesson that has one; the same computation written as the learner's own code passes (#48).

Under the checker the references are not even within the graded kernel's reach (tests/course/test_remote_verdicts.py).
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from conftest import learners_copy

import course.exercises

PAIRS = [
    (module.name, name)
    for module in pkgutil.iter_modules(course.exercises.__path__)
    if module.name.startswith("lesson")
    for name in vars(importlib.import_module(f"course.exercises.{module.name}"))
    if name.startswith("reference_")
    and hasattr(importlib.import_module(f"course.exercises.{module.name}"), name.replace("reference_", "check_", 1))
]
# References that are the one library call the exercise forbids (the check compares with the library itself).
WRITTEN_WITH_A_SHORTCUT = {"reference_multi_head_attention"}


def test_every_lesson_with_references_is_covered():
    expected = {f"lesson{number}" for number in ("06", "08", "10", "11", "12", "13")}
    assert {lesson for lesson, _ in PAIRS} >= expected, PAIRS


@pytest.mark.parametrize("lesson,reference", PAIRS)
def test_calling_the_reference_is_not_yet_and_writing_it_passes(lesson, reference, capsys):
    module = importlib.import_module(f"course.exercises.{lesson}")
    check, answer = getattr(module, reference.replace("reference_", "check_", 1)), getattr(module, reference)

    def calls_the_reference(*args, **kwargs):
        return answer(*args, **kwargs)

    calls_the_reference.__signature__ = __import__("inspect").signature(answer)
    for submitted in (answer, calls_the_reference):
        verdict = check(submitted)
        assert verdict.status == "wrong" and f"`{reference}`" in verdict.message, verdict
        assert "course's own answer" in verdict.message, verdict
    copied = check(learners_copy(answer))
    if reference in WRITTEN_WITH_A_SHORTCUT:  # its copy is refused by lessons 01-05's rule instead
        # (lesson 04's computes in float64 what the check feeds in float32: call_learner names that first)
        assert copied.status == "wrong", copied
        assert "your code calls" in copied.message or "dtype changed" in copied.message, copied
    else:
        assert copied.passed, copied
