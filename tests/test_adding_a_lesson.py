"""CONTRIBUTING.md's "Adding a lesson", checked for every lesson in notebooks/: each test fails naming the step
(its number in the checklist) that a lesson still misses, so a newcomer learns the files to touch from one
message rather than from a dozen failing tests elsewhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course import site
from course.assignments import _read, find_exercises

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHECKLIST = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
GUIDE = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")
SLOW_S = 15  # CONTRIBUTING.md step 7


def step(number: int) -> str:
    """The checklist's step ``number``, by its bold title, for a failure message."""
    title = re.search(rf"^{number}\. \*\*(.+?)\*\*", CHECKLIST, re.MULTILINE)
    assert title, f"CONTRIBUTING.md has no step {number} under 'Adding a lesson'"
    return f"CONTRIBUTING.md, 'Adding a lesson', step {number} ({title.group(1)})"


def exercises(path: Path) -> list[str]:
    return [exercise.function for exercise in find_exercises(_read(path), path.name)]


def test_the_checklist_is_found():
    assert len(LESSONS) >= 10 and "## Adding a lesson" in CHECKLIST
    assert [step(n) for n in range(1, 9)]


def missing_steps(path: Path) -> list[str]:
    """What lesson ``path`` still misses of the checklist, each naming its step."""
    number, missing = path.name[:2], []
    if not site.LESSON_NAME.fullmatch(path.name):
        missing.append(f"{step(1)}: rename it NN_words.ipynb")
    if not re.search(rf"^\|\s*{number}\s*\|\s*\[[^\]]+\]\(notebooks/{re.escape(path.name)}\)", README, re.MULTILINE):
        missing.append(f"{step(2)}: README.md has no row for notebooks/{path.name}")
    functions = exercises(path)
    module = ROOT / "course" / "exercises" / f"lesson{number}.py"
    if functions:
        if not module.exists() or f"course.exercises.lesson{number}" not in path.read_text(encoding="utf-8"):
            missing.append(f"{step(3)}: the checks in {module.relative_to(ROOT)}, imported by the lesson")
        tests = [p for p in (ROOT / "tests" / "course").glob("test_*.py") if f"lesson{number}" in p.read_text()]
        if not tests:
            missing.append(f"{step(4)}: no file in tests/course/ tests course.exercises.lesson{number}")
        for function in functions:
            if not re.search(rf"^\|\s*{number}\s*\|[^\n]*`{function}\(", GUIDE, re.MULTILINE):
                missing.append(f"{step(5)}: docs/teaching.md section 7 has no row for {number} `{function}(…)`")
    if f"**Lesson {number}**" not in GUIDE:
        missing.append(f"{step(5)}: docs/teaching.md has no model answers under **Lesson {number}**")
    measured = json.loads((ROOT / "benchmarks" / "guide_numbers.json").read_text())["lessons"].get(path.stem)
    if measured is None:
        missing.append(f"{step(6)}: run benchmarks/guide_numbers.py --lessons {number}")
    elif measured["wall_s"] > SLOW_S and measured["load_1min"] < 2:  # a busy machine's time says nothing
        conftest = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
        if f'"notebooks/{path.name}"' not in conftest:
            missing.append(f"{step(7)}: it ran {measured['wall_s']} s: add it to tests/conftest.py's SLOWEST_FIRST")
    return missing


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.name[:2])
def test_each_lesson_has_every_step(path):
    missing = missing_steps(path)
    assert not missing, f"lesson {path.name[:2]} misses:\n" + "\n".join(missing)


def test_a_new_lesson_is_told_each_step_it_misses(tmp_path):
    import nbformat

    cells = [
        nbformat.v4.new_markdown_cell("# Lesson 13: Latent compression\n\nWords."),
        nbformat.v4.new_code_cell("def compress(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION"),
        nbformat.v4.new_code_cell("check_compress(compress)"),
    ]
    path = tmp_path / "13_latent_compression.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    missing = "\n".join(missing_steps(path))
    for number in (2, 3, 4, 5, 6):
        assert step(number) in missing, (number, missing)
    assert "`compress(…)`" in missing and "**Lesson 13**" in missing and step(1) not in missing
