"""A student copy's run judged, and the run itself done in the kernel in which nbval just ran the lesson.

Why in nbval's kernel. `make test` runs every lesson under nbval, and the student copies' test ran each copy's
exercise and check cells again in a fresh kernel, with the cells they need: the set-up, and for lessons 06, 09 and
10 the models they train or load. A lesson added cost two executions. Here the copy's exercise cells (the
learner's unwritten functions) and check cells run in nbval's kernel once its last cell has run: the kernel then
holds everything every lesson cell bound, and what the copy changes (the learner's functions are stubs, the
solution-only cells are gone) is what is run and judged. What a fresh kernel would see beyond that, whether the
kept cells need a name that only a solution or a solution-only cell binds, is what the static analysis
(``static_problems``) checks on every copy, as before. ``StudentCopyInLessonKernel`` is the pytest item
tests/conftest.py adds after each lesson's last nbval cell; tests/course/test_student_copies.py then leaves out
its own run of that lesson, and still runs the lessons nbval does not (a test file run alone,
``COURSE_STUDENT_COPIES=full``).

The judge (``problems_after_running``), what "the copy works" means:

* an exercise cell (one that held a solution region) may fail only with ``NotImplementedError``;
* every check cell (the next code cell after an exercise, and any cell calling a ``check_*`` function of
  course/exercises/) runs without an error and prints at least one verdict, all of them "[NOT YET] name: not
  attempted yet: ..." (never a pass, never a wrong answer's hint);
* every other cell runs without an error (cells the lesson marks as raising on purpose, with
  ``NBVAL_RAISES_EXCEPTION`` or the ``raises-exception`` tag, excepted).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from queue import Empty

import nbformat
import pytest
from nbformat import NotebookNode, v4

from course.assignments import SOLUTION_ONLY_TAG, find_exercises, student_copy
from course.exercises.feedback import NOT_ATTEMPTED
from course.notebook_slices import learner_name_uses

# A verdict line: "[PASS] name: ..." or "[NOT YET] name: ..."; an exercise not attempted says so first.
VERDICT = re.compile(r"^\[(PASS|NOT YET)\] [^:\n]*: (.*)$", re.MULTILINE)
RUN_TEST = "test_lesson_student_copy_runs_failing_only_in_exercises"  # test_student_copies.py's run of one lesson
CELL_TIMEOUT_S = 900  # as nbval's cells: a check on a busy 2-core runner


def _course_check_names() -> set[str]:
    """Names of the course's exercise checks: every public ``check_*`` in course/exercises/."""
    import course.exercises

    names = set()
    for module in pkgutil.iter_modules(course.exercises.__path__):
        try:
            imported = importlib.import_module(f"course.exercises.{module.name}")
        except Exception:  # a broken check module shows up when its lesson runs; don't hide this file
            continue
        names.update(name for name in dir(imported) if name.startswith("check_"))
    return names


# A cell that calls one of the course's checks (not one that defines a check_ function).
CHECK_CALL = re.compile(
    r"(?<!def )\b(" + ("|".join(map(re.escape, sorted(_course_check_names()))) or "(?!)") + r")\s*\("
)


