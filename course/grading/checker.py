"""``python -m course.assignments check``: run handed-in lessons and write a gradebook.

For each handed-in notebook the checker

1. finds its lesson by file name (``03_scaled_dot_product_attention.ipynb``) among the course's lessons, and
   from the lesson the exercises and the check that grades each (``check_attention_weights`` from
   ``course.exercises.lesson03`` grades ``attention_weights``);
2. writes the notebook it will run: the student's cells as handed in, with the check cell after each exercise
   replaced by a locked cell of its own (``graded(check, "function")``, as in nbgrader's test cells), or
   inserted where the student deleted it, so that a check redefined in an answer cell is never the one used;
3. runs that notebook in a supervisor process (:mod:`course.grading.supervisor`) started in a session of its
   own, in a fresh temporary folder, with a minimal environment, and reads the signed result it returns;
4. kills every process left from that notebook, whatever it did to detach itself;
5. gives every exercise a row: ``pass``, ``wrong``, ``not attempted`` or ``error`` (it did not run: its
   cell crashed, the notebook timed out before it, the kernel died), and 1 point for a pass.

``CHECK_ISOLATION`` is the teacher's summary of what this protects against (shown by ``check --help``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode, v4

from course.grading import GRADING_ENV
from course.grading.gradebook import (
    COLUMNS,
    NOTEBOOK_ROW,
    TOTALS_COLUMNS,
    GradebookError,
    name_problem,
    read_gradebook,
    safe_cell,
    table_text,
    write_gradebook,
)
from course.grading.supervisor import sign
from course.grading.workers import ONE_THREAD, WorkerDied, in_workers
from course.solution_notebooks import (
    NOTEBOOKS_DIR,
    SOLUTION_ONLY_TAG,
    ReleaseError,
    check_imports,
    find_exercises,
    plain_python,
    read_notebook,
)

__all__ = [
    "CHECK_ISOLATION",
    "COLUMNS",
    "CheckResult",
    "GradedExercise",
    "SubmissionReport",
    "check_submission",
    "graded_cell_source",
    "lesson_exercises",
    "run_submission",
    "student_of",
]

RUN_TOKEN_ENV = "ATTENTION_COURSE_RUN"  # every process the notebook starts inherits it: how survivors are found
OUTPUT_CAP_BYTES = 10_000_000  # cell outputs kept per notebook; the rest is dropped (and said so)
_MESSAGE_CHARS = 500

CHECK_ISOLATION = """\
Each notebook is run by a process of its own, started in a session (process group) of its own, in a fresh
temporary folder that holds only a copy of the notebook (deleted afterwards), with a minimal environment:
PATH, a temporary HOME and TMPDIR, MPLBACKEND=Agg, LANG, thread settings (OMP_NUM_THREADS, MKL_NUM_THREADS)
and what the lessons read (ATTENTION_COURSE_CACHE pointing at your download cache, MULTI30K_DIR if you set
it). Your tokens and credentials in environment variables are not passed on.

Verdicts: the check cell after each exercise is replaced by a locked cell that imports the course's check,
verifies it is the course's own (a check redefined or rebound from an answer cell is refused), and reports
the verdict as a display output that is read only from those cells. The result comes back signed with a key
the notebook never sees; what the notebook prints, writes to file descriptors 1 and 2 (which go nowhere),
or writes into the checker's pipes is not counted. Rows are written with a CSV writer (messages on one
line), so no message can add a row. After each notebook every process it left behind is killed, also one
that detached itself (a new session, a double fork); at most 10 MB of its outputs are kept. A cell that runs
longer than --timeout, a notebook longer than --notebook-timeout, a kernel that dies, or a notebook that
kills its supervisor ends that notebook only: its exercises get rows with verdict 'error', checking goes
on, and the exit status is 1 at the end.

