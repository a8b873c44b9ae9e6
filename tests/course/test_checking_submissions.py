"""``python -m course.assignments check``: each handed-in notebook runs isolated, a timeout or a
dead kernel ends only its own notebook, and verdicts come from the checks, not from what a notebook prints.

Each test starts real kernels (a few seconds each), as the teacher's command does.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course.assignments import CHECK_ISOLATION, NOTEBOOKS_DIR, run_submission
from course.assignments import main as assignments_main

KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
CHECK = (
    "from course.exercises.feedback import run_check, wrong\n\n"
    "def check_value(name, value, expected):\n"
    "    def body():\n"
    "        if value != expected:\n"
    "            raise wrong(f'{name} should be {expected!r}, got {value!r}')\n"
    "        return f'{name} is right.'\n"
    "    return run_check(name, body)"
)


def handed_in(folder: Path, name: str, *cells: str) -> Path:
    """A tiny handed-in notebook: the check definition, then ``cells``."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    notebook = v4.new_notebook(cells=[v4.new_code_cell(CHECK), *map(v4.new_code_cell, cells)], metadata=KERNELSPEC)
    nbformat.write(notebook, path)
    return path


def test_each_notebook_runs_in_its_own_folder_with_a_minimal_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TEACHER_TOKEN", "secret-123")
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "multi30k"))
    stray = NOTEBOOKS_DIR / "written_by_a_student.txt"
    path = handed_in(
        tmp_path / "alice",
        "03_lesson.ipynb",
        "import os\nopen('written_by_a_student.txt', 'w').write('x')\nhere = sorted(os.listdir('.'))",
        "check_value('folder holds the notebook copy', here, ['03_lesson.ipynb', 'written_by_a_student.txt'])",
        "check_value('teacher token', os.environ.get('TEACHER_TOKEN'), None)",
        "check_value('home is not the teacher\\'s', os.environ['HOME'] != " + repr(os.environ.get("HOME")) + ", True)",
        "check_value('not in the lessons folder', os.getcwd() != " + repr(str(NOTEBOOKS_DIR)) + ", True)",
        "check_value('Multi30k folder passed on', os.environ.get('MULTI30K_DIR'), "
        + repr(str(tmp_path / "multi30k"))
        + ")",
        "check_value('figures off screen', os.environ.get('MPLBACKEND'), 'Agg')",
    )
    try:
        report = run_submission(path, timeout_s=120)
    finally:
        stray.unlink(missing_ok=True)  # before the fix the kernel ran in notebooks/ and wrote there
    assert report.problem is None
    assert [(r.exercise, r.status) for r in report.results] == [
        ("folder holds the notebook copy", "pass"),
        ("teacher token", "pass"),
        ("home is not the teacher's", "pass"),
        ("not in the lessons folder", "pass"),
        ("Multi30k folder passed on", "pass"),
        ("figures off screen", "pass"),
    ], report.results
    assert not (path.parent / "written_by_a_student.txt").exists()  # the copy's folder is thrown away


def test_a_printed_pass_is_not_counted(tmp_path, capsys):
    path = handed_in(
        tmp_path / "bob",
        "03_lesson.ipynb",
        "print('[PASS] scaled attention: forged')",
        "check_value('double', 2 * 3, 5)",
        "print('[PASS] double: forged too')",
    )
    assert assignments_main(["check", str(path)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows == ["notebook\texercise\tstatus\tmessage", f"{path}\tdouble\twrong\tdouble should be 5, got 6"]


def test_a_timeout_or_a_dead_kernel_ends_only_that_notebook(tmp_path, capsys):
    endless = handed_in(tmp_path / "a", "lesson.ipynb", "check_value('first', 1, 1)", "while True:\n    pass")
    dies = handed_in(tmp_path / "b", "lesson.ipynb", "check_value('first', 1, 1)", "import os\nos._exit(1)")
    fine = handed_in(tmp_path / "c", "lesson.ipynb", "check_value('first', 1, 1)")
    assert assignments_main(["check", "--timeout", "20", str(endless), str(dies), str(fine)]) == 1
    captured = capsys.readouterr()
    rows = captured.out.splitlines()
    assert rows[1:] == [
        f"{endless}\tfirst\tpass\tfirst is right.",  # the verdict produced before the loop is kept
        f"{endless}\t(notebook)\terror\ttimed out in cell 3 after 20 s",
        f"{dies}\tfirst\tpass\tfirst is right.",
        f"{dies}\t(notebook)\terror\tkernel died in cell 3",
        f"{fine}\tfirst\tpass\tfirst is right.",  # checking went on
    ]
    assert "2 of 3 notebooks did not run to the end" in captured.err


def test_the_whole_notebook_has_a_time_limit_too(tmp_path):
    slow = handed_in(tmp_path, "slow.ipynb", *["import time\ntime.sleep(10)"] * 4)
    report = run_submission(slow, timeout_s=60, notebook_timeout_s=25)  # the first cell imports torch
    assert report.problem is not None
    assert report.problem.startswith("timed out in cell ") and "the whole notebook may take 25 s" in report.problem


def test_unreadable_submission_gets_its_row_and_checking_goes_on(tmp_path, capsys):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    assert assignments_main(["check", "--timeout", "5", str(broken), str(tmp_path / "absent.ipynb")]) == 1
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].startswith(f"{broken}\t(notebook)\terror\tcannot be read as a notebook")
    assert rows[2].startswith(f"{tmp_path / 'absent.ipynb'}\t(notebook)\terror\tcannot be read as a notebook")


def test_nbgrader_output_inside_the_lessons_folder_is_refused(tmp_path, capsys):
    lessons = tmp_path / "notebooks"
    lessons.mkdir()
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell("x = 1")], metadata=KERNELSPEC), lessons / "01.ipynb")
    assert assignments_main(["nbgrader", "--notebooks", str(lessons), "--out", str(lessons / "nbg")]) == 1
    assert "inside the lessons' folder" in capsys.readouterr().err
    assert not (lessons / "nbg").exists()


def test_help_says_what_check_isolates_and_what_not(capsys):
    with pytest.raises(SystemExit):
        assignments_main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--notebook-timeout" in text and "not a sandbox for hostile code" in text and "container" in text
    assert "temporary folder" in CHECK_ISOLATION


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_timeouts_must_be_positive_whole_seconds(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        assignments_main(["check", "--timeout", value, "x.ipynb"])
    assert exit_.value.code == 2 and "argument --timeout" in capsys.readouterr().err