def _tags(cell: NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _raises_on_purpose(cell: NotebookNode) -> bool:
    first = cell.source.lstrip().split("\n", 1)[0]
    return "raises-exception" in _tags(cell) or "NBVAL_RAISES_EXCEPTION" in first


def stdout_of(cell: NotebookNode) -> str:
    return "".join(
        o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream" and o.name == "stdout"
    )


def cell_roles(source: NotebookNode) -> tuple[list[NotebookNode], set[int], set[int]]:
    """The kept cells of ``source`` (solution-only cells dropped), and which of them are exercises and checks."""
    kept = [cell for cell in source.cells if SOLUTION_ONLY_TAG not in _tags(cell)]
    code = [i for i, cell in enumerate(kept) if cell.cell_type == "code"]
    exercises = {i for i in code if any(line.strip() == "# BEGIN SOLUTION" for line in kept[i].source.split("\n"))}
    checks = {i for i in code if CHECK_CALL.search(kept[i].source) and i not in exercises}
    for position, i in enumerate(code):
        if i in exercises and position + 1 < len(code):
            checks.add(code[position + 1])
    return kept, exercises, checks


def problems_after_running(
    source: NotebookNode, executed: NotebookNode, skipped: frozenset[int] = frozenset()
) -> list[str]:
    """Everything wrong with an executed student copy of ``source`` (an empty list if all is well).

    Cells are matched by position after dropping the source's ``solution-only`` cells, so this
    does not trust the release tool to say which cells were exercises. ``skipped``: positions of cells
    deliberately not run (not needed by any exercise or check); they are not judged.
    """
    kept, exercises, checks = cell_roles(source)
    if len(kept) != len(executed.cells):
        return [f"the student copy has {len(executed.cells)} cells, expected {len(kept)}"]
    code = [
        (i, src, run)
        for i, (src, run) in enumerate(zip(kept, executed.cells, strict=True))
        if src.cell_type == "code" and i not in skipped
    ]
    problems = []
    for i, src, run in code:
        where = f"cell {i} ({src.source.strip().splitlines()[0][:50]!r})" if src.source.strip() else f"cell {i}"
        if run.get("execution_count") is None:
            problems.append(f"{where} never ran")
        errors = [o for o in run.outputs if o.output_type == "error"]
        if i in exercises:
            problems += [
                f"{where} is an exercise but raised {e.ename}: {e.evalue}"
                for e in errors
                if e.ename != "NotImplementedError"
            ]
        elif not _raises_on_purpose(src):
            problems += [f"{where} raised {e.ename}: {e.evalue}" for e in errors]
        if i in checks:
            verdicts = VERDICT.findall(stdout_of(run))
            if not verdicts:
                problems.append(f"{where} is a check cell but printed no verdict")
            problems += [
                f"{where} printed [{mark}] {message!r} instead of [NOT YET] {NOT_ATTEMPTED}"
                for mark, message in verdicts
                if not message.startswith(NOT_ATTEMPTED)
            ]
    if not exercises:
        problems.append("no exercise cells: nothing in this notebook was released as an exercise")
    return problems


def static_problems(source: NotebookNode, copy: NotebookNode) -> list[str]:
    """What scope analysis finds wrong with ``copy``: later cells using the learner's names or solution-only ones."""
    kept, exercises, checks = cell_roles(source)
    position = {id(cell): i for i, cell in enumerate(kept)}  # source cell -> its place in the copy
    functions: dict[int, list[str | None]] = {}
    for exercise in find_exercises(source, "lesson"):
        functions.setdefault(position[id(source.cells[exercise.cell_index])], []).append(exercise.function)
    dropped: dict[int, str] = {}
    next_kept = 0
    for cell in source.cells:
        if SOLUTION_ONLY_TAG not in _tags(cell):
            next_kept += 1
        elif cell.cell_type == "code":
            dropped[next_kept] = dropped.get(next_kept, "") + "\n" + cell.source
    cells = [cell.source if cell.cell_type == "code" else None for cell in copy.cells]
    assert set(functions) == exercises, "find_exercises and the judge disagree on which cells are exercises"
    return learner_name_uses(cells, functions, checks, dropped)


# ---------------------------------------------------------------------------------------------
# The copy's exercises and checks, run in the kernel nbval ran the lesson in
# ---------------------------------------------------------------------------------------------
def run_in_kernel(kernel, source: str, timeout: float = CELL_TIMEOUT_S) -> NotebookNode:
    """One cell run in nbval's ``RunningKernel``: a code cell with its stream and error outputs."""
    msg_id = kernel.execute_cell_input(source, allow_stdin=False)
    kernel.await_reply(msg_id, timeout=timeout)
    outputs = []
    while True:
        try:
            message = kernel.get_message("iopub", timeout=timeout)
        except Empty:
            raise RuntimeError(f"no output from the kernel within {timeout} s for {source[:60]!r}") from None
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = message["msg_type"], message["content"]
        if kind == "status" and content["execution_state"] == "idle":
            break
        if kind == "stream":
            outputs.append(v4.new_output("stream", name=content["name"], text=content["text"]))
        elif kind == "error":
            outputs.append(v4.new_output("error", ename=content["ename"], evalue=content["evalue"], traceback=[]))
    return v4.new_code_cell(source, outputs=outputs, execution_count=1)


def copy_problems_in_kernel(lesson: Path, kernel) -> list[str]:
    """Release ``lesson`` in memory, run its copy's exercise and check cells in ``kernel`` (where the lesson has
    just run), and return everything wrong: what the static analysis finds, and what the judge finds in the run."""
    source = nbformat.read(lesson, as_version=4)
    copy = student_copy(source, str(lesson))
    problems = static_problems(source, copy)
    _, exercises, checks = cell_roles(source)
    for i in sorted(exercises | checks):  # in the copy's order: each exercise's stub, then its checks
        copy.cells[i] = run_in_kernel(kernel, copy.cells[i].source)
    skipped = frozenset(
        i for i, cell in enumerate(copy.cells) if cell.cell_type == "code" and i not in exercises | checks
    )
    return problems + problems_after_running(source, copy, skipped)


class StudentCopyInLessonKernel(pytest.Item):
    """After nbval's last cell of a lesson: the lesson's student copy, its exercises and checks run in that kernel
    (tests/conftest.py adds one per lesson that nbval runs)."""

    def runtest(self) -> None:
        kernel = getattr(self.parent, "kernel", None)
        if kernel is None or not kernel.is_alive():
            raise RuntimeError(f"{self.path.name}: nbval's kernel is gone (a cell above failed it): no copy to run")
        problems = copy_problems_in_kernel(Path(self.path), kernel)
        assert problems == [], f"{self.path.name} student copy:\n" + "\n".join(problems)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: student copy, in nbval's kernel"
