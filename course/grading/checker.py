"""``python -m course.assignments check``: run handed-in lessons and write a gradebook.

For each handed-in notebook the checker

1. finds its lesson by file name (``03_scaled_dot_product_attention.ipynb``) among the course's lessons, and
   from the lesson the exercises and the check that grades each (``check_attention_weights`` from
   ``course.exercises.lesson03`` grades ``attention_weights``);
2. writes the notebook it will run: the student's cells as handed in, with the check cell after each exercise
   replaced by a locked cell of its own (``answer_the_checker("function")``: the kernel answers the check's calls
   of the learner's function, and the check itself runs in the supervisor, :mod:`course.grading.remote`), or
   inserted where the student deleted it, so that a check redefined in an answer cell is never the one used;
3. runs that notebook in a supervisor process (:mod:`course.grading.supervisor`) started in a session of its
   own, with a minimal environment, whose kernel runs in the sandbox of :mod:`course.grading.sandbox` (a
   fresh temporary folder holding only the notebook, the course read-only, no network, its own processes),
   and reads the signed result it returns, only from a supervisor that exited by itself;
4. kills every process left from that notebook, whatever it did to detach itself;
5. gives every exercise a row: ``pass``, ``wrong``, ``not attempted`` or ``error`` (it did not run: its
   cell crashed, its check timed out and was interrupted, the kernel died), and 1 point for a pass.

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
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat
from nbformat import NotebookNode, v4

from course.grading import GRADING_ENV, sandbox
from course.grading.exam import exam_message
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
from course.grading.handed_in import RefusedFile, read_handed_in
from course.grading.supervisor import CHECKER_PID_ENV, sign
from course.grading.workers import ONE_THREAD, WorkerDied, in_workers
from course.lessons import grading_timeout
from course.solution_notebooks import (
    NOTEBOOKS_DIR,
    SOLUTION_ONLY_TAG,
    ReleaseError,
    check_imports,
    find_exercises,
    notebook_from_bytes,
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
The sandbox (bubblewrap, `bwrap`; refused to run without it unless you pass --no-sandbox): each notebook's
kernel sees read-only views of the system, Python and the course's helpers/, course/ and data/ (not the
checks and reference answers in course/exercises, which it sees as a stand-in; not the solutions in notebooks/,
not other students' files, not your home folder), a folder holding only its own notebook and a private /tmp and
/dev/shm of bounded size; it has its own process namespace (it cannot see, read the memory of, write to or kill
the checker or its supervisor), no network, cannot make user namespaces, runs as a uid of its own when you are
root (one per notebook graded at once, so a fork bomb stops at its own process limit), and each of its processes
is limited to --memory MiB. The supervisor that computes and signs the verdicts stays outside; a result counts only
from a supervisor that exited by itself. Only a regular file in a student's folder is read (no link is followed, no
FIFO opened). SIGTERM, SIGHUP and SIGINT (also to a check a script started with `&`) stop check as Ctrl-C does
(every notebook's processes killed, the rows graded so far kept); rows reach the gradebook as each notebook ends, and
after a kill -9 of check nothing it started runs on for more than a few seconds (Linux tells each level below).

Verdicts are computed outside the kernel: the check cell after each exercise is replaced by a locked cell in which
the kernel only calls the learner's function when the supervisor asks. The course's check runs in the supervisor,
sends each call's inputs in, and gets back the results and the inputs after the call as data (tensors, numbers,
strings, read with torch.load(weights_only=True)), so nothing the notebook prints, patches, hooks or displays
reaches the verdict. What the notebook prints or writes to file descriptors 1 and 2 is not counted. Rows are
written with a CSV writer (messages on one line). A cell longer than --timeout is interrupted and the notebook
goes on (its exercise scores 0, as in nbgrader); a notebook longer than --notebook-timeout, or a kernel that dies,
ends that notebook only: its exercises get rows with verdict 'error', checking goes on, and the exit status is 1
at the end.

What it does NOT stop: an answer can still be computed by code the course ships in helpers/ (the lessons need
it), in ways the no-shortcut rule does not name; a hint's message can say what the right numbers were. With
--no-sandbox the code runs as your user and can read and write anything your account can (the solutions, the
reference answers, other students' submissions), use the network and, as root, read the supervisor's memory: it
is then not a sandbox for hostile code, so run it in a container (e.g. `docker run --network none`, the course
mounted read-only)."""


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
    """The locked cell that grades one exercise. It holds no check: the kernel only answers the course's check,
    which the supervisor runs outside the sandbox (:mod:`course.grading.remote`) on the learner's results."""
    return (
        "from course.grading.learner_side import answer_the_checker  # calls your function; the check runs outside\n\n"
        f'answer_the_checker("{exercise.function}")'
    )


