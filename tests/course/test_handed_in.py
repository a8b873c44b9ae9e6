"""What ``check`` (run as root) accepts as a handed-in notebook: a regular file of the student's own, of a shape.

A link to the solution, to a file only root may read, a FIFO or a device named like a notebook, or a notebook
whose JSON has the wrong shape each get a row saying why, and the batch goes on. None of these tests starts a
kernel: everything here is refused before one would.
"""

from __future__ import annotations

import csv
import io
import json
import os
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course import assignments
from course.grading import checker
from course.grading.handed_in import RefusedFile, read_handed_in
from course.solution_notebooks import ReleaseError, notebook_from_bytes, read_notebook

KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
IMPORT = "from course.exercises.lesson02 import check_linear_projection"
CHECK = "check_linear_projection(linear_projection)"
RIGHT = "def linear_projection(x, weight, bias):\n    return x @ weight.T + bias"
WRONG = "def linear_projection(x, weight, bias):\n    return x @ weight + bias"


def tiny_lesson(folder: Path) -> Path:
    answer = "def linear_projection(x, weight, bias):\n    # BEGIN SOLUTION\n    return x @ weight.T + bias\n"
    cells = [v4.new_code_cell(IMPORT), v4.new_code_cell(answer + "    # END SOLUTION"), v4.new_code_cell(CHECK)]
    path = folder / "02_tiny.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(v4.new_notebook(cells=cells, metadata=KERNELSPEC), path)
    return path


def notebook_json(cells: object, **extra: object) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": KERNELSPEC, "cells": cells, **extra})


def graded_rows(tmp_path: Path, capsys, *paths: Path) -> tuple[int, list[list[str]]]:
    """``check`` on ``paths`` against the tiny lesson, the sandbox taken as there (nothing here reaches a kernel)."""
    lessons = tiny_lesson(tmp_path / "notebooks").parent
    status = assignments.main(["check", "--notebooks", str(lessons), "--out", str(tmp_path / "g"), *map(str, paths)])
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out), delimiter="\t"))
    return status, rows[1:]


@pytest.fixture(autouse=True)
def no_kernel(monkeypatch):
    """A submission that got past the refusals would reach the supervisor: fail at once instead of grading it."""

    def reached(*args, **kwargs):
        raise AssertionError("a refused file reached the supervisor")

    monkeypatch.setattr(checker, "sandbox_unavailable", lambda: None)
    monkeypatch.setattr(checker, "_supervise", reached)


# --------------------------------------------------------------------------------------------- links
def test_a_link_to_the_solution_notebook_is_refused_not_graded_as_the_solution(tmp_path, capsys):
    solution = tiny_lesson(tmp_path / "notebooks")
    link = tmp_path / "mallory" / "02_tiny.ipynb"
    link.parent.mkdir()
    link.symlink_to(solution)
    status, rows = graded_rows(tmp_path, capsys, link)
    assert status == 1
    assert rows[0][:5] == ["mallory", "02_tiny", "linear_projection", "error", "0"], rows
    assert rows[1][2:4] == ["(notebook)", "error"] and "is a symbolic link" in rows[1][5], rows
    assert "expected a regular file handed in inside the student's folder" in rows[1][5]


