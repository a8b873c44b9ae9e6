"""A teacher's term with the real nbgrader, on lesson 03 (issue 26), and the course's ``check`` beside it.

``course.assignments nbgrader`` writes the source notebook and the config template → ``nbgrader
generate_assignment`` → four students' submissions made here (one right, one with typical mistakes the checks
know, one whose code loops, then is right, then raises, and one who copies two answers from the teacher's solution
notebooks by absolute path, issue 48) → ``nbgrader autograde`` → ``nbgrader generate_feedback``. Both routes run
the students' code in the course's sandbox (:mod:`course.grading.nbgrader_kernel` for nbgrader), so the copied
answers score 0 in both.
The scores in nbgrader's gradebook, the feedback each student sees and the course's own ``check`` on the same
submissions must all say what the checks' verdicts say, and no release or feedback file may hold solution text. A
fifth student hands in a ``make release`` copy, which nbgrader must refuse loudly. The two gradings run side by
side.

Issue 26 asked for lessons 02 and 03; lesson 03 alone holds every case (three exercises: a loop in the first, a
right answer after it, an error in the last), and each submission costs two executions of a lesson plus, for the
loop, two 20 s waits: one lesson instead of two took this file from 150 s to about 70 (issue 37).
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.assignments import NOTEBOOKS_DIR, find_exercises, release
from course.grading.checker import sandbox_unavailable

LESSONS = ["03_scaled_dot_product_attention"]
NBGRADER = [sys.executable, "-m", "nbgrader"]
CELL_TIMEOUT_S = 20  # the looping answer is stopped after this; on a loaded runner the import cell can take 10 s

RIGHT = {
    "attention_weights": "return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)",
    "padding_to_attn_mask": "return ~key_padding_mask[:, None, :]",
    "masked_attention": "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
    "scores = scores.masked_fill(~mask, float('-inf'))\n"
    "return torch.softmax(scores, dim=-1) @ v",
}
# Each student's answer body (4 spaces in) per exercise function.
ANSWERS = {
    "alice": RIGHT,
    "bob": {  # typical mistakes, each one the checks name
        "attention_weights": "return torch.softmax(q @ k.transpose(-2, -1), dim=-1)",
        "padding_to_attn_mask": "return key_padding_mask[:, None, :]",
        "masked_attention": "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0) @ v",
    },
    # An answer that never returns, a right one after it, code that raises. Both graders interrupt the loop
    # (0 points) and grade the two exercises after it (issue 38: `check` used to stop the notebook there and score
    # them 0). The loop is the first exercise's: lesson 03 calls masked_attention again after its check, so a loop
    # there would cost nbgrader two timeouts. It sleeps, so that both graders' 20 s waits leave the cores to other
    # tests; the checker's own test stops a spinning loop (test_checking_submissions.py).
    "carol": {
        "attention_weights": "import time\nwhile True:\n    time.sleep(0.05)",
        "padding_to_attn_mask": RIGHT["padding_to_attn_mask"],
        "masked_attention": "return undefined_name",
    },
}


def cheat(function: str) -> str:
    """The body of an answer that reads the teacher's solution notebook by absolute path (the course's
    notebooks/, or nbgrader's source/ folder: ``{classroom}`` is filled in by the fixture) and runs its answer."""
    paths = [str(NOTEBOOKS_DIR / f"{LESSONS[0]}.ipynb"), f"{{classroom}}/source/{LESSONS[0]}/{LESSONS[0]}.ipynb"]
    return "\n".join(
        [
            "arguments = dict(locals())",
            "import json, pathlib",
            "cells = None",
            f"for path in {paths!r}:",
            "    try:",
            "        cells = json.loads(pathlib.Path(path).read_text())['cells']",
            "        break",
            "    except OSError:",
            "        pass",
            "if cells is None:",
            "    raise FileNotFoundError('no solution notebook could be read')",
            f"stolen = next(''.join(c['source']) for c in cells if 'def {function}(' in ''.join(c['source']))",
            "scope = dict(globals())",
            "exec(stolen, scope)",
            f"return scope['{function}'](**arguments)",
        ]
    )


