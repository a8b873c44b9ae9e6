"""nbgrader's autograde computes each verdict outside its kernel, as ``check`` does (issue 48, item 2).

A lesson whose five exercises are all graded by lesson 02's projection check goes through the real nbgrader
(``course.assignments nbgrader``, ``generate_assignment``, ``autograde``) and through ``check``, with one student,
mallory: two answers that call a reference answer (``from course.exercises.lesson11 import reference_...``,
``import course.exercises.lesson11 as m; m.reference_...``), which the kernel must not hold (where it did, the check
refused them by name), two wrong answers that forge a pass (one prints ``[PASS]`` and sends nbgrader a number it
reads as partial credit; one defines its own ``check_...`` and an ``all`` that makes the test cell's assert pass:
each scored 1 under nbgrader while its kernel ran the checks), and one right answer. The teacher's source also
holds a test cell of their own (an assert on her answer), which must still run in the kernel. Both routes must
give the same points: 1 for the right answer, 0 for the rest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course.grading import checker, sandbox

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"),
]

LESSON = "02_reach"
KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
IMPORT = "from course.exercises.lesson02 import check_linear_projection"
RIGHT = "return x @ weight.T + bias"
WRONG = "return x @ weight + bias"  # square weights: the shape is right, the numbers are not

# Each exercise's answer cell as mallory hands it in, and the points both routes must give it.
ANSWERS = {
    "proj_reference_import": (
        "def proj_reference_import(x, weight, bias):\n"
        "    from course.exercises.lesson11 import reference_cache_bytes\n\n"
        "    assert reference_cache_bytes('MHA', 1, 1, 1, 1, 1, 1) == 4\n"
        f"    {RIGHT}",
        0,
    ),
    "proj_reference_module": (
        "def proj_reference_module(x, weight, bias):\n"
        "    import course.exercises.lesson11 as m\n\n"
        "    assert m.reference_cache_bytes('MHA', 1, 1, 1, 1, 1, 1) == 4\n"
        f"    {RIGHT}",
        0,
    ),
    # Printed while the check calls it, in the test cell; the displayhook sends an execute_result "1", which
    # nbgrader reads as the cell's score when it comes before any error.
    "proj_prints_pass": (
        "def proj_prints_pass(x, weight, bias):\n"
        "    print('[PASS] proj_prints_pass: right')\n"
        "    get_ipython().displayhook(1)\n"
        f"    {WRONG}",
        0,
    ),
    # Its own check, and an `all` that the test cell's `assert all(verdict.passed ...)` would have found first.
    "proj_own_check": (
        "def check_linear_projection(function):\n"
        "    print(f'[PASS] {function.__name__}: right')\n\n\n"
        "all = lambda verdicts: True\n\n\n"
        f"def proj_own_check(x, weight, bias):\n    {WRONG}",
        0,
    ),
    "proj_right": (f"def proj_right(x, weight, bias):\n    {RIGHT}", 1),
}
# The teacher's own test cell: her proj_own_check is wrong, so it raises in the kernel (0 of its 1 point).
TEACHERS_TEST = (
    "import torch\n\n"
    "x, weight, bias = torch.ones(1, 2), torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.zeros(2)\n"
    "assert torch.equal(proj_own_check(x, weight, bias), x @ weight.T + bias), 'the teacher test'"
)
NBGRADER = [sys.executable, "-m", "nbgrader"]
# nbgrader runs `alembic` from PATH: the environment's scripts folder must be on it (as in an activated venv).
ENV = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def run(command: list, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=ENV)


def write_lesson(path: Path) -> None:
    cells = [IMPORT]
    for function in ANSWERS:
        solution = f"def {function}(x, weight, bias):\n    # BEGIN SOLUTION\n    {RIGHT}\n    # END SOLUTION"
        cells += [solution, f"check_linear_projection({function})"]
    path.parent.mkdir(parents=True)
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell(text) for text in cells], metadata=KERNELSPEC), path)


def add_teachers_test(source: Path) -> None:
    notebook = nbformat.read(source, as_version=4)
    cell = v4.new_code_cell(TEACHERS_TEST)
    cell.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": "teachers-test",
        "locked": True,
        "points": 1,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    notebook.cells.append(cell)
    nbformat.write(notebook, source)


def hand_in(release_copy: Path, target: Path) -> Path:
    """The released notebook with each answer cell replaced by mallory's."""
    notebook = nbformat.read(release_copy, as_version=4)
    for cell in notebook.cells:
        found = re.search(r"def (proj_\w+)\(", cell.source)
        if cell.metadata.get("nbgrader", {}).get("solution") and found:
            cell.source = ANSWERS[found.group(1)][0]
    target.parent.mkdir(parents=True)
    nbformat.write(notebook, target)
    return target


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("nbgrader-reach")
    lessons, course = root / "lessons", root / "classroom"
    write_lesson(lessons / f"{LESSON}.ipynb")
    made = run(
        [sys.executable, "-m", "course.assignments", "nbgrader", "--notebooks", lessons, "--out", course / "source"],
        root,
    )
    assert made.returncode == 0, made.stderr
    config = course / "nbgrader_config.py"
    config.write_text(config.read_text() + "\nc.Autograde.create_student = True\nc.ExecutePreprocessor.timeout = 120\n")
    add_teachers_test(course / "source" / LESSON / f"{LESSON}.ipynb")
    generated = run([*NBGRADER, "generate_assignment", LESSON, "--force"], course)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    submission = hand_in(
        course / "release" / LESSON / f"{LESSON}.ipynb", course / "submitted" / "mallory" / LESSON / f"{LESSON}.ipynb"
    )
    autograde = subprocess.Popen(
        [*NBGRADER, "autograde", LESSON],
        cwd=course,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
    )
    report = checker.run_submission(submission, timeout_s=120, notebooks_dir=lessons)  # side by side with nbgrader
    log, _ = autograde.communicate(timeout=600)
    assert autograde.returncode == 0, log
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        cells = gradebook.find_notebook(LESSON, LESSON).grade_cells
        scores = {cell.name: gradebook.find_grade(cell.name, LESSON, LESSON, "mallory").score for cell in cells}
    autograded = json.loads((course / "autograded" / "mallory" / LESSON / f"{LESSON}.ipynb").read_text())
    outputs = {}
    for cell in autograded["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if cell["metadata"].get("nbgrader", {}).get("grade"):
            outputs[grade_id] = cell["outputs"]
    return {"scores": scores, "outputs": outputs, "check": {row.exercise: row for row in report.results}, "log": log}


def _test_cell(function: str) -> str:
    """The grade id ``course.assignments nbgrader`` gives the test cell after ``function``'s exercise."""
    return f"{function}-{1 + 2 * list(ANSWERS).index(function)}-check"


def _printed(outputs: list[dict]) -> str:
    return "".join("".join(o["text"]) for o in outputs if o["output_type"] == "stream")


@pytest.mark.parametrize("function", list(ANSWERS))
def test_nbgrader_gives_each_answer_the_points_and_the_verdict_check_gives_it(graded, function):
    expected = ANSWERS[function][1]
    score = graded["scores"][_test_cell(function)]
    row = graded["check"][function]
    assert (score, row.points) == (expected, expected), (function, score, row, graded["log"][-3000:])
    printed = _printed(graded["outputs"][_test_cell(function)])  # the check's line, as the lesson prints it
    assert printed.startswith("[PASS] " if expected else "[NOT YET] ") and printed.endswith(f": {row.message}\n")
    assert printed.count("\n") == 1, printed


@pytest.mark.parametrize("function", ["proj_reference_import", "proj_reference_module"])
def test_a_reference_answer_is_not_within_nbgraders_kernels_reach(graded, function):
    printed = _printed(graded["outputs"][_test_cell(function)])
    # The check's words: her code raised (no reference_cache_bytes to call), not a wrong number.
    assert printed.startswith("[NOT YET] ") and ": your code raised " in printed, printed


@pytest.mark.parametrize("function", ["proj_prints_pass", "proj_own_check"])
def test_a_forged_verdict_in_the_kernel_is_not_what_nbgrader_scores(graded, function):
    outputs = graded["outputs"][_test_cell(function)]
    assert [o["output_type"] for o in outputs] == ["stream", "error"], outputs  # no execute_result reached it
    printed = _printed(outputs)
    assert printed.startswith("[NOT YET] ") and "[PASS]" not in printed, printed
    assert "weight" in printed  # the check's own hint for these numbers: the weight untransposed


def test_the_teachers_own_test_cell_still_runs_in_the_kernel(graded):
    outputs = graded["outputs"]["teachers-test"]
    assert graded["scores"]["teachers-test"] == 0
    assert any(o["output_type"] == "error" and "the teacher test" in o.get("evalue", "") for o in outputs), outputs


def test_a_test_cell_with_two_checks_gets_both_verdicts_and_its_points_only_if_both_pass(tmp_path):
    """Lesson 04's form (two checks in one test cell), run by the course's Execute alone: nbgrader's own scoring."""
    from nbgrader.utils import determine_grade

    from course.grading.nbgrader_kernel import SandboxedExecute

    tests = {}
    cells = [v4.new_code_cell(IMPORT), v4.new_code_cell(ANSWERS["proj_right"][0])]
    cells.append(v4.new_code_cell(f"def proj_wrong(x, weight, bias):\n    {WRONG}"))
    for second in ("proj_right", "proj_wrong"):
        test = v4.new_code_cell(
            f"{IMPORT}\nfrom course.grading import graded\n\n"
            '_verdict_1 = graded(check_linear_projection, "proj_right")\n'
            f'_verdict_2 = graded(check_linear_projection, "{second}")\n'
            "assert all(verdict.passed for verdict in (_verdict_1, _verdict_2)), 'a check above did not pass'"
        )
        test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 2, "grade_id": second}
        tests[second] = test
        cells.append(test)
    notebook = v4.new_notebook(cells=cells, metadata=KERNELSPEC)
    SandboxedExecute(timeout=120).preprocess(notebook, {"metadata": {"path": str(tmp_path)}})
    both, one = tests["proj_right"], tests["proj_wrong"]
    assert determine_grade(both)[0] == 2 and determine_grade(one)[0] == 0, (both.outputs, one.outputs)
    assert _printed(both.outputs).count("[PASS] ") == 2, both.outputs
    lines = _printed(one.outputs).splitlines()
    assert [line.split()[0] for line in lines] == ["[PASS]", "[NOT"] and "weight" in lines[1], lines
    assert "graded(check_linear_projection" in one.source  # the teacher's test, as nbgrader keeps it


