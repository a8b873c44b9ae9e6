"""Per-student totals from nbgrader's gradebook, in the table ``check`` writes (course.grading.nbgrader).

The gradebook is made here with nbgrader's own API, as ``nbgrader autograde`` fills it: two lessons, three students
(one right everywhere, one with a cell left for a manual grade and a lesson not handed in, one whose check could not
be graded, as its ``[ERROR]`` line in the autograded notebook says), so the sums, the points possible, the "not
graded" count and a lesson not handed in are all checked against ``course.grading.gradebook.totals`` on the same
verdicts. The real term, with nbgrader's autograde, is in
test_nbgrader_term.py.
"""

from __future__ import annotations

import csv
import shutil

import nbformat
import pytest
from nbformat import v4

from course.assignments import main
from course.grading import gradebook
from course.grading.nbgrader import nbgrader_totals, write_nbgrader_totals

api = pytest.importorskip("nbgrader.api", reason="nbgrader is the optional extra 'grading'")

# lesson -> its grade cells (check cells), each worth 1 point unless said
LESSONS = {"02_tiny": ["linear_projection", "cross_attention_inputs"], "03_three": ["attention_weights"]}
# (student, lesson, cell) -> (auto score, needs a manual grade); a lesson missing for a student was not handed in
GRADES = {
    ("alice", "02_tiny", "linear_projection"): (1.0, False),
    ("alice", "02_tiny", "cross_attention_inputs"): (1.0, False),
    ("alice", "03_three", "attention_weights"): (1.0, False),
    ("bob", "02_tiny", "linear_projection"): (0.0, False),
    ("bob", "02_tiny", "cross_attention_inputs"): (None, True),  # nbgrader could not decide: left for a person
    ("carol", "02_tiny", "linear_projection"): (1.0, False),
    ("carol", "02_tiny", "cross_attention_inputs"): (0.0, False),
    ("carol", "03_three", "attention_weights"): (1.0, False),
}
# the checks whose verdict nbgrader's autograded notebook shows as [ERROR] (they score 0, but no verdict decided them)
ERRORED = {("carol", "02_tiny", "cross_attention_inputs")}


def autograded_notebook(root, student, lesson):
    """The autograded notebook nbgrader writes, with the verdict lines the course's test cells print."""
    cells = []
    for cell in LESSONS[lesson]:
        test = v4.new_code_cell(f"graded(check_{cell}, {cell!r})")
        test.metadata["nbgrader"] = {"grade": True, "grade_id": cell, "points": 1, "solution": False}
        score, _ = GRADES[student, lesson, cell]
        if (student, lesson, cell) in ERRORED:
            line = f"[ERROR] {cell}: not graded: its cell ended before the check finished\n"
        else:
            line = f"[PASS] {cell}: right\n" if score else f"[NOT YET] {cell}: [ERROR] in your shapes\n"
        test.outputs = [v4.new_output("stream", name="stdout", text=line)]
        cells.append(test)
    path = root / "autograded" / student / lesson / f"{lesson}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(v4.new_notebook(cells=cells), path)


@pytest.fixture
def database(tmp_path, monkeypatch):
    # A new gradebook is stamped with alembic's head revision, which nbgrader asks of an `alembic` process; read
    # from the same migration scripts in this process, so that the test starts none (it stays a unit test).
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    head = ScriptDirectory(ALEMBIC_DIR).get_current_head()
    monkeypatch.setattr(api, "get_alembic_version", lambda: head)
    path = tmp_path / "gradebook.db"
    with api.Gradebook(f"sqlite:///{path}") as book:
        for lesson, cells in LESSONS.items():
            book.add_assignment(lesson)
            book.add_notebook(lesson, lesson)
            for cell in cells:
                book.add_grade_cell(cell, lesson, lesson, max_score=1, cell_type="code")
        for student in ("alice", "bob", "carol"):
            book.add_student(student)
        for student, lesson in sorted({(student, lesson) for student, lesson, _ in GRADES}):
            book.add_submission(lesson, student)
        for (student, lesson, cell), (score, manual) in GRADES.items():
            grade = book.find_grade(cell, lesson, lesson, student)
            grade.auto_score, grade.needs_manual_grade = score, manual
        book.db.commit()
    for student, lesson in sorted({(student, lesson) for student, lesson, _ in GRADES}):
        autograded_notebook(tmp_path, student, lesson)
    return path


