"""Every lesson whose registry entry names a seed variable (course/lessons.py: ``seed_variable``), executed top to
bottom with its ``other_seed``: every assertion, so every claim, must hold there too (issue 35: with SEED = 7
lesson 10's old K-composition claim was false and stopped Run All).

Each run executes a whole lesson in a kernel (lesson 10: 74-80 s on the quiet 2-core machine), so ``make test``
leaves it out and CI's weekly job runs it: ``make other-seeds`` sets ``COURSE_OTHER_SEEDS=1``. A lesson joins
by its entry alone."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course.lessons import LESSONS

ROOT = Path(__file__).resolve().parents[1]
SWITCH = "COURSE_OTHER_SEEDS"
SEEDED = [lesson for lesson in LESSONS if lesson.seed_variable]
PROBE = "print(SEED)"  # the lesson's one seed, as its first code cell read it


def test_a_lesson_has_a_seed_variable():
    assert SEEDED, "no registry entry names a seed_variable: the weekly other-seed run would run nothing"


@pytest.mark.integration
@pytest.mark.skipif(os.environ.get(SWITCH) != "1", reason=f"CI's weekly job runs it: make other-seeds ({SWITCH}=1)")
@pytest.mark.parametrize("lesson", SEEDED, ids=lambda lesson: lesson.number)
def test_the_lesson_runs_clean_with_another_seed(lesson):
    notebook = nbformat.read(ROOT / lesson.path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    client = NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
    )
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", lesson.seed_variable: str(lesson.other_seed)}
    client.execute(env=env)  # a failing assertion raises CellExecutionError, naming the cell
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs).strip()
    assert printed == str(lesson.other_seed), f"the kernel ran with SEED = {printed}, not {lesson.other_seed}"