def _defines(source: str, function: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(function)}\s*\(", source, re.MULTILINE) is not None


def grading_notebook(
    submission: NotebookNode, exercises: Sequence[GradedExercise]
) -> tuple[NotebookNode, dict[int, GradedExercise], list[int | None]]:
    """The notebook the checker runs, which cells grade which exercise, and each cell's number as handed in.

    Each exercise is graded right after the last cell that defines its function (where a notebook defines it
    twice, the later definition is the answer), in place of the check cell that follows it, if one does."""
    cells: list[tuple[NotebookNode, int | None]] = []
    for number, cell in enumerate(submission.cells, start=1):
        cell = nbformat.from_dict(json.loads(json.dumps(cell)))
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cells.append((cell, number))
    graded: dict[int, GradedExercise] = {}  # id(cell) -> exercise
    for exercise in exercises:
        # The last definition is the answer: the one a kernel that ran the notebook top to bottom holds at the end,
        # and the one a student who rewrote an answer further down means (the first is an earlier attempt).
        place = max(
            (
                i
                for i, (cell, _) in enumerate(cells)
                if cell.cell_type == "code" and _defines(cell.source, exercise.function)
            ),
            default=None,
        )
        trusted = v4.new_code_cell(graded_cell_source(exercise))
        if place is None:
            cells.append((trusted, None))  # reports "not defined"
        else:
            following = next((i for i in range(place + 1, len(cells)) if cells[i][0].cell_type == "code"), None)
            replaces = following is not None and any(
                function == exercise.function for _, function in _check_calls(cells[following][0].source)
            )
            if following is not None and replaces and id(cells[following][0]) not in graded:
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
    # The teacher's thread settings reach the kernel (OpenMP reads its wait policy once, as torch loads); without
    # them the lesson's kernel chooses its threads from the load (helpers.tools.threads).
    names = ("MULTI30K_DIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LC_ALL", "TZ",
             "PYTHONPATH")  # fmt: skip
    for name in names:
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


@functools.cache
def sandbox_unavailable() -> str | None:
    """Why this machine cannot sandbox a notebook (None: it can); asked once per process."""
    return sandbox.unavailable()


SCRATCH_PREFIX = "check-"  # a notebook's scratch folder: check-<8 characters> in the temporary folder


def course_root() -> Path:
    """The folder holding the course's ``helpers/``, ``course/`` and ``data/`` (what a kernel imports)."""
    return Path(__file__).resolve().parents[2]


def sandbox_job(
    scratch: Path, env: dict[str, str], limits: sandbox.Limits, uid: int = sandbox.SANDBOX_UID, hide_checks: bool = True
) -> dict:
    """The sandbox part of a supervisor's job: what the kernel sees (its notebook's folder, its sockets' folder,
    the course read-only, no solutions), the uid it runs as (this notebook's own, from
    :func:`course.grading.sandbox.claimed_uid`) and the command prefix that puts it there. Changes ``env``."""
    work, sockets = scratch / "work", scratch / "sockets"
    sockets.mkdir()
    root = course_root()
    readable = [root / "helpers", root / "course", root / "data", Path(env["ATTENTION_COURSE_CACHE"])]
    readable += [Path(env["MULTI30K_DIR"])] if env.get("MULTI30K_DIR") else []
    for folder in (work, sockets):
        sandbox.give_to_sandbox(folder, uid)
    env.update(HOME="/tmp", TMPDIR="/tmp", PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    # No check and no reference answer within the kernel's reach: course/exercises is replaced by a stand-in
    # whose check_... names only say that the checker grades (the checks run in the supervisor, or in nbgrader's
    # process for course.grading.nbgrader_kernel). hide_checks=False shows the real course/exercises instead.
    hidden = [(Path(__file__).with_name("stand_in_exercises"), root / "course" / "exercises")] if hide_checks else []
    prefix = sandbox.kernel_prefix(readable, [work, sockets], work, limits, uid, replaced=hidden)
    return {"prefix": prefix, "sockets": str(sockets), "uid": uid}


def refuse_to_check(out_dir: Path, sandboxed: bool) -> str | None:
    """Why ``check`` should not start (None: it may), found before any notebook runs: no sandbox on this
    machine (unless the teacher chose to go without), or a gradebook folder that cannot be written."""
    if sandboxed and sandbox_unavailable():
        return (
            f"cannot sandbox the notebooks: {sandbox_unavailable()}. Install bubblewrap, or pass --no-sandbox "
            "to run them without it (only for students you trust: see `check --help`)."
        )
    if sandboxed:
        try:
            sandbox.scratch_parent(SCRATCH_PREFIX)
        except sandbox.SandboxUnavailable as error:
            return f"cannot sandbox the notebooks: {error}."
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        return f"--out {out_dir} is a file, not a folder: give the folder for gradebook.csv and totals.csv"
    for name in ("gradebook.csv", "totals.csv"):
        if (out_dir / name).is_dir():
            return f"{out_dir / name} is a folder: the gradebook cannot be written there"
    existing = next((p for p in [out_dir, *out_dir.absolute().parents] if p.exists()), Path("/"))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return f"--out {out_dir}: {existing} cannot be written, so the gradebook could not be saved"
    return None


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
    """Run the supervisor on ``job``; its verified result, or None (killed, crashed, forged, out of time).

    A result counts only from a supervisor that exited by itself with status 0, and only its signed line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "course.grading.supervisor"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=work,
        env={
            **env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), env.get("PYTHONPATH")])),
            CHECKER_PID_ENV: str(os.getpid()),  # the supervisor stops its notebook when this process dies
        },
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(json.dumps(job).encode(), timeout=wall_s)
        if process.returncode != 0:  # killed (by a signal: negative) or crashed: whatever it wrote is not a result
            output = b""
    except subprocess.TimeoutExpired:
        output = b""
    finally:
        kill_survivors(env[RUN_TOKEN_ENV], process.pid)
        process.kill()
        process.wait()
    return _signed_result(output[-4_000_000:], job["key"])


def run_submission(
    path: str | Path,
    timeout_s: int | None = None,
    notebook_timeout_s: int | None = None,
    notebooks_dir: str | Path | None = None,
    output_cap: int = OUTPUT_CAP_BYTES,
    sandboxed: bool = True,
    memory_bytes: int = sandbox.Limits.memory_bytes,
) -> SubmissionReport:
    """Run one handed-in notebook as ``CHECK_ISOLATION`` says; a row for every exercise of its lesson.

    ``timeout_s`` bounds each cell (a cell over it is interrupted and the notebook goes on; None: its lesson's
    grading timeout, ``course.lessons.grading_timeout``),
    ``notebook_timeout_s`` (None: no bound) the whole notebook. ``sandboxed`` (the default) runs the kernel in
    the sandbox of :mod:`course.grading.sandbox`, each of its processes under ``memory_bytes`` of address
    space; where no sandbox can be made the notebook is not run (error rows say why) unless ``sandboxed`` is
    False. Nothing is raised: an unreadable file, an unknown lesson, a timeout or a dead kernel becomes
    ``problem`` and ``error`` rows; so is a failure of the checker's own on one odd file (one error row: the
    batch goes on, and the rows graded before it are kept).
    """
    try:
        return _run_submission(
            Path(path), timeout_s, notebook_timeout_s, notebooks_dir, output_cap, sandboxed, memory_bytes
        )
    except Exception as error:  # a file nothing above foresaw must cost its own row, never the batch
        problem = f"not graded: the checker failed on this file ({type(error).__name__}: {error}); report it"
        return _notebook_error(Path(path), problem)


def _run_submission(
    path: Path,
    timeout_s: int | None,
    notebook_timeout_s: int | None,
    notebooks_dir: str | Path | None,
    output_cap: int,
    sandboxed: bool,
    memory_bytes: int,
) -> SubmissionReport:
    path = Path(path)
    notebooks_dir = Path(notebooks_dir or NOTEBOOKS_DIR)
    student, lesson = student_of(path), path.stem
    timeout_s = grading_timeout(path.name) if timeout_s is None else timeout_s

    def report(exercises, verdicts, problem):
        rows = []
        for exercise in exercises:
            verdict = verdicts.get(exercise.function)
            if verdict is None and exercise.function in timed_out:
                status, message = "error", f"its check timed out after {timed_out[exercise.function]} s (interrupted)"
            elif verdict is None:
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

    timed_out: dict[str, int] = {}  # exercise -> the limit its check cell ran over
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
        handed_in = read_handed_in(path)  # as root: never through a link, never a FIFO (course.grading.handed_in)
        submission = notebook_from_bytes(handed_in, str(path))
    except RefusedFile as error:
        return report(exercises, {}, f"refused: {error}")
    except ReleaseError as error:
        return report(exercises, {}, f"{path.name} {error.problem}")  # "... cannot be read as a notebook: ..."
    if sandboxed and sandbox_unavailable():
        return report(exercises, {}, f"not run: no sandbox ({sandbox_unavailable()}); --no-sandbox runs it without")
    notebook, graded, numbers = grading_notebook(submission, exercises)
    token, key = secrets.token_hex(16), secrets.token_hex(32)
    # A uid of this notebook's own while it runs (--jobs notebooks never share one), held until its folder is gone.
    claim = sandbox.claimed_uid() if sandboxed else contextlib.nullcontext(sandbox.SANDBOX_UID)
    parent = sandbox.scratch_parent(SCRATCH_PREFIX) if sandboxed else None  # a deep TMPDIR: /tmp (the sockets)
    with claim as uid, tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=parent) as scratch:
        work, home = Path(scratch) / "work", Path(scratch) / "home"
        work.mkdir()
        (work / path.name).write_bytes(handed_in)  # where the notebook "is", as when the student ran it
        env = submission_environment(home, token)
        wall = (notebook_timeout_s or timeout_s * (len(notebook.cells) + 1)) + 120
        # CPU seconds per process: a backstop behind the wall-clock limits (every core busy all the time).
        limits = sandbox.Limits(memory_bytes=memory_bytes, cpu_s=int(wall) * max(1, os.cpu_count() or 1))
        kernel_env = dict(env)  # the supervisor keeps the host's view (HOME, TMPDIR in the scratch folder)
        box = sandbox_job(Path(scratch), kernel_env, limits, uid) if sandboxed else None
        job = {
            "notebook": notebook,
            "graded_cells": sorted(graded),
            "exercises": {str(i): [e.module, e.check, e.function] for i, e in graded.items()},
            "cell_numbers": numbers,
            "timeout_s": timeout_s,
            "notebook_timeout_s": notebook_timeout_s,
            "output_cap": output_cap,
            "work": str(work),
            "env": kernel_env,
            "key": key,
            "sandbox": box,
        }
        result = _supervise(job, work, env, wall)
    if result is None:
        return report(
            exercises, {}, "its checker process was stopped before it could report (killed from the notebook?)"
        )
    verdicts = {}
    for index, entry in result.get("verdicts", {}).items():
        exercise = graded.get(int(index))
        if exercise is None or entry.get("function") != exercise.function:
            continue  # not a verdict on a graded exercise's own function
        if entry.get("status") in ("pass", "wrong", "not attempted", "error"):
            verdicts[exercise.function] = entry
    for index, limit in result.get("timed_out", {}).items():
        if int(index) in graded:
            timed_out[graded[int(index)].function] = int(limit)
    problem = result.get("problem")
    if problem and result.get("dropped_output_bytes"):
        problem += f"; {result['dropped_output_bytes']:,} bytes of output over the {output_cap:,}-byte cap dropped"
    return report(exercises, verdicts, problem)


def check_submission(
    path: str | Path, timeout_s: int | None = None, notebook_timeout_s: int | None = None, **options
) -> list[CheckResult]:
    """The rows of one handed-in notebook (see :func:`run_submission`, which also says what stopped it, and
    takes the ``options``: ``notebooks_dir``, ``output_cap``, ``sandboxed``, ``memory_bytes``)."""
    return run_submission(path, timeout_s, notebook_timeout_s, **options).results


def _row(result: CheckResult) -> list[str]:
    """The gradebook row of one result (as text; :mod:`course.grading.gradebook` makes each cell safe)."""
    points = "" if result.exercise == NOTEBOOK_ROW else str(result.points)
    return [result.student, result.lesson, result.exercise, result.status, points, result.message]


def _verdicts_only(report: SubmissionReport) -> SubmissionReport:
    """``report`` with each verdict's message replaced by the verdict alone (exam mode); errors keep theirs."""
    results = [replace(result, message=exam_message(result.status, result.message)) for result in report.results]
    return replace(report, results=results)


def _notebook_error(path: Path, problem: str) -> SubmissionReport:
    """The report of a notebook that could not be graded at all: one ``(notebook)`` error row saying why."""
    row = CheckResult(str(path), NOTEBOOK_ROW, "error", _one_line(problem), student_of(path), Path(path).stem, 0, 0)
    return SubmissionReport(str(path), [row], problem)


def _worker_died(path: Path, error: WorkerDied) -> SubmissionReport:
    """The report of a notebook whose grading worker died: one ``(notebook)`` error row, so it is graded again."""
    return _notebook_error(path, f"not graded: {error}; grade it again")


def _validate_batch(paths: Sequence[Path]) -> list[str]:
    """What makes this batch ungradable before anything runs: a name no gradebook row can hold, a notebook twice."""
    problems: list[str] = []
    seen: dict[tuple[str, str], Path] = {}  # (student, lesson) -> the first notebook given for it
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


class BatchStopped(BaseException):
    """SIGTERM or SIGHUP reached ``check``: unwind as Ctrl-C does (every notebook's processes killed, its scratch
    folder removed, the rows graded so far kept). A BaseException, so that no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.signal_name}")


STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop_the_batch(signum: int, frame: object) -> None:
    # The first signal starts the clean-up; a second (the service manager's SIGTERM right after SIGHUP, another
    # Ctrl-C) must not cut it short, or the notebook's processes and its scratch folder would outlive it.
    _ignore_stopping_signals()
    raise KeyboardInterrupt if signum == signal.SIGINT else BatchStopped(signum)


def _ignore_stopping_signals() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for number in STOPPING_SIGNALS:
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, signal.SIG_IGN)


@contextlib.contextmanager
def _signals_stop_the_batch():
    """While grading, SIGINT, SIGTERM and SIGHUP unwind through the grading code's clean-up; the handlers that were
    there before come back afterwards. A SIGTERM or SIGHUP the caller ignores (``nohup``: SIGHUP) stays ignored.

    SIGINT always stops the batch, even where it came in ignored: a shell without job control (a script) starts
    ``check … &`` with SIGINT ignored, only so that a Ctrl-C meant for the script's foreground command misses it.
    Then the script ends and the batch runs on unseen, and a ``kill -INT`` aimed at it does nothing: both times the
    person who sent it wants the batch stopped, and stopping it keeps every row graded so far. (``nohup`` does not
    ignore SIGINT; a batch meant to survive its terminal is started with ``nohup`` or ``setsid``.)"""
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield
        return
    before = {number: signal.getsignal(number) for number in STOPPING_SIGNALS}
    try:
        for number, handler in before.items():
            if handler is not signal.SIG_IGN or number == signal.SIGINT:
                signal.signal(number, _stop_the_batch)
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)


def _print_totals(rows: Sequence[Sequence[str]]) -> None:
    """The totals as a table a person reads (stderr), cells made safe as in the files."""
    text_rows = [list(TOTALS_COLUMNS), *[[safe_cell(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in text_rows) for i in range(len(TOTALS_COLUMNS))]
    for row in text_rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=sys.stderr)


def check_command(
    paths: Sequence[Path],
    timeout_s: int | None,
    notebook_timeout_s: int | None,
    out_dir: Path,
    notebooks_dir: Path,
    output_cap: int = OUTPUT_CAP_BYTES,
    sandboxed: bool = True,
    memory_mib: int = 8192,
    jobs: int = 1,
    exam: bool = False,
) -> int:
    """Check every notebook, ``jobs`` at a time: rows on stdout (TSV); the gradebook in ``out_dir`` gains them.
    With ``exam`` each verdict row's message is the verdict alone (:mod:`course.grading.exam`): no hint.

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
        sandboxed=sandboxed,
        memory_bytes=memory_mib * 2**20,
    )
    results: list[CheckResult] = []
    started = time.monotonic()
    stopped_by = None  # the signal that stopped the batch (None: it ran to the end)
    with _signals_stop_the_batch():
        try:
            for path, outcome in zip(paths, in_workers(grade, list(paths), jobs, ONE_THREAD), strict=True):
                report = _worker_died(path, outcome) if isinstance(outcome, WorkerDied) else outcome
                if exam:
                    report = _verdicts_only(report)
                sys.stdout.write(table_text(map(_row, report.results), "\t"))
                sys.stdout.flush()  # rows so far are safe even if the teacher stops the batch
                # Into the gradebook at once: a checker killed with SIGKILL loses only the notebook in flight.
                write_gradebook(out_dir, [_row(result) for result in report.results])
                results.extend(report.results)
        except (KeyboardInterrupt, BatchStopped) as stop:  # the notebooks graded so far are in the gradebook
            stopped_by = stop.signal_name if isinstance(stop, BatchStopped) else "SIGINT"
        elapsed = time.monotonic() - started
        _ignore_stopping_signals()  # the last write is not cut short either (the handlers come back after it)
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
    if stopped_by is not None:
        what = "interrupted" if stopped_by == "SIGINT" else f"stopped by {stopped_by}"
        print(f"# {what}: {notebooks} of {len(paths)} notebook(s) graded and kept; grade the rest", file=sys.stderr)
        return 130 if stopped_by == "SIGINT" else 128 + getattr(signal, stopped_by)
    return 1 if errors else 0
