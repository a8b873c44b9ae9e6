"""No check's message gives the exercise's answer away (issue 38): a hint names the mistake and the idea, never
the line of code. "nn.Linear computes `x @ weight.T + bias`" was lesson 02's whole answer.

Every string a lesson's check module can show (each message table and every literal in its checks; docstrings
are not shown) is held against the reference solutions of its lesson (the notebook's ``# BEGIN SOLUTION`` regions):
none may contain a solution statement, or an expression of two operations or more, of at least
``solution_text.MIN_CHARS`` characters once whitespace is removed. The rule itself: tests/solution_text.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from solution_text import MIN_CHARS, giveaways, lesson_notebook, squeeze

EXERCISES = Path(__file__).resolve().parents[2] / "course" / "exercises"
# Lessons 09 and 10's check modules are rewritten to the same rule on the branch `lessons0910`; until it is merged,
# their hints still hold solution code (strict: the test says so as soon as they stop).
LESSONS = sorted(
    path.name[:2] for path in (Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb")
)


def shown_strings(module: Path) -> list[str]:
    """Every string literal of ``module`` a learner can be shown: all but the docstrings (f-strings' parts too)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_rule_finds_a_solution_written_into_a_hint():
    solutions = giveaways(lesson_notebook("02"))
    assert "x@weight.T+bias" in solutions  # lesson 02's answer, `return x @ weight.T + bias`
    idea = squeeze("use nn.Linear's convention: the weight is stored (E_out, E_in)")
    assert not any(text in idea for text in solutions)
    assert all(len(text) >= MIN_CHARS for text in solutions)
    assert "~key_padding_mask[:,None,:]" in giveaways(lesson_notebook("03"))  # an expression inside a longer line


@pytest.mark.parametrize("number", LESSONS)
def test_no_message_of_a_lesson_holds_its_solution(number):
    solutions = giveaways(lesson_notebook(number))
    assert solutions, f"lesson {number} has no solution text to hold its hints against"
    leaks = [
        (solution, message[:100])
        for message in shown_strings(EXERCISES / f"lesson{number}.py")
        for solution in solutions
        if solution in squeeze(message)
    ]
    assert not leaks, f"lesson {number}'s messages write out its solution (name the idea instead): {leaks}"
