"""Exam mode (issue 63, item 6): ``--hide-checks`` gives the verdict and nothing else, on every route.

For homework a hint names the mistake and a fallback hint may print the expected value; in an exam that coaches the
student. The unit tests take a hint that holds an expected value and follow it through each route's own code: the
message of a ``check`` row, the verdict lines nbgrader scores and shows in the feedback page, and the test cells
``nbgrader --hide-checks`` writes. The integration tests grade a wrong answer for real (``check --hide-checks`` and
the course's nbgrader ``Execute`` on an exam cell): the verdict and the points stay, the hint is gone.
"""

from __future__ import annotations

import csv

import nbformat
import pytest
from nbformat import v4

from course import assignments
from course.assignments import NOTEBOOKS_DIR, nbgrader_source
from course.grading import sandbox
from course.grading.exam import EXAM_MESSAGES, exam_entry, exam_message, is_exam_cell
from course.grading.nbgrader_tests import course_check_cell, verdict_outputs
from course.solution_notebooks import read_notebook

nbgrader_utils = pytest.importorskip("nbgrader.utils", reason="nbgrader is the optional extra 'grading'")

KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
IMPORT = "from course.exercises.lesson02 import check_linear_projection"
RIGHT = "def linear_projection(x, weight, bias):\n    return x @ weight.T + bias"
WRONG = "def linear_projection(x, weight, bias):\n    return x @ weight + bias"
CHECK = "check_linear_projection(linear_projection)"
HINT = "the weight is not transposed: expected tensor([[3.0, 7.0]])"  # a hint and an expected value
CHECKS = (("course.exercises.lesson02", "check_linear_projection", "linear_projection"),)


def entry(status: str, message: str = HINT) -> dict[str, str]:
    mark = {"pass": "PASS", "wrong": "NOT YET", "not attempted": "NOT ATTEMPTED"}[status]
    return {"function": "linear_projection", "status": status, "message": message, "text": f"[{mark}] x: {message}"}


@pytest.mark.parametrize("status", ["pass", "wrong", "not attempted"])
def test_a_verdict_in_exam_mode_keeps_the_verdict_and_drops_the_message(status):
    shown = exam_entry(entry(status))
    assert shown["status"] == status and HINT not in shown["text"] and HINT not in shown["message"]
    assert shown["message"] == EXAM_MESSAGES[status] == exam_message(status, HINT)


def test_an_error_keeps_its_reason_which_the_teacher_needs_to_grade_again():
    error = {"function": "linear_projection", "status": "error", "message": "its check timed out after 60 s"}
    assert exam_entry(error) == error and exam_message("error", error["message"]) == error["message"]


def _graded_cell(entries: list[dict], exam: bool) -> tuple[float, str]:
    """nbgrader's score for a 1-point test cell with these verdicts' outputs, and the text its feedback shows."""
    cell = v4.new_code_cell("")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "points": 1, "grade_id": "x", "schema_version": 3}
    cell.outputs = verdict_outputs(CHECKS, entries, [], exam=exam)
    shown = "".join(o.get("text", "") + " ".join(o.get("traceback", [])) for o in cell.outputs)
    return nbgrader_utils.determine_grade(cell)[0], shown


@pytest.mark.parametrize(("status", "points"), [("pass", 1), ("wrong", 0), ("not attempted", 0)])
def test_nbgraders_outputs_in_exam_mode_score_the_same_and_show_no_hint(status, points):
    homework_score, homework = _graded_cell([entry(status)], exam=False)
    exam_score, exam = _graded_cell([entry(status)], exam=True)
    assert homework_score == exam_score == points
    assert HINT in homework and HINT not in exam and EXAM_MESSAGES[status] in exam


