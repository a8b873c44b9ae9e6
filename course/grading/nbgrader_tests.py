"""nbgrader's test cells that call the course's checks, graded outside the kernel: what the kernel runs in their
place, and the outputs nbgrader scores.

``python -m course.assignments nbgrader`` writes each exercise's test cell as::

    from course.exercises.lesson04 import check_split_heads, check_merge_heads
    from course.grading import graded  # refuses a check that is not the course's own

    _verdict_1 = graded(check_split_heads, "split_heads")
    _verdict_2 = graded(check_merge_heads, "merge_heads")
    assert all(verdict.passed for verdict in (_verdict_1, _verdict_2)), "a check above did not pass: read its verdict"

A student's own kernel runs it as it reads. Under ``nbgrader autograde`` the course's ``Execute``
(:class:`course.grading.nbgrader_kernel.SandboxedExecute`) finds such a cell with :func:`course_check_cell`: a
locked test cell (nbgrader's ``grade`` metadata) whose top-level statements call ``graded(check_x, "function")``
with a ``check_x`` the cell imports from ``course.exercises``. The kernel runs :attr:`CheckCell.kernel_source`
instead: each of those statements becomes ``answer_the_checker("function")`` (the kernel only answers the check,
which runs in nbgrader's process), the statements that read a verdict (the last ``assert``) are left out, and the
cell's other lines (a teacher's own) run as they are. Then :func:`verdict_outputs` writes the cell's outputs: the
verdicts' lines, the kernel's own errors, and an error when a check did not pass, so that nbgrader's score (0 for a
cell with an error output, its points otherwise) is the verdicts'. Any other cell runs in the kernel unchanged.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from nbformat import NotebookNode, v4

from course.grading.exam import exam_entry
from course.grading.remote_cells import verdict_text

__all__ = ["NOT_PASSED", "CheckCell", "course_check_cell", "verdict_outputs"]

#: The error nbgrader finds in a test cell whose checks did not all pass (the reason it scores the cell 0).
NOT_PASSED = "a check above did not pass: read its verdict"
_ANSWER = "from course.grading.learner_side import answer_the_checker  # the check runs in nbgrader's process"


@dataclass(frozen=True)
class CheckCell:
    """A test cell's course checks, ((module, check, learner's function), in order), and what the kernel runs."""

    checks: tuple[tuple[str, str, str], ...]
    kernel_source: str


def _is_test_cell(cell: NotebookNode) -> bool:
    nbgrader = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(nbgrader.get("grade")) and not nbgrader.get("solution")


def _imported_checks(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """The cell's ``check_...`` names imported from course.exercises (name -> module), and its names for
    ``course.grading.graded``."""
    checks, graded = {}, set()
    for statement in tree.body:
        if not isinstance(statement, ast.ImportFrom) or statement.level or not statement.module:
            continue
        for alias in statement.names:
            if statement.module.startswith("course.exercises.") and alias.name.startswith("check_"):
                checks[alias.asname or alias.name] = statement.module
            elif statement.module == "course.grading" and alias.name == "graded":
                graded.add(alias.asname or alias.name)
    return checks, graded


def _graded_call(statement: ast.stmt, checks: dict[str, str], graded: set[str]) -> tuple[str, str, str] | None:
    """(module, check, function) of ``graded(check_x, "function")`` as a whole statement, assigned to one name,
    or asserted (``assert graded(...).passed``); None for any other statement."""
    if isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Attribute):
        call = statement.test.value
    elif isinstance(statement, ast.Expr) or (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        call = statement.value
    else:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in graded):
        return None
    if call.keywords or len(call.args) != 2:
        return None
    check, function = call.args
    if not (isinstance(check, ast.Name) and check.id in checks):
        return None
    if not (isinstance(function, ast.Constant) and isinstance(function.value, str) and function.value.isidentifier()):
        return None
    return checks[check.id], check.id, function.value


def _names_read(statement: ast.stmt) -> set[str]:
    return {node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def course_check_cell(cell: NotebookNode) -> CheckCell | None:
    """The course's checks a test cell calls through ``graded`` and the source its kernel runs (see above); None
    for a cell that is not a test cell, is not plain Python, or calls no course check that way."""
    if not _is_test_cell(cell):
        return None
    source = cell.get("source", "")
    try:
        tree = ast.parse(source)
    except SyntaxError:  # magics, or the teacher's typo: the kernel says what is wrong, as before
        return None
    imported, graded = _imported_checks(tree)
    lines = source.split("\n")
    checks: list[tuple[str, str, str]] = []
    verdict_names: set[str] = set()
    replaced: list[tuple[int, int, list[str]]] = []  # (first line, last line, what the kernel runs there)
    for statement in tree.body:
        found = _graded_call(statement, imported, graded)
        if found is not None:
            checks.append(found)
            if isinstance(statement, ast.Assign):
                verdict_names.update(n.id for n in ast.walk(statement.targets[0]) if isinstance(n, ast.Name))
            replaced.append((statement.lineno, _last_line(statement), [f'answer_the_checker("{found[2]}")']))
        elif _names_read(statement) & verdict_names:  # "the checks passed": the verdicts here say it
            replaced.append((statement.lineno, _last_line(statement), []))
    if not checks:
        return None
    for first, last, text in reversed(replaced):
        lines[first - 1 : last] = text
    return CheckCell(tuple(checks), "\n".join([_ANSWER, *lines]))


def _last_line(statement: ast.stmt) -> int:
    return statement.end_lineno if statement.end_lineno is not None else statement.lineno


def verdict_outputs(
    checks: Sequence[tuple[str, str, str]],
    entries: Sequence[dict[str, str]],
    kernel_outputs: Sequence[NotebookNode],
    exam: bool = False,
) -> list[NotebookNode]:
    """A test cell's outputs from its checks' verdicts (``entries``, in the order of ``checks``; a check without
    one was not graded: its cell ended first): each verdict's line, then the errors the kernel raised in the cell
    (they only lower its score), then an ``AssertionError`` unless every check passed. Nothing else the kernel
    sent is kept: what the learner's code printed or displayed there (a forged verdict, a number nbgrader would
    read as partial credit) scores nothing. With ``exam`` (a test cell written by ``nbgrader --hide-checks``) each
    verdict's line is the verdict alone (:func:`course.grading.exam.exam_entry`): no hint reaches the feedback."""
    kept = [exam_entry(entry) for entry in entries] if exam else list(entries)
    for _, _, function in checks[len(kept) :]:
        message = "not graded: its cell ended before the check finished (it timed out, or the kernel stopped)"
        kept.append({"function": function, "status": "error", "message": message})
    text = "".join(f"{verdict_text(entry)}\n" for entry in kept)
    outputs = [v4.new_output("stream", name="stdout", text=text)]
    outputs += [output for output in kernel_outputs if output.get("output_type") == "error"]
    if not all(entry.get("status") == "pass" for entry in kept):
        traceback = [f"AssertionError: {NOT_PASSED}"]
        outputs.append(v4.new_output("error", ename="AssertionError", evalue=NOT_PASSED, traceback=traceback))
    return outputs
