"""course.learner: a learner's own copies (student copies, never written over), the solution a command away."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from course import learner
from course.assignments import release
from course.solution_notebooks import BEGIN_MARKER, PLACEHOLDER, ReleaseError

ROOT = Path(__file__).resolve().parents[2]
LESSON_02 = next((ROOT / "notebooks").glob("02_*.ipynb"))


@pytest.fixture
def lessons(tmp_path) -> Path:
    """A lessons' folder with lessons 01 and 02 (as committed)."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for source in sorted((ROOT / "notebooks").glob("0[12]_*.ipynb")):
        shutil.copy(source, folder / source.name)
    return folder


def _exercise_cell(path: Path, function: str) -> nbformat.NotebookNode:
    notebook = nbformat.read(path, as_version=4)
    return next(c for c in notebook.cells if c.cell_type == "code" and f"def {function}(" in c.source)


def test_the_copies_are_student_copies_without_solutions(lessons, tmp_path):
    made = learner.make_copies(tmp_path / "mine", lessons)
    assert [p.name for p in made] == sorted(p.name for p in lessons.glob("*.ipynb"))
    text = (tmp_path / "mine" / LESSON_02.name).read_text(encoding="utf-8")
    assert BEGIN_MARKER not in text and "return x @ weight.T + bias" not in text
    assert PLACEHOLDER[1] in _exercise_cell(tmp_path / "mine" / LESSON_02.name, "linear_projection").source


def test_a_copy_is_never_written_over_and_a_new_lesson_gets_its_copy(lessons, tmp_path):
    mine = tmp_path / "mine"
    learner.make_copies(mine, lessons)
    work = mine / LESSON_02.name
    work.write_text(work.read_text(encoding="utf-8").replace(PLACEHOLDER[1], "return x @ weight.T + bias"))
    before = work.read_bytes()
    shutil.copy(ROOT / "notebooks" / next((ROOT / "notebooks").glob("03_*.ipynb")).name, lessons)  # a `git pull`
    made = learner.make_copies(mine, lessons)
    assert [p.name for p in made] == [next(lessons.glob("03_*.ipynb")).name]
    assert work.read_bytes() == before


def test_copies_are_refused_inside_the_lessons_folder(lessons):
    with pytest.raises(ReleaseError, match="inside the lessons' folder"):
        learner.make_copies(lessons / "mine", lessons)


def test_the_solution_command_prints_the_reference_solution(capsys):
    assert learner.main(["solution", "02", "--exercise", "linear_projection"]) == 0
    out = capsys.readouterr().out
    assert "return x @ weight.T + bias" in out and BEGIN_MARKER not in out
    assert learner.main(["solution", "02", "--exercise", "no_such"]) == 1
    assert "its exercises: linear_projection, cross_attention_inputs" in capsys.readouterr().err


def test_restarting_one_exercise_keeps_the_rest_and_the_old_copy(lessons, tmp_path):
    mine = tmp_path / "mine"
    learner.make_copies(mine, lessons)
    work = mine / LESSON_02.name
    text = work.read_text(encoding="utf-8").replace(PLACEHOLDER[1], "return 42", 2)  # both exercises attempted
    work.write_text(text, encoding="utf-8")
    target, kept = learner.restart("02", "linear_projection", mine, lessons)
    assert target == work and kept is not None and kept.parent == mine / learner.PREVIOUS
    assert kept.read_text(encoding="utf-8") == text
    assert PLACEHOLDER[1] in _exercise_cell(work, "linear_projection").source
    assert "return 42" in _exercise_cell(work, "cross_attention_inputs").source


def test_restarting_a_lesson_gives_a_fresh_copy(lessons, tmp_path):
    mine = tmp_path / "mine"
    learner.make_copies(mine, lessons)
    fresh = (mine / LESSON_02.name).read_bytes()
    (mine / LESSON_02.name).write_text("my notes", encoding="utf-8")
    assert learner.main(["restart", "2", "--into", str(mine), "--notebooks", str(lessons)]) == 0
    assert (mine / LESSON_02.name).read_bytes() == fresh
    assert [p.read_text(encoding="utf-8") for p in (mine / learner.PREVIOUS).iterdir()] == ["my notes"]


def test_the_learners_folder_is_ignored_by_git():
    assert "/my-lessons/" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert learner.LEARNER_DIR == ROOT / "my-lessons"


def test_restarting_an_exercise_of_an_unreadable_copy_says_to_restart_the_lesson(lessons, tmp_path, capsys):
    mine = tmp_path / "mine"
    learner.make_copies(mine, lessons)
    (mine / LESSON_02.name).write_text("{not json", encoding="utf-8")
    args = ["restart", "02", "--exercise", "linear_projection", "--into", str(mine), "--notebooks", str(lessons)]
    assert learner.main(args) == 1
    assert "restart the whole lesson" in capsys.readouterr().err


def test_copy_names_the_folder_to_open_and_a_hand_out_is_opened_as_it_is(lessons, tmp_path, capsys):
    """make lab opens what `copy` prints: the learner's folder, or, in a hand-out (student copies in notebooks/,
    docs/teaching.md section 3), notebooks/ itself, with no copy made of the copies."""
    mine = tmp_path / "mine"
    assert learner.main(["copy", "--into", str(mine), "--notebooks", str(lessons)]) == 0
    assert capsys.readouterr().out == f"{mine}\n" and learner.holds_solutions(lessons)
    handout = tmp_path / "handout" / "notebooks"
    release(handout, lessons)
    capsys.readouterr()
    assert learner.main(["copy", "--into", str(tmp_path / "other"), "--notebooks", str(handout)]) == 0
    assert capsys.readouterr().out == f"{handout}\n" and not (tmp_path / "other").exists()
    assert not learner.holds_solutions(handout)