def test_nbgrader_refuses_answers_that_change_the_checks_modules_or_the_dtype(tmp_path):
    """Issue 59's forgeries (the modules a check hands over zeroed, then zeros returned: each scored 1 under nbgrader)
    and a float32 answer to float64 inputs, graded by the course's Execute: 0 points, the module or dtype named."""
    from nbgrader.utils import determine_grade
    from test_remote_verdicts import MODULE_ANSWERS, MODULES

    from course.grading.nbgrader_kernel import SandboxedExecute

    cells, tests = [v4.new_code_cell(MODULES)], {}
    for function, (code, check, _) in MODULE_ANSWERS.items():
        cells.append(v4.new_code_cell(code))
        test = v4.new_code_cell(
            f"{MODULES}\nfrom course.grading import graded\n\n"
            f'_verdict = graded({check}, "{function}")\n'
            "assert _verdict.passed, 'the check above did not pass'"
        )
        test.metadata["nbgrader"] = {
            "grade": True,
            "solution": False,
            "locked": True,
            "points": 1,
            "grade_id": function,
        }
        tests[function] = test
        cells.append(test)
    notebook = v4.new_notebook(cells=cells, metadata=KERNELSPEC)
    SandboxedExecute(timeout=120).preprocess(notebook, {"metadata": {"path": str(tmp_path)}})
    for function, (_, _, named) in MODULE_ANSWERS.items():
        test, printed = tests[function], _printed(tests[function].outputs)
        if named is None:
            assert determine_grade(test)[0] == 1 and printed.startswith("[PASS] "), (function, test.outputs)
        else:
            assert determine_grade(test)[0] == 0, (function, test.outputs)
            assert printed.startswith("[NOT YET] ") and named in printed, (function, printed)