def test_the_totals_are_checks_totals_of_the_same_verdicts(database):
    """With one point per check, nbgrader's totals are what check's gradebook would total for the same verdicts."""

    def verdict(key, score, manual):
        return "error" if manual or key in ERRORED else ("pass" if score else "wrong")

    rows = [[*key, verdict(key, score, manual), str(int(score or 0)), ""] for key, (score, manual) in GRADES.items()]
    assert nbgrader_totals(database) == gradebook.totals(rows)


def test_a_lesson_not_handed_in_counts_0_of_its_points_and_says_so(database):
    totals = {(row[0], row[1]): row[2:] for row in nbgrader_totals(database)}
    assert totals["bob", "03_three"] == ["0", "1", "0", "no"]
    assert totals["bob", gradebook.ALL_LESSONS] == ["0", "3", "1", "1 of 2"]  # out of: every released lesson
    assert totals["alice", gradebook.ALL_LESSONS] == ["3", "3", "0", "2 of 2"]


def test_not_graded_counts_the_checks_no_verdict_decided_in_both_routes(database):
    """bob's cell left for a manual grade and carol's check that ended with [ERROR] are "not graded"; a [NOT YET]
    verdict whose hint happens to hold the text "[ERROR]" is a verdict, and is not."""
    totals = {(row[0], row[1]): row[2:] for row in nbgrader_totals(database)}
    assert totals["bob", "02_tiny"][2] == "1" and totals["carol", "02_tiny"][2] == "1"
    assert totals["carol", "03_three"][2] == "0" and totals["alice", "02_tiny"][2] == "0"
    # without the autograded notebooks only the manual-grade cell is known: carol's error is not guessed at
    shutil.rmtree(database.parent / "autograded")
    totals = {(row[0], row[1]): row[2:] for row in nbgrader_totals(database)}
    assert totals["bob", "02_tiny"][2] == "1" and totals["carol", "02_tiny"][2] == "0"


def test_a_cell_worth_more_counts_its_own_points(database):
    with api.Gradebook(f"sqlite:///{database}") as book:
        book.find_grade_cell("attention_weights", "03_three", "03_three").max_score = 2
        book.find_grade("attention_weights", "03_three", "03_three", "carol").auto_score = 1.5
        book.db.commit()
    totals = {(row[0], row[1]): row[2:] for row in nbgrader_totals(database)}
    assert totals["carol", "03_three"] == ["1.5", "2", "0", "yes"]
    assert totals["carol", gradebook.ALL_LESSONS] == ["2.5", "4", "1", "2 of 2"]
    assert totals["bob", "03_three"] == ["0", "2", "0", "no"]  # not handed in: 0 of the cell's own points


def test_the_command_writes_totals_csv_beside_the_gradebook(database, capsys):
    assert main(["nbgrader-totals", "--gradebook", str(database)]) == 0
    written = database.with_name("totals.csv")
    assert f"totals: {written}" in capsys.readouterr().out
    table = list(csv.reader(written.open(encoding="utf-8")))
    assert table == [list(gradebook.TOTALS_COLUMNS), *nbgrader_totals(database)]
    elsewhere = write_nbgrader_totals(database, database.parent / "grades" / "nbgrader.csv")
    assert elsewhere.read_text(encoding="utf-8") == written.read_text(encoding="utf-8")


def test_a_missing_gradebook_is_said_and_not_created(tmp_path, capsys):
    missing = tmp_path / "classroom" / "gradebook.db"
    assert main(["nbgrader-totals", "--gradebook", str(missing)]) == 2
    assert "no nbgrader gradebook at" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match=r"the gradebook\.db that `nbgrader autograde` fills"):
        nbgrader_totals(missing)
    assert not missing.exists() and not missing.parent.exists()
