"""Student copies run top to bottom: only the exercises fail, and every check says "not attempted".

What "the copy works" means, checked by ``problems_after_running``:

* an exercise cell (one that held a solution region) may fail only with ``NotImplementedError``;
* every check cell (the next code cell after an exercise, and any cell calling a ``check_*``
  function of course/exercises/)
  runs without an error and prints at least one verdict, all of them "[NOT YET] name: not attempted yet: ...";
* every other cell runs without an error (cells the lesson marks as raising on purpose, with
  ``NBVAL_RAISES_EXCEPTION`` or the ``raises-exception`` tag, excepted): later cells must use the
  reference code in helpers/, never the learner's function.

How every lesson's copy is checked (``test_lesson_student_copy_runs_failing_only_in_exercises``). Executing each
copy in full would run every lesson a second time after nbval (lessons 06, 09 and 10 train or load models: most
of the suite's time). The cells other than exercises and checks are the lesson's own cells, unchanged, and nbval
runs them; what a copy changes is that the learner's functions are unwritten and solution-only cells are gone. So:

* statically (course/notebook_slices.py, Python's scope analysis): no cell after an exercise, other than its
  checks, uses a name the learner's code defines (except inside ``try ... except NotImplementedError``), and no
  kept cell uses a name only a solution-only cell defines;
* for real: the exercise cells and check cells of the copy, judged by the rules above. Where nbval runs the lesson
  in the same session (`make test`), they run in nbval's kernel after its last cell, so that a lesson is executed
  once (tests/student_copy_runs.py; tests/conftest.py adds that item and leaves this file's run of the lesson
  out). Otherwise here, in a fresh kernel, with the cells they need (those that bind the names they use, and the
  set-up cell).

What that does not see, and a full run would: a solution that changes a shared object in place, or draws random
numbers that a later cell's output depends on. ``COURSE_STUDENT_COPIES=full`` (``make student-copies``) executes
every copy top to bottom instead, as the scheduled CI job does; a lesson whose cells the analysis cannot follow
(``eval``, ``globals()``) is always executed in full.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat import NotebookNode, v4
from student_copy_runs import (
    RUN_TEST,
    SOLUTION_ONLY_TAG,
    cell_roles,
    copy_problems_in_kernel,
    problems_after_running,
    run_in_kernel,
    static_problems,
    stdout_of,
)

from course.assignments import main as assignments_main
from course.assignments import student_copy
from course.notebook_slices import UnfollowableCell, needed_cells

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
LESSONS = sorted(NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT_S = 900  # generous: in a full run lesson 06 trains a model in one cell on a busy 2-core runner
FULL_RUNS = os.environ.get("COURSE_STUDENT_COPIES", "") == "full"


# ---------------------------------------------------------------------------------------------
# Running a notebook and judging the run
# ---------------------------------------------------------------------------------------------
def execute(notebook: NotebookNode, cwd: Path) -> NotebookNode:
    """Run every cell top to bottom (errors recorded, not raised) in a fresh python3 kernel."""
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(cwd)}},  # where the lesson runs: relative data paths work
        shutdown_kernel="immediate",  # its outputs are in; a graceful shutdown only waits about 1 s
    )
    client.execute(env={**os.environ, "MPLBACKEND": "Agg"})
    return notebook


# ---------------------------------------------------------------------------------------------
# The judge on hand-made runs (fast; proves each rule can fail)
# ---------------------------------------------------------------------------------------------
EXERCISE = "def double(x):\n    # BEGIN SOLUTION\n    return 2 * x\n    # END SOLUTION"
STUDENT_EXERCISE = "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
CHECK = "check_double(double)"
NOT_ATTEMPTED = "[NOT YET] doubling: not attempted yet: write your code in place of `raise NotImplementedError()`.\n"


def _run_cell(
    source: str, stdout: str = "", error: tuple[str, str] | None = None, count: int | None = 1
) -> NotebookNode:
    outputs = [v4.new_output("stream", name="stdout", text=stdout)] if stdout else []
    if error:
        outputs.append(v4.new_output("error", ename=error[0], evalue=error[1], traceback=[]))
    return v4.new_code_cell(source, outputs=outputs, execution_count=count)


def _judge(*cells: NotebookNode) -> list[str]:
    source = v4.new_notebook(cells=[v4.new_code_cell(EXERCISE), v4.new_code_cell(CHECK), v4.new_code_cell("later = 1")])
    return problems_after_running(source, v4.new_notebook(cells=list(cells)))


def test_a_good_run_has_no_problems():
    assert _judge(_run_cell(STUDENT_EXERCISE), _run_cell(CHECK, NOT_ATTEMPTED), _run_cell("later = 1")) == []


def test_an_exercise_cell_may_raise_not_implemented_but_nothing_else():
    assert (
        _judge(
            _run_cell(STUDENT_EXERCISE, error=("NotImplementedError", "")),
            _run_cell(CHECK, NOT_ATTEMPTED),
            _run_cell("later = 1"),
        )
        == []
    )
    problems = _judge(
        _run_cell(STUDENT_EXERCISE, error=("NameError", "torch")),
        _run_cell(CHECK, NOT_ATTEMPTED),
        _run_cell("later = 1"),
    )
    assert problems and "raised NameError" in problems[0]


def test_a_later_cell_using_the_learners_function_is_a_problem():
    later = _run_cell("later = 1", error=("NotImplementedError", ""))
    problems = _judge(_run_cell(STUDENT_EXERCISE), _run_cell(CHECK, NOT_ATTEMPTED), later)
    assert problems == ["cell 2 ('later = 1') raised NotImplementedError: "]


@pytest.mark.parametrize(
    "check_run, expected",
    [
        (_run_cell(CHECK, "[PASS] doubling: fine\n"), "printed [PASS] 'fine' instead of [NOT YET] not attempted yet"),
        (_run_cell(CHECK, "[NOT YET] doubling: your code raised NameError\n"), "printed [NOT YET] 'your code raised"),
        (_run_cell(CHECK, "hello\n"), "printed no verdict"),
        (_run_cell(CHECK, error=("AttributeError", "no check_double")), "raised AttributeError"),
        (_run_cell(CHECK, NOT_ATTEMPTED, count=None), "never ran"),
    ],
    ids=["passes", "wrong", "no-verdict", "crashes", "not-run"],
)
def test_a_check_cell_must_say_not_attempted_and_not_crash(check_run, expected):
    problems = _judge(_run_cell(STUDENT_EXERCISE), check_run, _run_cell("later = 1"))
    assert any(expected in problem for problem in problems), problems


def test_a_copy_with_a_different_number_of_cells_is_a_problem():
    assert "expected 3" in _judge(_run_cell(STUDENT_EXERCISE), _run_cell(CHECK, NOT_ATTEMPTED))[0]


DOUBLE_CHECK = "if double(3) != 6:\n            raise wrong('double(3) should be 6')"


def _doubling_lesson(check_body: str = DOUBLE_CHECK) -> NotebookNode:
    """A tiny lesson whose check uses the course's own feedback module."""
    return v4.new_notebook(
        cells=[
            v4.new_markdown_cell("# Doubling"),
            v4.new_code_cell(
                "from course.exercises.feedback import run_check, wrong\n\n"
                "def check_double(double):\n"
                "    def body():\n"
                f"        {check_body}\n"
                "        return 'double works.'\n"
                "    return run_check('doubling', body)"
            ),
            v4.new_code_cell(EXERCISE),
            v4.new_code_cell(CHECK),
            v4.new_code_cell("print(sum(range(4)))  # the rest of the lesson"),
            v4.new_code_cell("double(2)  # shows the solved function", metadata={"tags": ["solution-only"]}),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


def test_a_fixture_student_copy_really_runs_in_a_kernel(tmp_path):
    """End to end on a tiny lesson, in a fresh kernel."""
    source = _doubling_lesson()
    executed = execute(student_copy(source, "fixture.ipynb"), ROOT)
    assert problems_after_running(source, executed) == []
    assert stdout_of(executed.cells[3]).startswith("[NOT YET] doubling: not attempted yet: write your code")
    assert stdout_of(executed.cells[4]) == "6\n"


def test_a_copy_run_in_the_kernel_its_lesson_ran_in_is_judged_and_can_fail(tmp_path):
    """What `make test` does after nbval's last cell of a lesson (tests/student_copy_runs.py): the copy's exercises
    and checks run in that kernel. A check that passes without calling the learner's function passes the stub too."""
    from nbval.kernel import RunningKernel

    lessons = {"good.ipynb": _doubling_lesson(), "lax.ipynb": _doubling_lesson(check_body="pass")}
    kernel = RunningKernel("python3", cwd=str(tmp_path))
    problems = {}
    try:
        for name, lesson in lessons.items():
            nbformat.write(lesson, tmp_path / name)
            for cell in lesson.cells:  # the lesson as nbval runs it
                if cell.cell_type == "code":
                    assert not [o for o in run_in_kernel(kernel, cell.source).outputs if o.output_type == "error"]
            problems[name] = copy_problems_in_kernel(tmp_path / name, kernel)
    finally:
        kernel.stop()
    assert problems["good.ipynb"] == []
    assert problems["lax.ipynb"] == [
        "cell 3 ('check_double(double)') printed [PASS] 'double works.' instead of [NOT YET] not attempted yet"
    ]


# ---------------------------------------------------------------------------------------------
# Every lesson's student copy
# ---------------------------------------------------------------------------------------------


def run_student_copy(lesson: Path) -> tuple[NotebookNode, frozenset[int], list[str]]:
    """Release one lesson in memory and run what of its student copy needs running, where the lesson runs.

    Returns the executed copy, the positions of the cells left unrun, and what the static analysis found.
    """
    source = nbformat.read(lesson, as_version=4)
    copy = student_copy(source, str(lesson))
    if FULL_RUNS:
        return execute(copy, NOTEBOOKS), frozenset(), []
    try:
        problems = static_problems(source, copy)
        _, exercises, checks = cell_roles(source)
        cells = [cell.source if cell.cell_type == "code" else None for cell in copy.cells]
        setup = next(i for i, cell in enumerate(cells) if cell is not None)
        run = needed_cells(cells, exercises | checks, always={setup})
    except UnfollowableCell:
        return execute(copy, NOTEBOOKS), frozenset(), []  # names it cannot follow: run the whole copy
    sliced = copy.copy()
    sliced.cells = [copy.cells[i] for i in run]
    execute(sliced, NOTEBOOKS)
    for i, cell in zip(run, sliced.cells, strict=True):
        copy.cells[i] = cell
    skipped = frozenset(i for i, cell in enumerate(cells) if cell is not None and i not in run)
    return copy, skipped, problems


def _lesson_02_with(*cells: NotebookNode) -> NotebookNode:
    """Lesson 02 with ``cells`` added right after its first exercise's check."""
    lesson = nbformat.read(NOTEBOOKS / "02_queries_keys_values.ipynb", as_version=4)
    (check,) = [i for i, cell in enumerate(lesson.cells) if cell.source.startswith("check_linear_projection(")]
    lesson.cells[check + 1 : check + 1] = list(cells)
    return lesson


def test_the_static_check_finds_a_real_lesson_cell_that_calls_the_learners_function():
    lesson = _lesson_02_with(v4.new_code_cell("projected = linear_projection(x, weight, bias)"))
    problems = static_problems(lesson, student_copy(lesson, "02"))
    assert len(problems) == 1 and "uses `linear_projection`, which the learner writes" in problems[0]


def test_the_static_check_finds_a_name_that_only_a_solution_only_cell_defines():
    worked = v4.new_code_cell("worked = linear_projection(x, weight, bias)", metadata={"tags": [SOLUTION_ONLY_TAG]})
    lesson = _lesson_02_with(worked, v4.new_code_cell("print(worked.shape)"))
    problems = static_problems(lesson, student_copy(lesson, "02"))
    assert len(problems) == 1 and "uses `worked`, which only a solution-only cell defines" in problems[0]


@pytest.fixture(scope="module")
def lesson_runs(request):
    """Start running the student copy of every selected lesson; {name: Future}."""
    selected = [
        item.callspec.params["lesson"]
        for item in request.session.items
        if getattr(item, "originalname", None) == RUN_TEST and hasattr(item, "callspec")
    ]
    # Two at a time, unless pytest-xdist already gives every core a worker of its own.
    workers = 1 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 else 2
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="student-copy")
    # Reading and releasing happen inside each job, so one broken lesson fails only its own test.
    runs: dict[str, Future] = {path.name: pool.submit(run_student_copy, path) for path in reversed(selected)}
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("lesson", LESSONS, ids=[path.stem for path in LESSONS])
def test_lesson_student_copy_runs_failing_only_in_exercises(lesson, lesson_runs):
    """The lesson's student copy fails only where the learner writes (see the module docstring for how)."""
    executed, skipped, problems = lesson_runs[lesson.name].result()
    problems = problems + problems_after_running(nbformat.read(lesson, as_version=4), executed, skipped)
    assert problems == [], f"{lesson.name} student copy:\n" + "\n".join(problems)


def test_checking_a_handed_in_copy_gives_a_row_per_exercise(tmp_path, capsys):
    """``python -m course.assignments check`` on lesson 02's student copy: one exercise right, one not attempted."""
    lesson = NOTEBOOKS / "02_queries_keys_values.ipynb"
    handed_in = student_copy(nbformat.read(lesson, as_version=4), lesson.name)
    (answer,) = [cell for cell in handed_in.cells if "def linear_projection(" in cell.source]
    answer.source = answer.source.replace(
        "    # YOUR CODE HERE\n    raise NotImplementedError()", "    return x @ weight.T + bias"
    )
    path = tmp_path / "alice" / lesson.name
    path.parent.mkdir()
    nbformat.write(handed_in, path)

    assert assignments_main(["check", "--out", str(tmp_path / "grades"), str(path)]) == 0
    captured = capsys.readouterr()
    table = [line.split("\t") for line in captured.out.splitlines()]
    assert table[0] == ["student", "lesson", "exercise", "verdict", "points", "message"]
    assert [row[:5] for row in table[1:]] == [
        ["alice", lesson.stem, "linear_projection", "pass", "1"],
        ["alice", lesson.stem, "cross_attention_inputs", "not attempted", "0"],
    ]
    assert (tmp_path / "grades" / "totals.csv").read_text().splitlines()[1] == f"alice,{lesson.stem},1,2,0,yes"