@pytest.mark.parametrize("hide_checks", [False, True])
def test_the_exam_source_marks_every_test_cell_and_its_checks_are_still_graded_outside_the_kernel(hide_checks):
    name = "04_multi_head_attention.ipynb"
    source = nbgrader_source(read_notebook(NOTEBOOKS_DIR / name), name, hide_checks=hide_checks)
    tests = [cell for cell in source.cells if cell.metadata.get("nbgrader", {}).get("grade")]
    assert tests and all(is_exam_cell(cell.source) is hide_checks for cell in tests)
    assert all(course_check_cell(cell) is not None for cell in tests)


needs_sandbox = pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox: {sandbox.unavailable()}")


@pytest.mark.integration
@needs_sandbox
def test_the_course_execute_shows_an_exam_cells_verdict_without_its_hint(tmp_path):
    """The wrong answer's hint (the weight untransposed) is in a homework cell's output, not in an exam cell's."""
    from course.grading.nbgrader_kernel import SandboxedExecute

    answer = v4.new_code_cell(WRONG)
    cells = {}
    for exam in (False, True):
        check = f'{IMPORT}\nfrom course.grading import graded\n\ngraded(check_linear_projection, "linear_projection")'
        test = v4.new_code_cell(f"### BEGIN HIDDEN TESTS\n{check}\n### END HIDDEN TESTS" if exam else check)
        test.metadata["nbgrader"] = {
            "grade": True,
            "solution": False,
            "locked": True,
            "points": 1,
            "grade_id": f"{exam}",
        }
        cells[exam] = test
    notebook = v4.new_notebook(cells=[v4.new_code_cell(IMPORT), answer, *cells.values()], metadata=KERNELSPEC)
    SandboxedExecute(timeout=120).preprocess(notebook, {"metadata": {"path": str(tmp_path)}})
    printed = {exam: "".join(o.get("text", "") for o in cell.outputs) for exam, cell in cells.items()}
    assert all(nbgrader_utils.determine_grade(cell)[0] == 0 for cell in cells.values())
    assert "weight" in printed[False], printed  # homework: the check's own hint
    assert printed[True] == f"[NOT YET] linear_projection: {EXAM_MESSAGES['wrong']}\n", printed


def write_notebook(path, cells):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell(c) for c in cells], metadata=KERNELSPEC), path)
    return path


@pytest.mark.integration
@needs_sandbox
def test_check_hide_checks_writes_the_verdict_alone_in_its_rows_and_the_gradebook(tmp_path, capsys):
    solution = RIGHT.replace("    return", "    # BEGIN SOLUTION\n    return") + "\n    # END SOLUTION"
    lessons = write_notebook(tmp_path / "notebooks" / "02_tiny.ipynb", [IMPORT, solution, CHECK]).parent
    wrong = write_notebook(tmp_path / "submissions" / "bob" / "02_tiny.ipynb", [IMPORT, WRONG, CHECK])
    right = write_notebook(tmp_path / "submissions" / "alice" / "02_tiny.ipynb", [IMPORT, RIGHT, CHECK])
    common = ["check", "--notebooks", str(lessons), "--jobs", "1"]
    assert assignments.main([*common, "--out", str(tmp_path / "homework"), str(wrong)]) == 0
    capsys.readouterr()
    assert assignments.main([*common, "--hide-checks", "--out", str(tmp_path / "exam"), str(wrong), str(right)]) == 0
    printed = capsys.readouterr().out  # the exam run's rows on stdout
    homework = list(csv.reader((tmp_path / "homework" / "gradebook.csv").open()))[1:]
    exam = list(csv.reader((tmp_path / "exam" / "gradebook.csv").open()))[1:]
    assert homework[0][3:5] == ["wrong", "0"] and "weight" in homework[0][5]
    assert [r[:6] for r in exam] == [
        ["alice", "02_tiny", "linear_projection", "pass", "1", EXAM_MESSAGES["pass"]],
        ["bob", "02_tiny", "linear_projection", "wrong", "0", EXAM_MESSAGES["wrong"]],
    ]
    assert homework[0][5] not in printed and EXAM_MESSAGES["wrong"] in printed
