"""Student copies (course/assignments.py) and the check infrastructure they rely on.

Three parts:

* the release tool on small fixture notebooks built here with nbformat (every rule and every
  refusal, the command line, determinism, re-running over an existing folder);
* the real lessons in notebooks/, parametrized over whatever lessons exist when tests are
  collected: each releases, leaks nothing, and follows the exercise convention;
* course/exercises/feedback.py, which turns a learner's answer into PASS / hint / not attempted.

Executing the student copies is in test_student_copies.py (slow).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbformat
import pytest
import torch
from nbformat import v4

from course import assignments
from course.assignments import ReleaseError, find_exercises, release, student_copy
from course.exercises.feedback import Verdict, as_tensor, close, diagnose, expect_shape, run_check, wrong

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PLACEHOLDER_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()"}
MARKER_LINES = {"# BEGIN SOLUTION", "# END SOLUTION"}


# ---------------------------------------------------------------------------------------------
# Fixture notebooks
# ---------------------------------------------------------------------------------------------
EXERCISE_CELL = '''def double(x):
    """Twice ``x``."""
    # BEGIN SOLUTION
    result = x * 2  # the secret of doubling
    return result
    # END SOLUTION


class Scaler:
    def scale(self, x, factor):
        if factor:
            # BEGIN SOLUTION
            return [value * factor for value in x]
            # END SOLUTION
        return x'''

EXERCISE_CELL_STUDENT = '''def double(x):
    """Twice ``x``."""
    # YOUR CODE HERE
    raise NotImplementedError()


class Scaler:
    def scale(self, x, factor):
        if factor:
            # YOUR CODE HERE
            raise NotImplementedError()
        return x'''


def lesson(*cells: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A solution notebook with a kernelspec and (stale, solution-bearing) widget state."""
    notebook = v4.new_notebook(cells=list(cells))
    notebook.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
        "language_info": {"name": "python"},
        "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {"w": {"value": "result = x * 2"}}}},
        "nbgrader": {"notes": "return result"},
    }
    return notebook


def full_lesson() -> nbformat.NotebookNode:
    """Every feature at once: exercises, a check, outputs, metadata, solution-only cells."""
    return lesson(
        v4.new_markdown_cell("# Doubling\nWrite `double`."),
        v4.new_code_cell(
            EXERCISE_CELL,
            execution_count=1,
            metadata={"tags": ["exercise"], "nbgrader": {"solution": True, "checksum": "x"}, "scrolled": True},
        ),
        v4.new_code_cell(
            "print('[PASS] double:', double(2))",
            execution_count=2,
            outputs=[v4.new_output("stream", name="stdout", text="[PASS] double: 4\n")],
        ),
        v4.new_markdown_cell(
            "The trick: `result = x * 2` and then `return result`.", metadata={"tags": ["solution-only"]}
        ),
        v4.new_code_cell("double(21)  # demo of the solved function", metadata={"tags": ["solution-only", "x"]}),
        v4.new_raw_cell("raw text", metadata={"format": "text/x-python", "secret": "return result"}),
        v4.new_code_cell(
            "# NBVAL_IGNORE_OUTPUT\nprint(sum(range(4)))",
            execution_count=3,
            metadata={"tags": ["keep-me"]},
            outputs=[v4.new_output("execute_result", data={"text/plain": "6"}, execution_count=3)],
        ),
    )