What it does NOT isolate: the code runs as your user, so it can read and write anything your account can
by absolute path (the course's data, your home folder, other students' submissions), use the network, look
for the checker's own process and stop it, and, inside its own kernel, patch the libraries a check uses
(torch, the course's modules) so that a wrong answer looks right. It is made for marking honest work, not
a sandbox for hostile code: for that, run the command in a container or a throw-away account with nothing
to lose (for example `docker run --network none` with the course mounted read-only)."""


@dataclass(frozen=True)
class GradedExercise:
    """One graded exercise of a lesson: the learner's function, and the check (and its module) that grades it."""

    function: str
    check: str
    module: str
    points: int = 1


@dataclass(frozen=True)
class CheckResult:
    """One row of the gradebook: ``status`` is "pass", "wrong", "not attempted" or "error"."""

    notebook: str
    exercise: str
    status: str
    message: str
    student: str = ""
    lesson: str = ""
    points: int = 0
    max_points: int = 1


@dataclass(frozen=True)
class SubmissionReport:
    """What ``check`` learned about one notebook: a row per exercise, and what stopped it (None: ran to the end)."""

    notebook: str
    results: list[CheckResult]
    problem: str | None = None


def student_of(path: Path) -> str:
    """The student a handed-in file belongs to: its folder (``alice/03_x.ipynb``), or nbgrader's
    ``submitted/alice/03_x/03_x.ipynb`` layout (the folder above the assignment's)."""
    path = Path(path)
    folder = path.parent
    if folder.name == path.stem and folder.parent.name:
        folder = folder.parent
    return folder.name or str(path)


def _check_calls(source: str) -> list[tuple[str, str]]:
    """(check name, function name) of each top-level ``check_x(function)`` call in a check cell."""
    try:
        tree = ast.parse(plain_python(source))
    except SyntaxError:
        return []
    calls = []
    for statement in tree.body:
        call = getattr(statement, "value", None)
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id.startswith("check_")
            and len(call.args) == 1
            and isinstance(call.args[0], ast.Name)
        ):
            calls.append((call.func.id, call.args[0].id))
    return calls


def lesson_exercises(notebook: NotebookNode, name: str) -> list[GradedExercise]:
    """The graded exercises of a solution notebook, in order: each exercise's function and the check after it."""
    imports = check_imports(notebook)
    graded = []
    for exercise in find_exercises(notebook, name):
        later = [
            cell
            for cell in notebook.cells[exercise.cell_index + 1 :]
            if cell.cell_type == "code" and SOLUTION_ONLY_TAG not in cell.metadata.get("tags", [])
        ]
        for check, function in _check_calls(later[0].source) if later else []:
            if function == exercise.function and check in imports:
                graded.append(GradedExercise(function, check, imports[check]))
    return graded


def graded_cell_source(exercise: GradedExercise) -> str:
    """The locked cell that grades one exercise (the same text nbgrader's test cells hold)."""
    return (
        f"from {exercise.module} import {exercise.check}  # the course's check, imported here\n"
        "from course.grading import graded\n\n"
        f'_verdict = graded({exercise.check}, "{exercise.function}")\n'
        'assert _verdict.passed, "the check above did not pass: read its verdict"'
    )


