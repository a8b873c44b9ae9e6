"""CONTRIBUTING.md's "Adding a lesson", checked for every lesson in notebooks/: each test fails naming the step
(its number in the checklist) that a lesson still misses, so a newcomer learns the files to touch from one
message rather than from a dozen failing tests elsewhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course import lessons, site
from course.assignments import _read, find_exercises

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHECKLIST = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
GUIDE = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
SLOW_S = 15  # CONTRIBUTING.md step 8
STEPS = 10
BEFORE_THE_BENCHMARK_STEP = {"01", "02", "03", "04", "05", "07", "08"}  # step 10 came after these lessons
TEST_FILES = sorted((ROOT / "tests").rglob("test_*.py"))
# Modules a lesson imports that no test file imports yet (step 9), each with where it is exercised today. Shrink it.
UNTESTED_MODULES = {
    "helpers.analysis.cache_budget": "lesson 11: only its nbval run and benchmarks/lesson11_trained.py",
}


def step(number: int) -> str:
    """The checklist's step ``number``, by its bold title, for a failure message."""
    title = re.search(rf"^{number}\. \*\*(.+?)\*\*", CHECKLIST, re.MULTILINE)
    assert title, f"CONTRIBUTING.md has no step {number} under 'Adding a lesson'"
    return f"CONTRIBUTING.md, 'Adding a lesson', step {number} ({title.group(1)})"


def exercises(path: Path) -> list[str]:
    return [exercise.function for exercise in find_exercises(_read(path), path.name)]


def test_the_checklist_is_found():
    assert len(LESSONS) >= 10 and "## Adding a lesson" in CHECKLIST
    assert [step(n) for n in range(1, STEPS + 1)]


def helpers_modules(path: Path) -> list[str]:
    """The modules of ``helpers`` the lesson imports from by name (``from helpers.x import ...``)."""
    return sorted(set(re.findall(r"from (helpers(?:\.\w+)+) import", path.read_text(encoding="utf-8"))))


def missing_steps(path: Path) -> list[str]:
    """What lesson ``path`` still misses of the checklist, each naming its step."""
    number, missing = path.name[:2], []
    if not site.LESSON_NAME.fullmatch(path.name):
        missing.append(f"{step(1)}: rename it NN_words.ipynb")
    entry = lessons.lesson_of(path.name)
    if entry is None:
        missing.append(f"{step(2)}: course/lessons.py's LESSONS has no entry for {path.name}")
    title = re.escape(entry.title) if entry else "[^\\]]+"
    if not re.search(rf"^\|\s*{number}\s*\|\s*\[{title}\]\(notebooks/{re.escape(path.name)}\)", README, re.MULTILINE):
        missing.append(f"{step(3)}: README.md has no row for notebooks/{path.name} titled as its registry entry")
    functions = exercises(path)
    module = ROOT / "course" / "exercises" / f"lesson{number}.py"
    if functions:
        if not module.exists() or f"course.exercises.lesson{number}" not in path.read_text(encoding="utf-8"):
            missing.append(f"{step(4)}: the checks in {module.relative_to(ROOT)}, imported by the lesson")
        tests = [p for p in (ROOT / "tests" / "course").glob("test_*.py") if f"lesson{number}" in p.read_text()]
        if not tests:
            missing.append(f"{step(5)}: no file in tests/course/ tests course.exercises.lesson{number}")
        for function in functions:
            if not re.search(rf"^\|\s*{number}\s*\|[^\n]*`{function}\(", GUIDE, re.MULTILINE):
                missing.append(f"{step(6)}: docs/teaching.md section 7 has no row for {number} `{function}(…)`")
    if f"**Lesson {number}**" not in GUIDE:
        missing.append(f"{step(6)}: docs/teaching.md has no model answers under **Lesson {number}**")
    measured = json.loads((ROOT / "benchmarks" / "guide_numbers.json").read_text())["lessons"].get(path.stem)
    if measured is None:
        missing.append(f"{step(7)}: run benchmarks/guide_numbers.py --lessons {number}")
    elif measured["wall_s"] > SLOW_S and measured["load_1min"] < 2 and entry and not entry.test_s:
        missing.append(f"{step(8)}: it ran {measured['wall_s']} s: give its registry entry test_s=")
    for name in helpers_modules(path):
        if name not in UNTESTED_MODULES and not any(
            re.search(rf"\b{re.escape(name)}\b", test.read_text(encoding="utf-8")) for test in TEST_FILES
        ):
            missing.append(f"{step(9)}: no test file imports {name}, which the lesson imports")
    if number not in BEFORE_THE_BENCHMARK_STEP:
        scripts = sorted((ROOT / "benchmarks").glob(f"lesson{number}_*.py"))
        if not scripts:
            missing.append(f"{step(10)}: no benchmarks/lesson{number}_*.py")
        sections = re.findall(rf"^## Lesson {number}\b.*?(?=^## |\Z)", RESULTS, re.MULTILINE | re.DOTALL)
        if scripts and not any(script.name in section for script in scripts for section in sections):
            missing.append(f"{step(10)}: benchmarks/RESULTS.md has no '## Lesson {number}' section naming its script")
    return missing


def test_every_registry_entry_has_its_notebook():
    files = {path.name for path in LESSONS}
    assert [lesson.file for lesson in lessons.LESSONS if lesson.file not in files] == []
    assert [lesson.file for lesson in lessons.LESSONS] == sorted(files), "LESSONS lists the lessons in order"


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.name[:2])
def test_each_lesson_has_every_step(path):
    missing = missing_steps(path)
    assert not missing, f"lesson {path.name[:2]} misses:\n" + "\n".join(missing)


def test_a_new_lesson_is_told_each_step_it_misses(tmp_path):
    """A made-up lesson 99: a number no lesson, check, benchmark or guide section will have, so that every step
    is still missing however many lessons are added (14 had benchmarks before its notebook)."""
    import nbformat

    cells = [
        nbformat.v4.new_markdown_cell("# Lesson 99: Latent compression\n\nWords."),
        nbformat.v4.new_code_cell("def compress(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION"),
        nbformat.v4.new_code_cell("check_compress(compress)"),
    ]
    path = tmp_path / "99_latent_compression.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    missing = "\n".join(missing_steps(path))
    for number in (2, 3, 4, 5, 6, 7, 10):
        assert step(number) in missing, (number, missing)
    assert "`compress(…)`" in missing and "**Lesson 99**" in missing and step(1) not in missing