# eve copies two answers from the solutions (issue 48: nbgrader, which ran her code as the teacher, gave her the
# points that `check`'s sandbox refused) and writes the third herself.
ANSWERS["eve"] = {
    "attention_weights": cheat("attention_weights"),
    "padding_to_attn_mask": RIGHT["padding_to_attn_mask"],
    "masked_attention": cheat("masked_attention"),
}
CHEATED = {"attention_weights", "masked_attention"}
VERDICTS = {
    "alice": dict.fromkeys(RIGHT, "pass"),
    "bob": dict.fromkeys(RIGHT, "wrong"),
    "carol": {"attention_weights": "error", "padding_to_attn_mask": "pass", "masked_attention": "wrong"},
    "eve": {"padding_to_attn_mask": "pass"},  # her copied answers: see expected_verdict
}
TIMED_OUT = {("carol", "attention_weights")}  # the check says "error" (it never finished), nbgrader scores 0


def expected_verdict(student: str, function: str) -> str:
    if student == "eve" and function in CHEATED:
        # Both routes sandboxed: the solutions are not there. Where no sandbox can be made, both run unsandboxed
        # (check --no-sandbox, sandboxed = False) and the copied answers pass in both: the reason for the sandbox.
        return "pass" if sandbox_unavailable() else "wrong"
    return VERDICTS[student][function]


def solution_lines() -> set[str]:
    """Every line of the two lessons' solution regions (long enough to mean something)."""
    lines = set()
    for name in LESSONS:
        notebook = json.loads((NOTEBOOKS_DIR / f"{name}.ipynb").read_text())
        for cell in notebook["cells"]:
            inside = False
            for line in "".join(cell["source"]).split("\n"):
                if line.strip() in ("# BEGIN SOLUTION", "# END SOLUTION"):
                    inside = line.strip() == "# BEGIN SOLUTION"
                elif inside and len(line.strip()) >= 12:
                    lines.add(line.strip())
    return lines


