"""course/lessons.py, the one list of lessons: each entry's numbers agree with what was measured and what its
lesson does, and the places that used to list lessons by hand read it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import nbformat
import pytest

from course import lessons
from course.lessons import LESSONS, Lesson

ROOT = Path(__file__).resolve().parents[1]
MEASURED = json.loads((ROOT / "benchmarks" / "guide_numbers.json").read_text())["lessons"]
GRADING_MARGIN = 3  # a grader runs each notebook on one thread beside others: three times the quiet slowest cell
QUIET = 2  # load average: on the 2-core machine anything above means the lesson shared its cores
BY_FILE = {lesson.file: lesson for lesson in LESSONS}


def _measured(lesson: Lesson) -> dict:
    measured = MEASURED.get(lesson.stem)
    assert measured, f"benchmarks/guide_numbers.py --lessons {lesson.number} (CONTRIBUTING.md, step 7)"
    return measured


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.number)
def test_the_grading_timeout_leaves_room_for_the_slowest_cell_and_no_more(lesson):
    measured = _measured(lesson)
    if "slowest_cell_s" not in measured:
        pytest.skip(f"lesson {lesson.number}'s slowest cell is not measured yet")
    slowest = measured["slowest_cell_s"]
    low = max(lessons.DEFAULT_GRADING_TIMEOUT_S, GRADING_MARGIN * slowest)
    high = max(lessons.DEFAULT_GRADING_TIMEOUT_S, 5 * slowest)
    suggestion = 30 * math.ceil(low / 30)
    assert low <= lesson.grading_timeout_s <= high, (
        f"lesson {lesson.number}'s slowest cell took {slowest} s (load {measured['load_1min']}): give its entry "
        f"grading_timeout_s={suggestion} (from {low:.0f} to {high:.0f} s)"
    )


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.number)
def test_the_ci_budget_is_above_the_quiet_machines_time(lesson):
    measured = _measured(lesson)
    if measured["load_1min"] >= QUIET:
        pytest.skip(f"measured at load {measured['load_1min']}: its time says nothing about the budget")
    assert measured["wall_s"] <= lesson.budget_s * 1.1, (
        f"lesson {lesson.number} ran {measured['wall_s']} s on a quiet machine: raise its entry's budget_s"
    )


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.number)
def test_needs_names_the_models_the_lesson_loads_and_the_browser_tests_that_drive_it(lesson):
    source = "\n".join(cell.source for cell in nbformat.read(ROOT / lesson.path, as_version=4).cells)
    browser = (ROOT / "tests" / "test_browser.py").read_text(encoding="utf-8")
    loads = {
        "smollm2": re.search(r"load_pretrained_lm\((?!\"gemma-3-270m\")", source) is not None,  # the default model
        "gemma": 'load_pretrained_lm("gemma-3-270m")' in source,
        "minilm": "load_pretrained_encoder(" in source,
        "chromium": f'"{lesson.file}"' in browser,  # test_browser.py names each lesson it opens by its file
        "triton": "import triton" in source,  # Triton's interpreter runs the lesson's kernels (Linux only)
    }
    assert {need for need, used in loads.items() if used} == set(lesson.needs), lesson


@pytest.mark.parametrize("lesson", [lesson for lesson in LESSONS if lesson.seed_variable], ids=lambda x: x.number)
def test_a_seed_variable_is_read_by_its_lesson(lesson):
    source = "\n".join(cell.source for cell in nbformat.read(ROOT / lesson.path, as_version=4).cells)
    assert f'os.environ.get("{lesson.seed_variable}"' in source, (
        f'{lesson.file} never reads {lesson.seed_variable}: SEED = int(os.environ.get("{lesson.seed_variable}", '
        '"0")) in its first code cell'
    )


def test_the_exported_checks_are_those_of_the_lessons_that_say_so():
    import course.exercises

    exported = {name for name in course.exercises.__all__ if name.startswith("check_")}
    modules = {getattr(course.exercises, name).__module__ for name in exported}
    assert modules == {f"course.exercises.lesson{lesson.number}" for lesson in LESSONS if lesson.exports_checks}
    assert {"check_stack_qkv", "check_induction_score", "check_cache_bytes", "check_logit_lens"} <= exported


def test_the_ci_budgets_and_the_test_order_are_read_from_the_registry():
    import importlib.util

    from conftest import SLOWEST_FIRST

    spec = importlib.util.spec_from_file_location("notebook_times", ROOT / "benchmarks" / "notebook_times.py")
    notebook_times = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(notebook_times)
    assert {lesson.number: lesson.budget_s for lesson in LESSONS} == notebook_times.BUDGET_S
    slow = [path for path in SLOWEST_FIRST if path.startswith("notebooks/")]
    assert slow == [lesson.path for lesson in sorted(LESSONS, key=lambda x: -(x.test_s or 0)) if lesson.test_s]


def test_a_lesson_whose_models_package_is_missing_is_told_what_to_install(monkeypatch):
    import importlib.util

    lesson = lessons.by_number()["13"]
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name in lessons.NEED_PACKAGES.values() else real(name)
    )
    assert lessons.missing_needs(lesson) == [lessons.NEEDS["gemma"]]
    assert lessons.missing_needs(lessons.by_number()["12"]) == []  # SmolLM2 has no package test: it is always set up
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert lessons.missing_needs(lesson) == []


def test_a_grading_timeout_is_found_by_the_names_a_grader_sees():
    lesson = LESSONS[5]
    assert lessons.grading_timeout(lesson.file) == lessons.grading_timeout(lesson.stem) == lesson.grading_timeout_s
    assert lessons.grading_timeout("99_not_a_lesson.ipynb") == lessons.UNKNOWN_LESSON_TIMEOUT_S
    assert lessons.by_number()[lesson.number] is lesson


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"file": "6_translation.ipynb"}, "NN_words.ipynb"),
        ({"file": "06-Translation.ipynb"}, "NN_words.ipynb"),
        ({"needs": ("gpu",)}, "unknown needs ['gpu']"),
        ({"grading_timeout_s": 0}, "positive whole seconds"),
    ],
)
def test_a_wrong_entry_is_refused_saying_what_is_expected(fields, problem):
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        Lesson(**{"file": "13_words.ipynb", "title": "words", **fields})
