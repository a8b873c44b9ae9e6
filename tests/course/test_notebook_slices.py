"""course/notebook_slices.py: the names cells bind and use, the learner's names, and the cells a cell needs."""

from __future__ import annotations

import pytest

from course.notebook_slices import (
    UnfollowableCell,
    cell_names,
    learner_name_uses,
    learner_names,
    needed_cells,
    unguarded_names,
)


def test_binds_and_needs_at_top_level_and_inside_functions():
    names = cell_names(
        "import torch.nn as nn\n"
        "from helpers import GPT as Model\n"
        "def f(x, scale=SCALE):\n"
        "    return helper(x) * torch.ones(1)\n"
        "class Block(Base):\n"
        "    width = WIDTH\n"
        "for i in range(3):\n"
        "    total = i\n"
    )
    assert names.binds == {"nn", "Model", "f", "Block", "i", "total"}
    assert {"SCALE", "helper", "torch", "Base", "WIDTH", "range"} <= names.needs
    assert "x" not in names.needs  # a parameter is the function's own


def test_magics_are_translated_before_reading():
    names = cell_names("%matplotlib inline\nimport torch\nx = torch.ones(2)")
    assert names.binds == {"torch", "x"}


@pytest.mark.parametrize(
    "source, expected",
    [
        ("x = (", "not valid Python"),
        ("eval('x + 1')", "calls eval"),
        ("globals()['y'] = 1", "calls globals"),
    ],
)
def test_cells_whose_names_cannot_be_followed_are_refused(source, expected):
    with pytest.raises(UnfollowableCell, match=expected):
        cell_names(source, "cell 3")


def test_a_try_that_catches_not_implemented_error_guards_its_body():
    source = "try:\n    yours = mine(x)\nexcept NotImplementedError:\n    yours = 'not written yet'\nprint(other)"
    assert "mine" not in unguarded_names(source).needs
    assert {"print", "other"} <= unguarded_names(source).needs
    bare = "try:\n    yours = mine(x)\nexcept:\n    pass"  # hides every error: no guard
    assert "mine" in unguarded_names(bare).needs


def test_learner_names_follow_the_function_through_its_own_cell():
    source = "def f(x):\n    raise NotImplementedError()\nout = f(2)\nsize = 3\nboth = out + size"
    assert learner_names(source, ["f"]) == {"f", "out", "both"}
    assert learner_names(source, [None]) == {"f", "out", "size", "both"}  # a top-level region: all of it


EXERCISE = "def f(x):\n    raise NotImplementedError()"


def _uses(*cells, exercises=None, checks=frozenset({1}), dropped=None):
    return learner_name_uses(list(cells), exercises or {0: ["f"]}, set(checks), dropped)


def test_a_later_cell_that_uses_the_learners_function_is_found():
    problems = _uses(EXERCISE, "check_f(f)", "y = f(3)")
    assert problems == [
        "cell 2 uses `f`, which the learner writes in cell 0: "
        "a later cell must use the reference code in helpers/, not the exercise's function"
    ]


def test_a_function_that_calls_the_learners_function_is_found_where_it_is_defined():
    problems = _uses(EXERCISE, "check_f(f)", "def g(x):\n    return f(x) + 1", None, "g(2)")
    assert len(problems) == 1 and problems[0].startswith("cell 2 uses `f`")


@pytest.mark.parametrize(
    "later",
    [
        "from helpers import f\ny = f(3)",  # rebound to the reference first
        "try:\n    y = f(3)\nexcept NotImplementedError:\n    y = None",  # tried, and the stub expected
        "y = helpers.reference_f(3)",
    ],
    ids=["rebound", "guarded", "reference"],
)
def test_later_cells_that_do_not_depend_on_the_learner_are_fine(later):
    assert _uses(EXERCISE, "check_f(f)", later, "z = f(4)" if later.startswith("from") else "z = 1") == []


def test_a_check_cell_may_call_the_learners_function():
    assert _uses(EXERCISE, "check_f(f)\nprint(f)", "z = 1") == []
    assert _uses(EXERCISE, "z = 1", "check_f(f)", checks={2}) == []


def test_a_name_only_a_solution_only_cell_defined_is_found():
    problems = _uses(EXERCISE, "check_f(f)", "print(answer)", dropped={2: "answer = f(3)"})
    assert problems == ["cell 2 uses `answer`, which only a solution-only cell defines (gone in copies)"]
    assert _uses(EXERCISE, "check_f(f)", "answer = 4", "print(answer)", dropped={2: "answer = f(3)"}) == []


def test_needed_cells_are_the_binders_of_what_the_targets_use_transitively():
    cells = [
        "%matplotlib inline\nimport torch",  # 0: set-up, always
        "import math",  # 1: needed by cell 3's default
        "model = train(steps=10_000)",  # 2: the heavy cell nobody below needs
        "N = math.floor(2.5)",  # 3: needed by the exercise
        None,  # 4: markdown
        "def f(x, n=N):\n    raise NotImplementedError()",  # 5: the exercise
        "check_f(f)",  # 6: its check
        "print(model)",  # 7
    ]
    assert needed_cells(cells, targets={5, 6}, always={0}) == [0, 1, 3, 5, 6]
    assert 2 in needed_cells(cells, targets={7}, always={0})