def _defines(source: str, function: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(function)}\s*\(", source, re.MULTILINE) is not None


def grading_notebook(
    submission: NotebookNode, exercises: Sequence[GradedExercise]
) -> tuple[NotebookNode, dict[int, GradedExercise], list[int | None]]:
    """The notebook the checker runs, which cells grade which exercise, and each cell's number as handed in."""
    cells: list[tuple[NotebookNode, int | None]] = []
    for number, cell in enumerate(submission.cells, start=1):
        cell = nbformat.from_dict(json.loads(json.dumps(cell)))
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cells.append((cell, number))
    graded: dict[int, GradedExercise] = {}  # id(cell) -> exercise
    for exercise in exercises:
        place = next(
            (
                i
                for i, (cell, _) in enumerate(cells)
                if cell.cell_type == "code" and _defines(cell.source, exercise.function)
            ),
            None,
        )
        trusted = v4.new_code_cell(graded_cell_source(exercise))
        if place is None:
            cells.append((trusted, None))  # reports "not defined"
        else:
            following = next((i for i in range(place + 1, len(cells)) if cells[i][0].cell_type == "code"), None)
            replaces = following is not None and any(
                function == exercise.function for _, function in _check_calls(cells[following][0].source)
            )
            if replaces and id(cells[following][0]) not in graded:
                cells[following] = (trusted, cells[following][1])
            else:
                cells.insert(place + 1, (trusted, None))
        graded[id(trusted)] = exercise
    notebook = v4.new_notebook(
        cells=[cell for cell, _ in cells],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    for index, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{index}"
    by_index = {index: graded[id(cell)] for index, (cell, _) in enumerate(cells) if id(cell) in graded}
    return notebook, by_index, [number for _, number in cells]


def submission_environment(home: Path, token: str) -> dict[str, str]:
    """The kernel's whole environment: only what the lessons need, nothing of the teacher's secrets."""
    from helpers.data.corpus import default_cache_dir  # computed in the teacher's environment: the same cache

    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env = {
        # The course's interpreter first, so that the kernel and any `!python` in a cell are the course's.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]),
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "MPLBACKEND": "Agg",  # figures are not needed to read verdicts
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "ATTENTION_COURSE_CACHE": str(default_cache_dir()),
        GRADING_ENV: "1",
        RUN_TOKEN_ENV: token,
    }
    for name in ("MULTI30K_DIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LC_ALL", "TZ", "PYTHONPATH"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def _processes_with(token: str) -> list[int]:
    """Processes of this user whose environment holds ``RUN_TOKEN_ENV=token`` (what a notebook started)."""
    needle = f"{RUN_TOKEN_ENV}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def kill_survivors(token: str, session: int | None) -> None:
    """SIGKILL the supervisor's process group and every process that carries the notebook's token."""
    if session is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(session, signal.SIGKILL)
    for _ in range(20):
        alive = _processes_with(token)
        if not alive:
            return
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _signed_result(output: bytes, key: str) -> dict | None:
    """The last line of ``output`` that carries a valid signature under ``key``; None if there is none."""
    for line in reversed(output.split(b"\n")):
        try:
            envelope = json.loads(line)
            payload, mac = envelope["payload"], envelope["mac"]
        except (ValueError, TypeError, KeyError):
            continue
        if isinstance(payload, str) and isinstance(mac, str) and secrets.compare_digest(mac, sign(key, payload)):
            return json.loads(payload)
    return None


def _one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


def _supervise(job: dict, work: Path, env: dict[str, str], wall_s: float) -> dict | None:
    """Run the supervisor on ``job``; its verified result, or None (killed, crashed, forged, out of time)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "course.grading.supervisor"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=work,
        env={
            **env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), env.get("PYTHONPATH")])),
        },
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(json.dumps(job).encode(), timeout=wall_s)
    except subprocess.TimeoutExpired:
        output = b""
    finally:
        kill_survivors(env[RUN_TOKEN_ENV], process.pid)
        process.kill()
        process.wait()
    return _signed_result(output[-4_000_000:], job["key"])


def run_submission(
    path: str | Path,
    timeout_s: int = 600,
    notebook_timeout_s: int | None = None,
    notebooks_dir: str | Path | None = None,
    output_cap: int = OUTPUT_CAP_BYTES,
) -> SubmissionReport:
    """Run one handed-in notebook as ``CHECK_ISOLATION`` says; a row for every exercise of its lesson.

    ``timeout_s`` bounds each cell, ``notebook_timeout_s`` (None: no bound) the whole notebook. Nothing is
    raised: an unreadable file, an unknown lesson, a timeout or a dead kernel becomes ``problem`` and
    ``error`` rows.
    """
    path = Path(path)
    notebooks_dir = Path(notebooks_dir or NOTEBOOKS_DIR)
    student, lesson = student_of(path), path.stem

    def report(exercises, verdicts, problem):
        rows = []
        for exercise in exercises:
            verdict = verdicts.get(exercise.function)
            if verdict is None:
                status, message = "error", f"not graded: {problem or 'its check did not report a verdict'}"
            else:
                status, message = verdict["status"], verdict["message"]
            rows.append(
                CheckResult(
                    str(path),
                    exercise.function,
                    status,
                    _one_line(message),
                    student,
                    lesson,
                    exercise.points if status == "pass" else 0,
                    exercise.points,
                )
            )
        if problem is not None:
            rows.append(CheckResult(str(path), "(notebook)", "error", _one_line(problem), student, lesson, 0, 0))
        return SubmissionReport(str(path), rows, problem)

    source = notebooks_dir / path.name
    if not source.is_file():
        known = ", ".join(p.name for p in sorted(notebooks_dir.glob("*.ipynb"))[:3])
        return report(
            [], {}, f"no lesson of this course is named {path.name} (expected a lesson's file name, e.g. {known})"
        )
    try:
        exercises = lesson_exercises(read_notebook(source), str(source))
    except ReleaseError as error:
        return report([], {}, f"its lesson cannot be read: {error}")
    try:
        submission = read_notebook(path)
    except ReleaseError as error:
        return report(exercises, {}, f"cannot be read as a notebook: {error.problem}")
    notebook, graded, numbers = grading_notebook(submission, exercises)
    token, key = secrets.token_hex(16), secrets.token_hex(32)
    with tempfile.TemporaryDirectory(prefix="check-") as scratch:
        work, home = Path(scratch) / "work", Path(scratch) / "home"
        work.mkdir()
        shutil.copyfile(path, work / path.name)  # where the notebook "is", as when the student ran it
        env = submission_environment(home, token)
        job = {
            "notebook": notebook,
            "graded_cells": sorted(graded),
            "cell_numbers": numbers,
            "timeout_s": timeout_s,
            "notebook_timeout_s": notebook_timeout_s,
            "output_cap": output_cap,
            "work": str(work),
            "env": env,
            "key": key,
        }
        wall = (notebook_timeout_s or timeout_s * (len(notebook.cells) + 1)) + 120
        result = _supervise(job, work, env, wall)
    if result is None:
        return report(
            exercises, {}, "its checker process was stopped before it could report (killed from the notebook?)"
        )
    verdicts = {}
    for index, entry in result.get("verdicts", {}).items():
        exercise = graded.get(int(index))
        genuine = exercise is not None and entry.get("function") == exercise.function
        if genuine and entry.get("status") in ("pass", "wrong", "not attempted", "error"):
            verdicts[exercise.function] = entry
    problem = result.get("problem")
    if problem and result.get("dropped_output_bytes"):
        problem += f"; {result['dropped_output_bytes']:,} bytes of output over the {output_cap:,}-byte cap dropped"
    return report(exercises, verdicts, problem)


def check_submission(
    path: str | Path, timeout_s: int = 600, notebook_timeout_s: int | None = None
) -> list[CheckResult]:
    """The rows of one handed-in notebook (see :func:`run_submission`, which also says what stopped it)."""
    return run_submission(path, timeout_s, notebook_timeout_s).results


def _row(result: CheckResult) -> list[str]:
    """The gradebook row of one result (as text; :mod:`course.grading.gradebook` makes each cell safe)."""
    points = "" if result.exercise == NOTEBOOK_ROW else str(result.points)
    return [result.student, result.lesson, result.exercise, result.status, points, result.message]


def _worker_died(path: Path, error: WorkerDied) -> SubmissionReport:
    """The report of a notebook whose grading worker died: one ``(notebook)`` error row, so it is graded again."""
    problem = f"not graded: {error}; grade it again"
    row = CheckResult(str(path), NOTEBOOK_ROW, "error", _one_line(problem), student_of(path), Path(path).stem, 0, 0)
    return SubmissionReport(str(path), [row], problem)


def _validate_batch(paths: Sequence[Path]) -> list[str]:
    """What makes this batch ungradable before anything runs: a name no gradebook row can hold, a notebook twice."""
    problems, seen = [], {}
    for path in paths:
        student, lesson = student_of(path), Path(path).stem
        problems += filter(None, [name_problem(student, "student folder"), name_problem(lesson, "lesson file")])
        if (student, lesson) in seen:
            problems.append(
                f"{student}'s {lesson} is given twice ({seen[student, lesson]} and {path}): the gradebook keeps "
                "one notebook per student and lesson, so pass one of them"
            )
        seen[student, lesson] = path
    return problems


def _print_totals(rows: Sequence[Sequence[str]]) -> None:
    """The totals as a table a person reads (stderr), cells made safe as in the files."""
    text_rows = [list(TOTALS_COLUMNS), *[[safe_cell(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in text_rows) for i in range(len(TOTALS_COLUMNS))]
    for row in text_rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=sys.stderr)


def check_command(
    paths: Sequence[Path],
    timeout_s: int,
    notebook_timeout_s: int | None,
    out_dir: Path,
    notebooks_dir: Path,
    output_cap: int = OUTPUT_CAP_BYTES,
    jobs: int = 1,
) -> int:
    """Check every notebook, ``jobs`` at a time: rows on stdout (TSV); the gradebook in ``out_dir`` gains them.

    Exit status 1 if any row is ``error``, 2 if the batch or the gradebook already there is refused (nothing runs).
    """
    problems = _validate_batch(paths)
    try:
        read_gradebook(Path(out_dir) / "gradebook.csv")  # refuse a foreign file now, not after an hour of grading
    except GradebookError as error:
        problems.append(str(error))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        print("error: nothing was graded and the gradebook is unchanged.", file=sys.stderr)
        return 2
    sys.stdout.write(table_text([COLUMNS], "\t"))
    sys.stdout.flush()
    grade = functools.partial(
        run_submission,
        timeout_s=timeout_s,
        notebook_timeout_s=notebook_timeout_s,
        notebooks_dir=notebooks_dir,
        output_cap=output_cap,
    )
    results: list[CheckResult] = []
    started = time.monotonic()
    interrupted = False
    try:
        for path, outcome in zip(paths, in_workers(grade, list(paths), jobs, ONE_THREAD), strict=True):
            report = _worker_died(path, outcome) if isinstance(outcome, WorkerDied) else outcome
            sys.stdout.write(table_text(map(_row, report.results), "\t"))
            sys.stdout.flush()  # rows so far are safe even if the teacher stops the batch
            results.extend(report.results)
    except KeyboardInterrupt:  # Ctrl-C: the notebooks graded so far still go into the gradebook
        interrupted = True
    elapsed = time.monotonic() - started
    rows, total_rows = write_gradebook(out_dir, [_row(result) for result in results])
    _print_totals([row for row in total_rows if row[0] in {result.student for result in results}])
    notebooks = len({result.notebook for result in results})
    print(
        f"# {notebooks} notebook(s) in {elapsed:.0f} s with {jobs} job(s); gradebook: {out_dir / 'gradebook.csv'} "
        f"({len(rows)} rows, {len(rows) - len(results)} kept from earlier runs), totals: {out_dir / 'totals.csv'}",
        file=sys.stderr,
    )
    errors = sum(result.status == "error" for result in results)
    if errors:
        print(f"# {errors} row(s) with verdict 'error': something could not be graded", file=sys.stderr)
    if interrupted:
        print(
            f"# interrupted: {notebooks} of {len(paths)} notebook(s) graded and kept; grade the rest", file=sys.stderr
        )
        return 130
    return 1 if errors else 0