def test_a_link_to_a_file_only_root_may_read_is_refused_without_reading_it(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text('{"nbformat": 4, "cells": [], "secret": "root:$6$hash"}')
    secret.chmod(0o600)
    link = tmp_path / "mallory" / "02_tiny.ipynb"
    link.parent.mkdir()
    link.symlink_to(secret)
    report = checker.run_submission(link, notebooks_dir=tiny_lesson(tmp_path / "notebooks").parent)
    assert "symbolic link" in report.problem and "$6$" not in report.problem
    with pytest.raises(RefusedFile, match="symbolic link"):
        read_handed_in(link)


@pytest.mark.parametrize("layout", ["folder", "nbgrader"])
def test_a_student_folder_that_is_a_link_is_refused(tmp_path, layout):
    elsewhere = tmp_path / "notebooks"
    tiny_lesson(elsewhere)
    if layout == "folder":  # alice -> the lessons' folder: alice/02_tiny.ipynb is the solution
        (tmp_path / "alice").symlink_to(elsewhere)
        path = tmp_path / "alice" / "02_tiny.ipynb"
    else:  # submitted/alice/02_tiny -> the lessons' folder
        (tmp_path / "submitted" / "alice").mkdir(parents=True)
        (tmp_path / "submitted" / "alice" / "02_tiny").symlink_to(elsewhere)
        path = tmp_path / "submitted" / "alice" / "02_tiny" / "02_tiny.ipynb"
    with pytest.raises(RefusedFile, match="is a symbolic link, not a folder"):
        read_handed_in(path)


def test_a_hard_link_is_refused_and_a_plain_copy_is_read(tmp_path):
    solution = tiny_lesson(tmp_path / "notebooks")
    (tmp_path / "bob").mkdir()
    os.link(solution, tmp_path / "bob" / "02_tiny.ipynb")
    with pytest.raises(RefusedFile, match="2 names"):
        read_handed_in(tmp_path / "bob" / "02_tiny.ipynb")
    copy = tmp_path / "carol" / "02_tiny" / "02_tiny.ipynb"  # nbgrader's layout, a real copy
    copy.parent.mkdir(parents=True)
    copy.write_bytes(solution.read_bytes())
    assert read_handed_in(copy) == solution.read_bytes()


# --------------------------------------------------------------------------------------------- not files
def test_a_fifo_named_like_a_notebook_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "erin" / "02_tiny.ipynb"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    lessons = tiny_lesson(tmp_path / "notebooks").parent
    reports = []
    grading = threading.Thread(target=lambda: reports.append(checker.run_submission(fifo, notebooks_dir=lessons)))
    grading.daemon = True  # if it hangs (the bug), it must not hold pytest at exit
    grading.start()
    grading.join(timeout=30)
    if grading.is_alive():  # let the hung open return, so the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not grading.is_alive(), "check waited on a FIFO"
    assert "is a FIFO (named pipe)" in reports[0].problem and "expected a regular file" in reports[0].problem
    with pytest.raises(ReleaseError, match="FIFO"):  # the lessons' own reader does not wait on one either
        read_notebook(fifo)


def test_a_device_is_refused_without_opening_it(tmp_path):
    with pytest.raises(RefusedFile, match="is a character device"):
        read_handed_in(Path("/dev/zero"))


def test_a_file_over_the_size_limit_is_refused(tmp_path):
    big = tmp_path / "ivan" / "02_tiny.ipynb"
    big.parent.mkdir()
    big.write_text(notebook_json([]) + " " * 2000)
    with pytest.raises(RefusedFile, match="of at most 1,000 bytes"):
        read_handed_in(big, limit=1000)


# --------------------------------------------------------------------------------------------- shapes
MALFORMED = {
    "cells a string": (notebook_json("abc"), '"cells" should be a list of cells, got a string'),
    "source of numbers": (
        notebook_json([{"cell_type": "code", "source": [1, 2, 3], "metadata": {}, "outputs": []}]),
        '"source" should be a string or a list of strings, got a list [1, 2, 3]',
    ),
    "a cell that is a number": (notebook_json([1]), "cell 1 from the top should be an object, got a number"),
    "no cell type": (notebook_json([{"source": "x = 1"}]), '"cell_type" should be "code", "markdown" or "raw"'),
    "metadata a list": (
        notebook_json([{"cell_type": "markdown", "source": "", "metadata": []}]),
        '"metadata" should be an object, got a list',
    ),
    "tags a string": (
        notebook_json([{"cell_type": "code", "source": "", "metadata": {"tags": "solution-only"}}]),
        'its "tags" should be a list of strings',
    ),
    "outputs an object": (
        notebook_json([{"cell_type": "code", "source": "", "metadata": {}, "outputs": {}}]),
        '"outputs" should be a list, got an object',
    ),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_notebook_of_the_wrong_shape_is_refused_saying_what_was_expected(case):
    text, expected = MALFORMED[case]
    with pytest.raises(ReleaseError, match="is not shaped as an nbformat 4 notebook") as error:
        notebook_from_bytes(text.encode(), "alice/02_tiny.ipynb")
    assert expected in str(error.value)


def test_a_cell_without_metadata_or_outputs_is_read_as_empty():
    text = notebook_json([{"cell_type": "code", "source": ["x = 1\n", "y = 2"]}])
    (cell,) = notebook_from_bytes(text.encode(), "a.ipynb").cells
    assert (cell.source, cell.metadata, cell.outputs) == ("x = 1\ny = 2", {}, [])


def test_one_bad_file_costs_one_row_and_the_batch_goes_on_with_the_gradebook_written(tmp_path, capsys):
    paths = []
    for student, (text, _) in zip(("ann", "ben", "cat"), list(MALFORMED.values())[:3], strict=True):
        path = tmp_path / student / "02_tiny.ipynb"
        path.parent.mkdir()
        path.write_text(text)
        paths.append(path)
    status, rows = graded_rows(tmp_path, capsys, *paths)
    assert status == 1
    assert [row[:4] for row in rows if row[2] == "(notebook)"] == [
        [student, "02_tiny", "(notebook)", "error"] for student in ("ann", "ben", "cat")
    ]
    book = list(csv.reader((tmp_path / "g" / "gradebook.csv").open()))
    assert {row[0] for row in book[1:]} == {"ann", "ben", "cat"}


def test_a_crash_of_the_checkers_own_costs_that_notebook_one_row(tmp_path, capsys, monkeypatch):
    good = tmp_path / "dan" / "02_tiny.ipynb"
    good.parent.mkdir()
    good.write_text(notebook_json([]))

    def broken(*args, **kwargs):
        raise TypeError("something no check foresaw")

    monkeypatch.setattr(checker, "grading_notebook", broken)
    status, rows = graded_rows(tmp_path, capsys, good)
    assert status == 1 and rows == [
        ["dan", "02_tiny", "(notebook)", "error", "", rows[0][5]],
    ]
    assert "TypeError: something no check foresaw" in rows[0][5] and "not graded" in rows[0][5]


def test_a_file_that_is_not_json_says_so_once(tmp_path):
    path = tmp_path / "eve" / "02_tiny.ipynb"
    path.parent.mkdir()
    path.write_text("{ not json")
    report = checker.run_submission(path, notebooks_dir=tiny_lesson(tmp_path / "notebooks").parent)
    assert report.problem.count("cannot be read as a notebook") == 1, report.problem
    assert report.problem.startswith("02_tiny.ipynb cannot be read as a notebook: Expecting property name")


# --------------------------------------------------------------------------------------------- two definitions
def test_an_exercise_defined_twice_is_graded_after_its_last_definition():
    exercises = checker.lesson_exercises(
        notebook_from_bytes(
            notebook_json(
                [
                    {"cell_type": "code", "source": IMPORT, "metadata": {}},
                    {"cell_type": "code", "source": RIGHT.replace("return", "# BEGIN SOLUTION\n    return")
                     + "\n    # END SOLUTION", "metadata": {}},
                    {"cell_type": "code", "source": CHECK, "metadata": {}},
                ]
            ).encode(),
            "02_tiny.ipynb",
        ),
        "02_tiny.ipynb",
    )  # fmt: skip
    cells = [IMPORT, WRONG, CHECK, "print('more work')", RIGHT, CHECK]
    submission = v4.new_notebook(cells=[v4.new_code_cell(text) for text in cells])
    notebook, graded, numbers = checker.grading_notebook(submission, exercises)
    (index,) = graded
    assert numbers[index] == 6 and "answer_the_checker(" in notebook.cells[index].source  # the check after the last def
    assert notebook.cells[index - 1].source == RIGHT and notebook.cells[2].source == CHECK