def write(notebook: nbformat.NotebookNode, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


def cli(capsys, *args: str | Path) -> tuple[int, str, str]:
    """The command line in this process (a subprocess costs seconds of `import torch` each time)."""
    status = assignments.main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------
# The leak rule, written independently of course.assignments so a bug there cannot hide a leak
# ---------------------------------------------------------------------------------------------
def _text(source: str | list[str]) -> str:
    return "".join(source) if isinstance(source, list) else source


def secret_lines(source_notebook: dict) -> set[str]:
    """Lines a student copy must never contain, from a solution notebook's JSON.

    Rule: a line is secret when it occurs in the source notebook ONLY as solution text: inside a
    ``# BEGIN SOLUTION`` / ``# END SOLUTION`` region or in a cell tagged ``solution-only``, and in
    no other cell source of that notebook (stripped, blank lines ignored). A line such as
    ``return x`` that the lesson also shows outside the solutions is public already, so finding it
    in the student copy proves nothing; every line that exists only in solutions must vanish.
    Marker and placeholder lines are the tool's own and never secret. (Outputs of the source
    notebook do not make a line public: a student copy has no outputs.)
    """
    inside: set[str] = set()
    outside: set[str] = set()
    for cell in source_notebook["cells"]:
        lines = [line.strip() for line in _text(cell["source"]).splitlines() if line.strip()]
        if "solution-only" in cell.get("metadata", {}).get("tags", []):
            inside.update(lines)
            continue
        in_region = False
        for line in lines:
            if cell["cell_type"] == "code" and line == "# BEGIN SOLUTION":
                in_region = True
            elif cell["cell_type"] == "code" and line == "# END SOLUTION":
                in_region = False
            else:
                (inside if in_region else outside).add(line)
    return inside - outside - PLACEHOLDER_LINES - MARKER_LINES


def _strings(value: object, where: str):
    """Every string in a JSON value (dict keys included), with a path saying where it sits."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}.{key} (key)", str(key)
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _substantive(line: str) -> bool:
    # Substring search only for lines long enough to be code: `)` inside "Python 3 (ipykernel)"
    # is not a leak, `result = x * 2` inside a traceback is.
    return len(line) >= 8 and re.search(r"[A-Za-z_]", line) is not None


def find_leaks(student_notebook: dict, secrets: set[str]) -> list[str]:
    """Where secret lines appear in a student file's JSON: anywhere, sources, outputs or metadata.

    Cell sources are compared line by line (a secret is a whole stripped line, so a public line
    that merely contains it, e.g. ``return x`` inside ``return x + 1``, is not a leak). Every other
    string (outputs, tracebacks, metadata, widget state, keys) is searched for each substantive
    secret as a substring, because there a line can be embedded in longer text.
    """
    found = []
    for index, cell in enumerate(student_notebook.get("cells", [])):
        for line in _text(cell.get("source", "")).splitlines():
            if line.strip() in secrets:
                found.append(f"cells[{index}].source: {line.strip()!r}")
        rest = {key: value for key, value in cell.items() if key != "source"}
        for where, text in _strings(rest, f"cells[{index}]"):
            found.extend(f"{where}: {secret!r}" for secret in secrets if _substantive(secret) and secret in text)
    rest = {key: value for key, value in student_notebook.items() if key != "cells"}
    for where, text in _strings(rest, "notebook"):
        found.extend(f"{where}: {secret!r}" for secret in secrets if _substantive(secret) and secret in text)
    return found


# ---------------------------------------------------------------------------------------------
# What a student copy contains (fixtures)
# ---------------------------------------------------------------------------------------------
def test_each_region_becomes_the_placeholder_at_the_marker_indentation():
    copy = student_copy(lesson(v4.new_code_cell(EXERCISE_CELL)), "fixture.ipynb")
    assert copy.cells[0].source == EXERCISE_CELL_STUDENT


def test_student_exercise_cell_still_defines_the_function_which_raises_not_implemented():
    namespace: dict = {}
    exec(student_copy(lesson(v4.new_code_cell(EXERCISE_CELL)), "fixture.ipynb").cells[0].source, namespace)
    with pytest.raises(NotImplementedError):
        namespace["double"](3)
    with pytest.raises(NotImplementedError):
        namespace["Scaler"]().scale([1], 2)
    assert namespace["Scaler"]().scale([1], 0) == [1]  # code after the region is kept


def test_cells_tagged_solution_only_are_removed_and_others_kept_in_order():
    copy = student_copy(full_lesson(), "fixture.ipynb")
    sources = [cell.source for cell in copy.cells]
    assert len(copy.cells) == 5
    assert not any("The trick" in s or "demo of the solved" in s for s in sources)
    assert sources[0].startswith("# Doubling") and sources[-1].endswith("print(sum(range(4)))")
    assert [cell.cell_type for cell in copy.cells] == ["markdown", "code", "code", "raw", "code"]


def test_outputs_counts_widget_state_and_tool_metadata_are_cleared():
    copy = student_copy(full_lesson(), "fixture.ipynb")
    for cell in copy.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert copy.cells[1].metadata == {"tags": ["exercise"]}  # nbgrader checksum, scrolled: gone
    assert copy.cells[3].metadata == {"format": "text/x-python"}  # raw cell keeps what its text is
    assert copy.cells[4].metadata == {"tags": ["keep-me"]}
    assert set(copy.metadata) == {"kernelspec", "language_info"}  # widgets and nbgrader notes gone
    assert copy.metadata.kernelspec.name == "python3"


def test_the_source_notebook_is_not_modified():
    source = full_lesson()
    before = nbformat.writes(source)
    student_copy(source, "fixture.ipynb")
    assert nbformat.writes(source) == before


def test_a_cell_without_markers_is_kept_verbatim():
    text = "def helper(x):\n    # a comment that mentions no marker\n    return x + 1\n"
    assert student_copy(lesson(v4.new_code_cell(text)), "fixture.ipynb").cells[0].source == text


def test_find_exercises_names_the_function_of_each_region():
    found = find_exercises(full_lesson(), "fixture.ipynb")
    assert [(e.cell_index, e.function, e.lines) for e in found] == [(1, "double", 2), (1, "scale", 1)]


# ---------------------------------------------------------------------------------------------
# Refusals: notebook and cell named, nothing written
# ---------------------------------------------------------------------------------------------
BAD_CELLS = {
    "begin without end": (
        v4.new_code_cell("def f():\n    # BEGIN SOLUTION\n    return 1\n"),
        "has no '# END SOLUTION'",
    ),
    "end without begin": (
        v4.new_code_cell("def f():\n    return 1\n    # END SOLUTION\n"),
        "without a '# BEGIN SOLUTION'",
    ),
    "nested": (
        v4.new_code_cell(
            "def f():\n    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n    return 1\n"
            "    # END SOLUTION\n    # END SOLUTION\n"
        ),
        "cannot nest",
    ),
    "marker in markdown": (v4.new_markdown_cell("Answer:\n# BEGIN SOLUTION\nx = 1\n# END SOLUTION"), "markdown cell"),
    "marker in raw": (v4.new_raw_cell("# BEGIN SOLUTION\nx = 1\n# END SOLUTION"), "raw cell"),
    "triple hash": (
        v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n"),
        "otter-grader",
    ),
    "lower case": (
        v4.new_code_cell("def f():\n    # begin solution\n    return 1\n    # end solution\n"),
        "looks like a solution marker",
    ),
    "trailing text": (
        v4.new_code_cell("def f():\n    # BEGIN SOLUTION (easy)\n    return 1\n    # END SOLUTION\n"),
        "looks like a solution marker",
    ),
    "marker indented wrong": (
        v4.new_code_cell("def f():\n# BEGIN SOLUTION\n    return 1\n# END SOLUTION\n"),
        "no longer valid Python",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CELLS))
def test_refuses_a_bad_marker_naming_notebook_and_cell(case):
    bad_cell, phrase = BAD_CELLS[case]
    # A solution-only cell comes first: the index a teacher is told is the one in their notebook.
    notebook = lesson(
        v4.new_markdown_cell("intro"), v4.new_code_cell("x = 1", metadata={"tags": ["solution-only"]}), bad_cell
    )
    with pytest.raises(ReleaseError) as raised:
        student_copy(notebook, "notebooks/07_bad.ipynb")
    message = str(raised.value)
    assert "notebooks/07_bad.ipynb" in message and "cell index 2 (cell 3 from the top" in message
    assert phrase in message
    assert raised.value.cell_index == 2


def test_a_marker_inside_a_solution_only_cell_is_fine_because_the_cell_goes():
    notebook = lesson(v4.new_markdown_cell("### BEGIN SOLUTION\nnotes", metadata={"tags": ["solution-only"]}))
    assert student_copy(notebook, "fixture.ipynb").cells == []


def test_one_bad_notebook_means_nothing_is_written(tmp_path):
    source = tmp_path / "notebooks"
    write(full_lesson(), source / "01_good.ipynb")
    write(lesson(v4.new_code_cell("def f():\n    # BEGIN SOLUTION\n    return 1\n")), source / "02_bad.ipynb")
    out = tmp_path / "student"
    out.mkdir()
    (out / "01_good.ipynb").write_text("an old copy\n")
    with pytest.raises(ReleaseError, match=r"02_bad\.ipynb, cell index 0"):
        release(out, source)
    assert folder_bytes(out) == {"01_good.ipynb": b"an old copy\n"}


def test_refuses_to_write_over_the_lessons_themselves(tmp_path):
    source = tmp_path / "notebooks"
    write(full_lesson(), source / "01_x.ipynb")
    before = folder_bytes(source)
    with pytest.raises(ReleaseError, match="overwrite the solutions"):
        release(source / ".." / "notebooks", source)
    assert folder_bytes(source) == before


def test_refuses_an_output_folder_inside_the_lessons_folder(tmp_path):
    source = write(full_lesson(), tmp_path / "notebooks" / "01_x.ipynb").parent
    with pytest.raises(ReleaseError, match="inside the lessons' folder"):
        release(source / "student", source)
    assert not (source / "student").exists()


def test_refuses_an_empty_or_missing_lessons_folder(tmp_path):
    with pytest.raises(ReleaseError, match="does not exist"):
        release(tmp_path / "out", tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReleaseError, match="found none"):
        release(tmp_path / "out", tmp_path / "empty")


# ---------------------------------------------------------------------------------------------
# Writing: command line, determinism, re-running, interruption
# ---------------------------------------------------------------------------------------------
def test_command_line_release_is_deterministic_and_safe_to_rerun(tmp_path, capsys):
    source = tmp_path / "notebooks"
    write(full_lesson(), source / "01_full.ipynb")
    write(lesson(v4.new_code_cell(EXERCISE_CELL)), source / "02_small.ipynb")
    out = tmp_path / "student"
    out.mkdir()
    (out / "README-class.txt").write_text("teacher's note\n")
    (out / "00_old_lesson.ipynb").write_text("{}\n")

    status, _, err = cli(capsys, "release", "--out", out, "--notebooks", source)
    assert status == 0, err
    copies = folder_bytes(out)
    status, second, err = cli(capsys, "release", "--out", out, "--notebooks", source)
    assert status == 0, err
    assert folder_bytes(out) == copies  # same bytes twice, nothing added
    assert "unchanged" in second and "wrote" not in second
    assert "00_old_lesson.ipynb" in second  # a stale copy is reported ...
    assert copies["00_old_lesson.ipynb"] == b"{}\n" and copies["README-class.txt"] == b"teacher's note\n"  # ... kept
    assert sorted(copies) == ["00_old_lesson.ipynb", "01_full.ipynb", "02_small.ipynb", "README-class.txt"]

    fresh = tmp_path / "fresh"
    assert cli(capsys, "release", "--out", fresh, "--notebooks", source)[0] == 0
    assert folder_bytes(fresh) == {
        name: data for name, data in copies.items() if name.endswith(("_full.ipynb", "_small.ipynb"))
    }
    student = nbformat.read(out / "02_small.ipynb", as_version=4)
    nbformat.validate(student)
    assert student.cells[0].source == EXERCISE_CELL_STUDENT


def three_lessons(folder: Path) -> Path:
    for name in ("02_queries", "03_scores", "09_language_model"):
        write(lesson(v4.new_code_cell(EXERCISE_CELL)), folder / f"{name}.ipynb")
    return folder


@pytest.mark.parametrize(
    "chosen", [["02", "09"], ["2", "9"], ["02_queries", "09_language_model.ipynb"], ["09", "02", "9"]]
)
def test_release_writes_only_the_lessons_named_by_number_or_name(tmp_path, capsys, chosen):
    source = three_lessons(tmp_path / "notebooks")
    out = tmp_path / "student"
    status, printed, err = cli(capsys, "release", "--out", out, "--notebooks", source, "--lessons", *chosen)
    assert status == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["02_queries.ipynb", "09_language_model.ipynb"]
    assert "2 student copies" in printed


def test_release_of_some_lessons_neither_touches_nor_calls_stale_the_copies_of_others(tmp_path, capsys):
    source = three_lessons(tmp_path / "notebooks")
    out = tmp_path / "student"
    assert cli(capsys, "release", "--out", out, "--notebooks", source)[0] == 0
    before = folder_bytes(out)
    (source / "03_scores.ipynb").write_text((source / "02_queries.ipynb").read_text().replace("double", "triple"))
    status, printed, _ = cli(capsys, "release", "--out", out, "--notebooks", source, "--lessons", "09")
    assert status == 0 and folder_bytes(out) == before  # 03's copy stays as it was released
    assert "left untouched" not in printed


@pytest.mark.parametrize("missing", ["13", "04", "attention", "3.5"])
def test_release_refuses_a_lesson_that_does_not_exist_naming_the_lessons_there_are(tmp_path, capsys, missing):
    source = three_lessons(tmp_path / "notebooks")
    out = tmp_path / "student"
    status, _, err = cli(capsys, "release", "--out", out, "--notebooks", source, "--lessons", "02", missing)
    assert status == 1 and f"there is no lesson {missing!r}" in err and "one of 02, 03, 09" in err
    assert "nothing was written" in err and not out.exists()


def test_cell_ids_missing_from_the_source_do_not_make_output_random(tmp_path):
    notebook = json.loads(nbformat.writes(full_lesson()))
    for cell in notebook["cells"]:
        del cell["id"]
    source = tmp_path / "notebooks"
    source.mkdir()
    (source / "01_no_ids.ipynb").write_text(json.dumps(notebook))
    release(tmp_path / "a", source)
    release(tmp_path / "b", source)
    assert folder_bytes(tmp_path / "a") == folder_bytes(tmp_path / "b")


def test_command_line_reports_a_bad_notebook_and_fails(tmp_path, capsys):
    source = tmp_path / "notebooks"
    write(
        lesson(v4.new_markdown_cell("x"), v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n")),
        source / "03_bad.ipynb",
    )
    status, _, err = cli(capsys, "release", "--out", tmp_path / "student", "--notebooks", source)
    assert status == 1
    assert "03_bad.ipynb, cell index 1" in err and "nothing was written" in err
    assert not (tmp_path / "student").exists()


def test_an_interrupted_write_leaves_the_old_copy_whole_and_no_temporary_files(tmp_path, monkeypatch):
    source = tmp_path / "notebooks"
    write(full_lesson(), source / "01_full.ipynb")
    out = tmp_path / "student"
    out.mkdir()
    (out / "01_full.ipynb").write_text("the copy from last week\n")

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="No space"):
        release(out, source)
    assert folder_bytes(out) == {"01_full.ipynb": b"the copy from last week\n"}


def test_student_copies_are_readable_by_others(tmp_path):
    source = tmp_path / "notebooks"
    write(full_lesson(), source / "01_full.ipynb")
    (copy,) = release(tmp_path / "student", source)
    assert copy.stat().st_mode & 0o444 == 0o444 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------------------------
# Leak test: the rule itself, then the fixture release
# ---------------------------------------------------------------------------------------------
def test_secret_lines_follow_the_rule():
    source = lesson(
        v4.new_code_cell("def f(x):\n    # BEGIN SOLUTION\n    y = x + 1\n    return y\n    # END SOLUTION\n"),
        v4.new_code_cell("def g(y):\n    return y\n"),  # `return y` is public: the lesson shows it here
        v4.new_markdown_cell("answer: z = 3", metadata={"tags": ["solution-only"]}),
    )
    assert secret_lines(json.loads(nbformat.writes(source))) == {"y = x + 1", "answer: z = 3"}


def test_the_leak_finder_finds_solutions_in_sources_outputs_and_metadata():
    """The leak test must be able to fail: plant solution text everywhere a tool could leave it."""
    secrets = {"result = x * 2  # the secret of doubling", ")"}
    leaky = json.loads(nbformat.writes(full_lesson()))  # the source itself: everything leaks
    leaky["cells"][2]["outputs"] = [
        {
            "output_type": "error",
            "ename": "E",
            "evalue": "",
            "traceback": ["----> 3 result = x * 2  # the secret of doubling"],
        }
    ]
    leaky["metadata"]["widgets"] = {"state": "x; result = x * 2  # the secret of doubling"}
    places = find_leaks(leaky, secrets)
    assert any(p.startswith("cells[1].source") for p in places)
    assert any(p.startswith("cells[2].outputs") for p in places)
    assert any(p.startswith("notebook.metadata.widgets") for p in places)
    assert not any(p.endswith("')'") for p in places)  # too short to search inside other text


def test_fixture_release_leaks_nothing(tmp_path):
    source = write(full_lesson(), tmp_path / "notebooks" / "01_full.ipynb")
    (copy,) = release(tmp_path / "student", source.parent)
    secrets = secret_lines(json.loads(source.read_text()))
    assert {"result = x * 2  # the secret of doubling", "return [value * factor for value in x]"} <= secrets
    assert find_leaks(json.loads(copy.read_text()), secrets) == []


# ---------------------------------------------------------------------------------------------
# The real lessons (whatever exists in notebooks/ when the tests are collected)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(params=LESSONS, ids=[path.stem for path in LESSONS])
def released_lesson(request, tmp_path):
    """(source JSON, student JSON) for one lesson, released through the public API."""
    source_dir = tmp_path / "notebooks"
    source_dir.mkdir()
    (source_dir / request.param.name).write_bytes(request.param.read_bytes())
    (copy,) = release(tmp_path / "student", source_dir)
    return request.param, json.loads(request.param.read_text()), json.loads(copy.read_text())


def test_lesson_student_copy_leaks_no_solution_line(released_lesson):
    path, source, student = released_lesson
    secrets = secret_lines(source)
    assert secrets, f"{path.name} has no solution lines at all: where are its exercises?"
    assert find_leaks(student, secrets) == []


def test_lesson_student_copy_does_not_point_at_a_folded_solution(released_lesson):
    path, source, student = released_lesson
    markdown = ["".join(cell["source"]) for cell in student["cells"] if cell["cell_type"] == "markdown"]
    assert not [text for text in markdown if "folded" in text or "click the bar" in text], path.name
    before = sum(cell["cell_type"] == "markdown" for cell in source["cells"])
    assert len(markdown) == before - sum(
        cell["cell_type"] == "markdown" and "solution-only" in cell["metadata"].get("tags", [])
        for cell in source["cells"]
    )  # the note goes, its cell stays


def test_lesson_student_copy_has_no_outputs_counts_or_widget_state(released_lesson):
    _, _, student = released_lesson
    assert set(student["metadata"]) <= {"kernelspec", "language_info"}
    assert student["metadata"]["kernelspec"]["name"] == "python3"
    for cell in student["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_lesson_exercises_follow_the_course_convention(released_lesson):
    """At least two exercises, each the body of a function, each followed by a check cell."""
    path, source, student = released_lesson
    notebook = nbformat.reads(json.dumps(source), as_version=4)
    exercises = find_exercises(notebook, path.name)
    assert len(exercises) >= 2, f"{path.name}: {len(exercises)} exercise(s), the course asks for at least two"
    for exercise in exercises:
        assert exercise.function, (
            f"{path.name} cell index {exercise.cell_index}: a solution region outside a function body"
        )
        following = [c for c in notebook.cells[exercise.cell_index + 1 :] if c.cell_type == "code"]
        following = [c for c in following if "solution-only" not in c.metadata.get("tags", [])]
        assert following and re.search(r"\bcheck_\w+\(", following[0].source), (
            f"{path.name} cell index {exercise.cell_index}: the next code cell should call a check "
            "from course.exercises"
        )
    for cell in student["cells"]:
        if cell["cell_type"] == "code" and "raise NotImplementedError()" in _text(cell["source"]):
            compile(_text(cell["source"]), f"{path.name} student cell", "exec")
    assignments.nbgrader_source(notebook, path.name)  # the teacher's nbgrader route works too


# ---------------------------------------------------------------------------------------------
# course/exercises/feedback.py: the verdicts a student sees
# ---------------------------------------------------------------------------------------------
def _learner_not_attempted():
    raise NotImplementedError()


def test_run_check_reports_a_pass(capsys):
    verdict = run_check("doubling", lambda: "twice the input, as it should be.")
    assert verdict == Verdict("doubling", "pass", "twice the input, as it should be.") and verdict.passed
    assert capsys.readouterr().out == "[PASS] doubling: twice the input, as it should be.\n"


def test_run_check_reports_the_hint_of_a_wrong_answer(capsys):
    def body() -> str:
        raise wrong("you added instead of multiplying.")

    verdict = run_check("doubling", body)
    assert verdict.status == "wrong" and not verdict.passed
    assert capsys.readouterr().out == "[NOT YET] doubling: you added instead of multiplying.\n"


def test_run_check_reports_not_attempted_for_a_student_copy(capsys):
    verdict = run_check("doubling", lambda: _learner_not_attempted())
    assert verdict.status == "not attempted"
    out = capsys.readouterr().out
    assert out.startswith("[NOT YET] doubling: not attempted yet: ") and "NotImplementedError()` in the" in out


def test_run_check_turns_a_crash_in_learner_code_into_a_hint(capsys):
    verdict = run_check("doubling", lambda: str(1 / 0))
    assert verdict.status == "wrong" and "ZeroDivisionError" in verdict.message
    assert capsys.readouterr().out.startswith("[NOT YET] doubling: your code raised ZeroDivisionError")


def test_run_check_lets_an_interrupt_through():
    def body() -> str:
        raise KeyboardInterrupt  # a learner stopping a slow answer must really stop it

    with pytest.raises(KeyboardInterrupt):
        run_check("slow", body)


def test_as_tensor_accepts_lists_and_either_dtype_and_names_what_it_got():
    assert as_tensor([1, 2], "x").dtype == torch.float64
    assert torch.equal(as_tensor(torch.ones(2, dtype=torch.float32), "x"), torch.ones(2, dtype=torch.float64))
    with pytest.raises(Exception, match="the result should be a tensor, got str"):
        as_tensor("abc", "the result")


def test_expect_shape_names_both_shapes():
    expect_shape(torch.zeros(2, 3), (2, 3), "scores")
    with pytest.raises(Exception, match=r"scores \(L, S\) should have shape \(2, 3\), got \(3, 2\)"):
        expect_shape(torch.zeros(3, 2), (2, 3), "scores (L, S)")


def test_close_accepts_float32_answers_within_tolerance_only():
    exact = torch.linspace(0, 1, 7, dtype=torch.float64)
    assert close(exact.float(), exact)
    assert not close(exact + 1e-2, exact)
    assert not close(exact[:6], exact)  # a shape mismatch is never close


def test_diagnose_names_the_first_matching_mistake_else_the_fallback():
    expected = torch.tensor([2.0, 4.0])
    mistakes = {"you added 1": torch.tensor([2.0, 3.0]), "you squared": torch.tensor([1.0, 4.0])}
    assert str(diagnose(torch.tensor([1.0, 4.0]), mistakes, "numbers differ")) == "you squared"
    assert str(diagnose(expected + 5, mistakes, "numbers differ")) == "numbers differ"


# ---------------------------------------------------------------------------------------------
# nbgrader source notebooks (nbgrader itself runs in test_nbgrader_term.py)
# ---------------------------------------------------------------------------------------------
def _graded_fixture() -> nbformat.NotebookNode:
    return lesson(
        v4.new_code_cell("from course.exercises.lesson02 import check_cross_attention_inputs, check_linear_projection"),
        v4.new_code_cell(
            "def linear_projection(x, weight, bias):\n    # BEGIN SOLUTION\n    return x @ weight.T + bias\n"
            "    # END SOLUTION"
        ),
        v4.new_markdown_cell(
            "Now check it.\n\n*The reference solution in the cell above is folded away: click the bar.*"
        ),
        v4.new_code_cell("_ = check_linear_projection(linear_projection)"),
        v4.new_code_cell(
            "def double(x):\n    # BEGIN SOLUTION\n    return 2 * x\n    # END SOLUTION\n\n\n"
            "def cross_attention_inputs(target, source, q_proj, k_proj, v_proj):\n    # BEGIN SOLUTION\n"
            "    return q_proj(target), k_proj(source), v_proj(source)\n    # END SOLUTION"
        ),
        v4.new_code_cell("double(1)", metadata={"tags": ["solution-only"]}),
        v4.new_code_cell(
            "print('checking')\ncheck_linear_projection(\n    linear_projection,\n)\n"
            "_ = check_cross_attention_inputs(cross_attention_inputs)"
        ),
    )


def test_nbgrader_source_marks_answers_and_turns_checks_into_graded_tests():
    graded = assignments.nbgrader_source(_graded_fixture(), "fixture.ipynb")
    assert len(graded.cells) == 6  # the solution-only cell is gone
    answer, check = graded.cells[1].metadata.nbgrader, graded.cells[3].metadata.nbgrader
    assert answer == {
        "grade": False,
        "grade_id": "linear_projection-1-answer",
        "locked": False,
        "schema_version": 3,
        "solution": True,
        "task": False,
    }
    assert check["grade"] and check["points"] == 1 and check["locked"]
    assert check["grade_id"] == "linear_projection-1-check"
    assert "# BEGIN SOLUTION" in graded.cells[1].source  # nbgrader strips the solution itself
    imports = "from course.grading import graded  # refuses a check that is not the course's own\n\n"
    assert graded.cells[3].source.startswith(
        "from course.exercises.lesson02 import check_linear_projection\n"
        + imports
        + '_verdict_1 = graded(check_linear_projection, "linear_projection")\n'
        "assert all(verdict.passed for verdict in (_verdict_1,)), "
    )
    assert graded.cells[5].source.startswith(
        "from course.exercises.lesson02 import check_linear_projection, check_cross_attention_inputs\n"
        + imports
        + "print('checking')\n"
        '_verdict_1 = graded(check_linear_projection, "linear_projection")\n'
        '_verdict_2 = graded(check_cross_attention_inputs, "cross_attention_inputs")\n'
        "assert all(verdict.passed for verdict in (_verdict_1, _verdict_2)), "
    )
    assert graded.cells[4].metadata.nbgrader["grade_id"] == "double-cross_attention_inputs-4-answer"
    assert graded.cells[5].metadata.nbgrader["points"] == 2
    assert "folded" not in graded.cells[2].source and graded.cells[2].source == "Now check it."


def _right_projection(x, weight, bias):
    return x @ weight.T + bias


def _wrong_projection(x, weight, bias):
    return x @ weight + bias


def _not_attempted(*args):
    raise NotImplementedError()


@pytest.mark.parametrize(
    "projection, raises",
    [
        (_right_projection, None),
        (_wrong_projection, AssertionError),
        (_not_attempted, AssertionError),
        (None, NameError),
    ],
)
def test_a_graded_check_cell_fails_unless_the_course_check_passes(projection, raises, capsys):
    cell = assignments.nbgrader_source(_graded_fixture(), "fixture.ipynb").cells[3].source
    fake = lambda f: Verdict("projection", "pass", "forged")  # noqa: E731 - an answer cell's redefinition
    namespace = {"check_linear_projection": fake}
    if projection is not None:
        namespace["linear_projection"] = projection
    if raises is None:
        exec(cell, namespace)
    else:
        with pytest.raises(raises):
            exec(cell, namespace)
    assert "forged" not in capsys.readouterr().out  # the locked cell imported the course's own check


def test_a_check_rebound_in_its_module_is_refused(monkeypatch):
    import course.exercises.lesson02 as lesson02
    from course.grading import NotGenuine, graded

    real = lesson02.check_linear_projection
    linear_projection = _wrong_projection  # noqa: F841 - looked up by name
    monkeypatch.setattr(lesson02, "check_linear_projection", lambda f: Verdict("projection", "pass", "forged"))
    with pytest.raises(NotGenuine, match="not one of the course's checks"):
        graded(lesson02.check_linear_projection, "linear_projection")

    def check_linear_projection(f):  # same name and module, compiled outside the course
        return real(f)

    check_linear_projection.__module__ = "course.exercises.lesson02"
    monkeypatch.setattr(lesson02, "check_linear_projection", check_linear_projection)
    with pytest.raises(NotGenuine, match="replaced"):
        graded(check_linear_projection, "linear_projection")


def test_nbgrader_source_refuses_an_exercise_without_a_check_cell():
    notebook = lesson(
        v4.new_code_cell("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION"), v4.new_code_cell("f")
    )
    with pytest.raises(ReleaseError, match=r"fixture\.ipynb, cell index 0.*check_"):
        assignments.nbgrader_source(notebook, "fixture.ipynb")


def test_nbgrader_command_writes_one_assignment_folder_per_lesson(tmp_path, capsys):
    source = write(_graded_fixture(), tmp_path / "notebooks" / "01_double.ipynb")
    status, _, err = cli(capsys, "nbgrader", "--out", tmp_path / "classroom" / "source", "--notebooks", source.parent)
    assert status == 0, err
    written = tmp_path / "classroom" / "source" / "01_double" / "01_double.ipynb"
    graded = nbformat.read(written, as_version=4)
    nbformat.validate(graded)
    assert graded.cells[1].metadata.nbgrader["solution"] is True
    config = tmp_path / "classroom" / "nbgrader_config.py"
    assert "c.CourseDirectory.course_id" in config.read_text() and "RefuseReleaseCopies" in config.read_text()
    assert "warning" not in err  # the template sandboxes autograde
    config.write_text("# the teacher's own\n")
    status, _, err = cli(capsys, "nbgrader", "--out", tmp_path / "classroom" / "source", "--notebooks", source.parent)
    assert status == 0
    assert config.read_text() == "# the teacher's own\n"  # never overwritten
    # ... but a config without the sandbox (written before issue 48) is named, with what to copy into it
    assert "does not sandbox autograde" in err and "nbgrader_config.template" in err


def test_nbgrader_exam_mode_hides_the_checks_between_nbgraders_hidden_test_markers():
    graded = assignments.nbgrader_source(_graded_fixture(), "fixture.ipynb", hide_checks=True)
    lines = graded.cells[3].source.split("\n")
    assert lines[0] == "### BEGIN HIDDEN TESTS" and lines[-1] == "### END HIDDEN TESTS"
    assert lines[1:-1] == assignments.nbgrader_source(_graded_fixture(), "fixture.ipynb").cells[3].source.split("\n")
    assert graded.cells[3].metadata.nbgrader["grade"] is True


# ---------------------------------------------------------------------------------------------
# Solutions collapsed in the lessons (self-study)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lesson", LESSONS, ids=[path.stem for path in LESSONS])
def test_every_solution_cell_of_every_lesson_is_collapsed(lesson):
    cells = json.loads(lesson.read_text(encoding="utf-8"))["cells"]
    solutions = [
        index
        for index, cell in enumerate(cells)
        if "# BEGIN SOLUTION" in [line.strip() for line in "".join(cell["source"]).split("\n")]
        or "solution-only" in cell["metadata"].get("tags", [])
    ]
    assert solutions, "every lesson has exercises"
    open_cells = [i for i in solutions if cells[i]["metadata"].get("jupyter", {}).get("source_hidden") is not True]
    assert open_cells == [], (
        f"solution cells {open_cells} of {lesson.name} are not collapsed: run "
        "`.venv/bin/python -m course.assignments collapse`"
    )


def test_collapse_changes_only_solution_metadata_and_is_idempotent(tmp_path, capsys):
    lessons = tmp_path / "notebooks"
    lessons.mkdir()
    source = v4.new_notebook(
        cells=[
            v4.new_markdown_cell("# Exercise"),
            v4.new_code_cell("def f(x):\n    # BEGIN SOLUTION\n    return 2 * x\n    # END SOLUTION"),
            v4.new_code_cell("check_f(f)"),
            v4.new_markdown_cell("Why it works.", metadata={"tags": ["solution-only"]}),
            v4.new_code_cell("x = 1  # mentions BEGIN SOLUTION only in a comment"),
        ]
    )
    path = lessons / "01.ipynb"
    path.write_text(nbformat.writes(source) + "\n", encoding="utf-8")
    before = json.loads(path.read_text())
    assert assignments.main(["collapse", "--notebooks", str(lessons), "--check"]) == 1
    assert json.loads(path.read_text()) == before  # --check changes nothing
    assert assignments.main(["collapse", "--notebooks", str(lessons)]) == 0
    after = json.loads(path.read_text())
    hidden = [cell["metadata"].get("jupyter", {}).get("source_hidden", False) for cell in after["cells"]]
    assert hidden == [False, True, False, True, False]
    for old, new in zip(before["cells"], after["cells"], strict=True):
        new["metadata"].pop("jupyter", None)
        assert old == new  # nothing but that metadata changed
    text = path.read_text()
    assert assignments.main(["collapse", "--notebooks", str(lessons)]) == 0
    assert path.read_text() == text  # idempotent, byte for byte
    assert "unchanged" in capsys.readouterr().out
    assert assignments.main(["collapse", "--notebooks", str(lessons), "--check"]) == 0


def test_student_copies_do_not_carry_the_collapsed_metadata():
    copy = student_copy(nbformat.reads(LESSONS[0].read_text(), as_version=4), LESSONS[0].name)
    assert all("jupyter" not in cell.metadata for cell in copy.cells)


def test_nbgrader_source_drops_the_solution_runs_widget_state():
    # A lesson just executed holds its widgets' state, written while its solutions ran (lessons are committed
    # without it, course.notebook_metadata; a teacher's lesson run through nbconvert has it again).
    path = next((ROOT / "notebooks").glob("04_*.ipynb"))
    lesson = assignments._read(path)
    state = {"m1": {"model_name": "AnyModel", "state": {"_esm": "solution = 'x @ w'"}}}
    lesson.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state, "version_major": 2}}
    graded = assignments.nbgrader_source(lesson, str(path))
    assert "widgets" not in graded.metadata and graded.metadata["kernelspec"]["name"] == "python3"
    assert "widgets" in lesson.metadata  # the lesson itself is untouched


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--memory", "0", "argument --memory: expected at least 1 MiB, got 0"),
        ("--memory", "lots", "argument --memory: expected a whole number of MiB, got 'lots'"),
        ("--output-cap", "-1", "argument --output-cap: expected at least 1 byte, got -1"),
        ("--output-cap", "1e6", "argument --output-cap: expected a whole number of bytes, got '1e6'"),
        ("--notebook-timeout", "0", "argument --notebook-timeout: expected at least 1 second, got 0"),
    ],
)
def test_check_refuses_a_limit_below_one_in_its_own_unit(option, value, expected, capsys):
    with pytest.raises(SystemExit) as exit_:
        assignments.main(["check", option, value, "x.ipynb"])
    assert exit_.value.code == 2 and expected in capsys.readouterr().err


def test_release_of_a_lesson_that_does_not_exist_asks_for_one_that_does_not_for_a_fixed_notebook(tmp_path, capsys):
    source = three_lessons(tmp_path / "notebooks")
    status, _, err = cli(capsys, "release", "--out", tmp_path / "student", "--notebooks", source, "--lessons", "99")
    assert status == 1 and "there is no lesson '99'" in err and "one of 02, 03, 09" in err
    assert "name lessons that exist" in err and "fix the notebook" not in err
    assert not (tmp_path / "student").exists()