def answered(release_copy: Path, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The released notebook with each answer cell's placeholder replaced by the student's body."""
    notebook = nbformat.read(release_copy, as_version=4)
    for cell in notebook.cells:
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        for function, body in answers.items():
            pattern = rf"(def {function}\(.*?\):\n(?:.*\n)*?)    # YOUR CODE HERE\n    raise NotImplementedError\(\)"
            indented = "\n".join("    " + line for line in body.split("\n"))
            cell.source = re.sub(pattern, lambda m, indented=indented: m.group(1) + indented, cell.source)
    return notebook


# nbgrader runs `alembic` from PATH: the environment's scripts folder must be on it (as in an activated venv).
ENV = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def run(command: list, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=ENV)


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    root = tmp_path_factory.mktemp("term")
    lessons = root / "lessons"
    lessons.mkdir()
    for name in LESSONS:
        shutil.copy(NOTEBOOKS_DIR / f"{name}.ipynb", lessons)
    course = root / "classroom"
    made = run(
        [sys.executable, "-m", "course.assignments", "nbgrader", "--notebooks", lessons, "--out", course / "source"],
        root,
    )
    assert made.returncode == 0, made.stderr
    config = course / "nbgrader_config.py"
    config.write_text(
        config.read_text()
        + "\nc.Autograde.create_student = True\n"
        + f"c.ExecutePreprocessor.timeout = {CELL_TIMEOUT_S}\n"
        # as `check --no-sandbox` below, where this machine cannot make a sandbox
        + ("c.SandboxedKernelManager.sandboxed = False\n" if sandbox_unavailable() else "")
    )
    for name in LESSONS:
        generated = run([*NBGRADER, "generate_assignment", name, "--force"], course)
        assert generated.returncode == 0, generated.stdout + generated.stderr
    handed_in = []
    for student, answers in ANSWERS.items():
        for name in LESSONS:
            target = course / "submitted" / student / name / f"{name}.ipynb"
            target.parent.mkdir(parents=True)
            answers = {function: body.replace("{classroom}", str(course)) for function, body in answers.items()}
            nbformat.write(answered(course / "release" / name / f"{name}.ipynb", answers), target)
            handed_in.append(target)
    # dave hands in the `make release` copy of the lesson (the other route), answered right.
    copies = release(root / "student", lessons)
    dave = course / "submitted" / "dave" / LESSONS[0] / f"{LESSONS[0]}.ipynb"
    dave.parent.mkdir(parents=True)
    shutil.copy(copies[0], dave)
    # The course's check on the same submissions, side by side with nbgrader. One notebook at a time, as nbgrader
    # grades: with both at once plus nbgrader's kernel on two cores, a busy runner's import cell outran the timeout.
    command = [sys.executable, "-m", "course.assignments", "check", "--jobs", "1", "--timeout", str(CELL_TIMEOUT_S)]
    command += ["--no-sandbox"] if sandbox_unavailable() else []  # .ci/run installs bubblewrap: the same verdicts
    command += ["--notebooks", str(lessons), "--out", str(root / "grades"), *map(str, handed_in)]
    checking = subprocess.Popen(
        command,
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    autograded = {name: run([*NBGRADER, "autograde", name], course) for name in LESSONS}
    refused = autograded[LESSONS[0]]
    for name in LESSONS:
        feedback = run([*NBGRADER, "generate_feedback", name], course)
        assert feedback.returncode == 0, feedback.stdout + feedback.stderr
    check_out, check_err = checking.communicate(timeout=600)
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for name in LESSONS:
            notebook = gradebook.find_notebook(name, name)
            for cell in notebook.grade_cells:
                function = cell.name.rsplit("-", 2)[0]
                for student in ANSWERS:
                    grade = gradebook.find_grade(cell.name, name, name, student)
                    scores[student, name, function] = (grade.score, cell.max_score)
    return {
        "course": course,
        "root": root,
        "scores": scores,
        "refused": refused,
        "check_status": checking.returncode,
        "check_rows": list(csv.reader(io.StringIO(check_out), delimiter="\t"))[1:],
        "check_err": check_err,
    }


def test_every_exercise_is_graded_by_nbgrader_as_its_check_says(term):
    functions = {e.function for name in LESSONS for e in find_exercises(_lesson(name), name)}
    assert {function for _, _, function in term["scores"]} == functions
    for (student, _, function), (score, max_score) in term["scores"].items():
        assert max_score == 1, function  # each check is worth 1 point
        assert score == (1 if expected_verdict(student, function) == "pass" else 0), (student, function, score)


def test_the_course_check_gives_the_same_verdicts_and_points_as_nbgrader(term):
    rows = {(row[0], row[1], row[2]): row for row in term["check_rows"] if row[2] != "(notebook)"}
    assert set(rows) == set(term["scores"])
    for key, row in rows.items():
        student, _, function = key
        assert row[3] == expected_verdict(student, function), row
        assert float(row[4]) == term["scores"][key][0], (row, term["scores"][key])
    assert term["check_status"] == 1, "carol's loop could not be graded: the exit status says so"
    assert {(row[0], row[2]) for row in term["check_rows"] if row[3] == "error" and row[2] != "(notebook)"} == TIMED_OUT
    book = list(csv.reader((term["root"] / "grades" / "gradebook.csv").open()))
    assert book[0] == ["student", "lesson", "exercise", "verdict", "points", "message"] and len(book) == 1 + len(
        term["check_rows"]
    )


def test_the_nbgrader_routes_totals_are_the_checks_totals(term):
    """Per student and lesson, and over all lessons: the points, points possible, exercises not graded (carol's loop:
    check's error rows, nbgrader's [ERROR] verdicts) and lessons handed in that nbgrader's gradebook gives
    (course.grading.nbgrader.nbgrader_totals) are those of check's totals.csv for the same submissions."""
    from course.grading.nbgrader import nbgrader_totals

    totals = nbgrader_totals(term["course"] / "gradebook.db")
    ours = {(row[0], row[1]): row[2:6] for row in totals if row[0] in ANSWERS}
    columns = ["points", "out of", "not graded", "handed in"]
    with (term["root"] / "grades" / "totals.csv").open(encoding="utf-8") as file:
        checks = {(row["student"], row["lesson"]): [row[c] for c in columns] for row in csv.DictReader(file)}
    assert any(row[2] != "0" for row in checks.values()), "carol's loop: some exercise was not graded"
    assert ours == checks and len(ours) == 2 * len(ANSWERS), (ours, checks)


def test_each_student_sees_the_checks_verdicts_in_nbgraders_feedback(term):
    for student in ANSWERS:
        for name in LESSONS:
            page = term["course"] / "feedback" / student / name / f"{name}.html"
            text = " ".join(html.unescape(page.read_text()).split())
            for row in term["check_rows"]:
                if row[0] == student and row[1] == name and row[3] in ("pass", "wrong"):
                    mark = "[PASS]" if row[3] == "pass" else "[NOT YET]"
                    assert mark in text and row[5][:60] in text, (student, row)


def test_no_release_or_feedback_file_holds_solution_text(term):
    secrets = solution_lines()
    assert len(secrets) >= 5
    files = [*(term["course"] / "release").rglob("*.ipynb"), *(term["course"] / "feedback").rglob("*.html")]
    assert len(files) == len(LESSONS) * (1 + len(ANSWERS))
    for path in files:
        text = html.unescape(path.read_text())
        if path.suffix == ".ipynb":  # JSON escapes quotes: compare the cell sources
            text = "\n".join(cell.source for cell in nbformat.reads(path.read_text(), as_version=4).cells)
        leaked = [line for line in secrets if line in text]
        assert leaked == [], (path, leaked)
    for path in (term["course"] / "release").rglob("*.ipynb"):
        assert "folded away" not in path.read_text()


def test_a_make_release_copy_is_refused_loudly_by_nbgrader(term):
    refused = term["refused"]
    assert refused.returncode != 0
    assert (
        "make release" in refused.stdout + refused.stderr
        and "course.assignments check" in refused.stdout + refused.stderr
    )


def _lesson(name: str) -> nbformat.NotebookNode:
    from course.assignments import _read

    return _read(NOTEBOOKS_DIR / f"{name}.ipynb")


def test_a_looping_answer_scores_0_and_the_exercises_after_it_still_run_in_both_routes(term):
    lesson = LESSONS[0]
    rows = {row[2]: row for row in term["check_rows"] if row[0] == "carol" and row[1] == lesson}
    functions = [e.function for e in find_exercises(_lesson(lesson), lesson)]
    assert functions == ["attention_weights", "padding_to_attn_mask", "masked_attention"]
    assert rows["attention_weights"][3:5] == ["error", "0"] and "timed out" in rows["attention_weights"][5]
    assert "the rest of the notebook ran" in rows["(notebook)"][5], rows["(notebook)"]
    # after the loop: graded, one right (1 point in both routes: it ran), one raising (its own message)
    assert rows["padding_to_attn_mask"][3:5] == ["pass", "1"], rows["padding_to_attn_mask"]
    assert rows["masked_attention"][3] == "wrong" and "undefined_name" in rows["masked_attention"][5]
    nbgrader = [term["scores"]["carol", lesson, function][0] for function in functions]
    assert nbgrader == [0, 1, 0]
    assert [float(rows[function][4]) for function in functions] == nbgrader


@pytest.mark.skipif(sandbox_unavailable() is not None, reason="no sandbox here: both routes run the cheat unsandboxed")
def test_a_student_who_copies_the_solutions_by_path_scores_0_for_them_in_both_routes(term):
    lesson = LESSONS[0]
    rows = {row[2]: row for row in term["check_rows"] if row[0] == "eve" and row[1] == lesson}
    for function in CHEATED:
        assert term["scores"]["eve", lesson, function][0] == 0, function  # nbgrader ran her code in the sandbox
        assert rows[function][3:5] == ["wrong", "0"] and "no solution notebook" in rows[function][5], rows[function]
    assert term["scores"]["eve", lesson, "padding_to_attn_mask"][0] == 1  # her own answer still counts
    assert rows["padding_to_attn_mask"][3:5] == ["pass", "1"]
    # The files she tried exist outside the sandbox: it is the sandbox, not a wrong path, that stopped her.
    assert (NOTEBOOKS_DIR / f"{lesson}.ipynb").is_file()
    assert (term["course"] / "source" / lesson / f"{lesson}.ipynb").is_file()
