"""Student copies of the lessons: the solutions come out, everything else that teaches stays.

Every lesson in ``notebooks/`` is a *solution notebook*. An exercise is the body of a function,
written between two single-hash markers on lines of their own, indented like the code they hold::

    def positional_encoding(num_positions, dim):
        # BEGIN SOLUTION
        ...reference solution...
        # END SOLUTION

A release writes one student copy per lesson, with the same file name, into an output folder::

    python -m course.assignments release --out DIR      # or: make release  (DIR = student/)
    python -m course.assignments release --out DIR --lessons 02 03 09   # only these lessons
    python -m course.assignments list                   # the exercises each lesson holds
    python -m course.assignments check FILE.ipynb ...   # grade handed-in copies (--jobs at once; --hide-checks: exam)
    python -m course.assignments nbgrader               # nbgrader sources in classroom/source (--hide-checks: exam)
    python -m course.assignments collapse               # hide solution cells in JupyterLab (metadata only)

What a student copy is:

* Each marked region is replaced by ``# YOUR CODE HERE`` and ``raise NotImplementedError()`` at
  the indentation of its ``# BEGIN SOLUTION`` line (what nbgrader writes), so the cell still runs
  and defines the function, and the lesson's check cell reports "not attempted yet".
* Cells tagged ``solution-only`` (any cell type) are removed: use the tag for a worked answer, an
  explanation of the solution, or a cell that only demonstrates the solved function.
* A markdown paragraph that speaks of a folded solution ("... folded away ... click the bar") is dropped:
  a copy holds no solution to unfold.
* Outputs and execution counts are cleared. Cell metadata keeps only ``tags`` (and, in raw cells,
  the ``format``/``raw_mimetype`` that say what the raw text is); notebook metadata keeps only
  ``kernelspec`` and ``language_info``. Widget state (``metadata.widgets``), nbgrader's records
  and anything else a tool stored there are dropped, because any of them can carry solution text.

The release refuses, naming notebook and cell, and writes nothing at all, when a notebook has an
unbalanced marker (``BEGIN`` without ``END`` in the same cell, or ``END`` without ``BEGIN``), a
nested region, a marker in a markdown or raw cell, or a line that looks like a marker but is not
exactly one (``### BEGIN SOLUTION``, ``# begin solution``, ``# BEGIN SOLUTION  # hint``): nbgrader
treats any line containing ``BEGIN SOLUTION`` as a marker and otter-grader does not accept the
triple-hash form, so only the exact single-hash line keeps all three tools in agreement. It also
refuses when removing a region would leave a cell that is no longer valid Python.

Writing is safe to repeat: every notebook is converted in memory first, then each file is written
to a temporary file in the output folder and moved into place (``os.replace``), so a reader never
sees a half-written copy. Output is byte-for-byte deterministic, and an unchanged copy is not
rewritten. Files in the output folder that the release does not produce (a teacher's notes, an
old copy of a renamed lesson) are left alone; stale ``.ipynb`` files are listed, never deleted.
The output folder may not be the lessons' folder or lie inside it (nbval would collect the copies).

Only notebooks are written: a student copy imports ``helpers`` (its checks and the reference code
that later cells use), so students need the course installed (``make lab``); docs/teaching.md
says how to hand copies out, check them, and use nbgrader or otter-grader instead.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from course.grading.checker import (
    CHECK_ISOLATION,
    CheckResult,
    SubmissionReport,
    check_command,
    check_submission,
    refuse_to_check,
    run_submission,
)
from course.grading.workers import usable_cores
from course.lessons import DEFAULT_GRADING_TIMEOUT_S, LESSONS, UNKNOWN_LESSON_TIMEOUT_S
from course.solution_notebooks import (
    BEGIN_MARKER,
    END_MARKER,
    NOTEBOOKS_DIR,
    PLACEHOLDER,
    SOLUTION_ONLY_TAG,
    Exercise,
    MarkerProblem,
    ReleaseError,
    cell_tags,
    check_imports,
    drop_folded_notes,
    find_exercises,
    python_of,
    read_notebook,
    strip_solutions,
    student_copy,
)
from helpers.tools.files import write_atomically

_read = read_notebook  # the name tests and notebooks of an earlier release used

__all__ = [
    "BEGIN_MARKER",
    "CHECK_ISOLATION",
    "END_MARKER",
    "NOTEBOOKS_DIR",
    "PLACEHOLDER",
    "SOLUTION_ONLY_TAG",
    "CheckResult",
    "Exercise",
    "ReleaseError",
    "SubmissionReport",
    "UnknownLesson",
    "check_submission",
    "collapse_solutions",
    "find_exercises",
    "main",
    "nbgrader_source",
    "release",
    "run_submission",
    "select_lessons",
    "strip_solutions",
    "student_copy",
]


def _serialize(notebook: NotebookNode, name: str) -> bytes:
    """Deterministic bytes: nbformat's writer sorts keys; we also insist the result is valid."""
    try:
        nbformat.validate(notebook)
    except nbformat.ValidationError as error:
        raise ReleaseError(name, None, f"the student copy would not be a valid notebook: {error.message}") from None
    return (nbformat.writes(notebook) + "\n").encode("utf-8")


def _write_atomically(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically (readable by the class); False if it was already so."""
    return write_atomically(path, data, skip_unchanged=True)


class UnknownLesson(ReleaseError):
    """``--lessons`` named a lesson that is not in the lessons' folder (nothing is wrong with any notebook)."""


def select_lessons(sources: Sequence[Path], lessons: Sequence[str]) -> list[Path]:
    """The lesson files among ``sources`` that ``lessons`` names: by number (``02`` or ``2``), stem or file name.

    Raises ``UnknownLesson`` (a ``ReleaseError``) for a name that is no lesson, listing the lessons there are.
    """
    chosen = set()
    for wanted in lessons:
        number = wanted.zfill(2) if wanted.isdigit() else None
        matches = [
            source
            for source in sources
            if wanted in (source.name, source.stem) or (number is not None and source.stem.split("_")[0] == number)
        ]
        if not matches:
            there = ", ".join(source.stem.split("_")[0] for source in sources)
            folder = sources[0].parent if sources else "the lessons' folder"
            raise UnknownLesson(
                str(folder), None, f"there is no lesson {wanted!r}: expected a lesson's number or name, one of {there}"
            )
        chosen.update(matches)
    return sorted(chosen)


def release(
    out_dir: str | Path, notebooks_dir: str | Path = NOTEBOOKS_DIR, lessons: Sequence[str] | None = None
) -> list[Path]:
    """Write the student copy of every ``*.ipynb`` in ``notebooks_dir`` (or of ``lessons`` only) into ``out_dir``.

    ``lessons`` names lessons by number (``["02", "03", "09"]``) or file name (see :func:`select_lessons`).
    All notebooks are converted before anything is written, so one bad notebook leaves the
    output folder exactly as it was. Returns the paths of the student copies (sorted).
    """
    notebooks_dir, out_dir = Path(notebooks_dir), Path(out_dir)
    if not notebooks_dir.is_dir():
        raise ReleaseError(str(notebooks_dir), None, "expected a folder of lesson notebooks; it does not exist")
    every_lesson = sorted(notebooks_dir.glob("*.ipynb"))
    if not every_lesson:
        raise ReleaseError(str(notebooks_dir), None, "expected lesson notebooks (*.ipynb) in this folder, found none")
    sources = every_lesson if lessons is None else select_lessons(every_lesson, lessons)
    if out_dir.exists() and not out_dir.is_dir():
        raise ReleaseError(str(out_dir), None, "the output must be a folder, but a file of that name exists")
    _refuse_output_inside_lessons(out_dir, notebooks_dir, "the student copies")

    contents = {
        source.name: _serialize(student_copy(read_notebook(source), str(source)), str(source)) for source in sources
    }

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, data in contents.items():
        target = out_dir / file_name
        changed = _write_atomically(target, data)
        print(f"{'wrote' if changed else 'unchanged'}  {target}")
        written.append(target)
    lesson_names = {source.name for source in every_lesson}  # a lesson not chosen this time is not stale
    stale = sorted(p.name for p in out_dir.glob("*.ipynb") if p.name not in lesson_names)
    if stale:
        print(f"left untouched (no lesson of that name; delete if they are old copies): {', '.join(stale)}")
    return written


# ---------------------------------------------------------------------------------------------
# nbgrader: the same lessons as nbgrader source notebooks
# ---------------------------------------------------------------------------------------------
def _graded_check(source: str, imports: dict[str, str]) -> tuple[str, int] | None:
    """The check cell's text made into an nbgrader test, and how many checks it calls.

    nbgrader scores a test cell by whether it raises; the course's checks print a verdict and return
    it. So the locked cell imports each check itself (an answer cell that redefines ``check_x`` changes
    nothing), each top-level call ``check_x(function)`` becomes ``_verdict_1 = graded(check_x, "function")``
    (which refuses a check that is not the course's own, see :mod:`course.grading`), and a last line
    asserts that all of them passed, after every check has printed its hint: the cell runs so in a student's
    own kernel, while ``nbgrader autograde`` with the course's configuration runs its checks outside the kernel
    and scores their verdicts (:mod:`course.grading.nbgrader_tests`, which reads this form). ``imports`` maps
    each check's name to the course.exercises module the lesson imports it from. None when the cell calls no
    ``check_*`` function (or has magics or invalid Python); ``ValueError`` for a check it cannot import.
    """
    python = python_of(source)
    if python is None or python.strip() != source.strip():
        return None  # magics or invalid Python: leave it to the teacher
    lines = source.rstrip().split("\n")
    calls = []
    for statement in ast.parse(source).body:
        call = getattr(statement, "value", None)
        # One condition, not a flag, so that mypy narrows ``call`` to an ast.Call whose func is an ast.Name.
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id.startswith("check_")
            and isinstance(statement, (ast.Expr, ast.Assign))
        ):
            if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Name):
                raise MarkerProblem(f"{call.func.id}(...) should take the exercise's function alone, e.g. check_x(x)")
            if call.func.id not in imports:
                raise MarkerProblem(f"{call.func.id} is not imported from course.exercises anywhere in the lesson")
            calls.append((statement.lineno, statement.end_lineno, call.func.id, call.args[0].id))
    if not calls:
        return None
    for number, (first, last, check, function) in reversed(list(enumerate(calls, start=1))):
        lines[first - 1 : last] = [f'_verdict_{number} = graded({check}, "{function}")']
    modules: dict[str, list[str]] = {}
    for _, _, check, _ in calls:
        modules.setdefault(imports[check], []).append(check)
    header = [f"from {module} import {', '.join(dict.fromkeys(checks))}" for module, checks in modules.items()]
    header += ["from course.grading import graded  # refuses a check that is not the course's own", ""]
    names = ", ".join(f"_verdict_{number}" for number in range(1, len(calls) + 1)) + ("," if len(calls) == 1 else "")
    fail = "a check above did not pass: read its verdict"
    lines.append(f'assert all(verdict.passed for verdict in ({names})), "{fail}"')
    return "\n".join(header + lines), len(calls)


def _nbgrader_metadata(grade_id: str, answer: bool, points: int = 0) -> dict:
    """nbgrader's cell metadata (schema 3) for an autograded answer or a locked autograder test."""
    if answer:
        return {
            "grade": False,
            "grade_id": grade_id,
            "locked": False,
            "schema_version": 3,
            "solution": True,
            "task": False,
        }
    return {
        "grade": True,
        "grade_id": grade_id,
        "locked": True,
        "points": points,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }


def nbgrader_source(notebook: NotebookNode, name: str, hide_checks: bool = False) -> NotebookNode:
    """The lesson as an nbgrader *source* notebook: solutions kept, cells marked for nbgrader.

    ``solution-only`` cells are removed (nbgrader does not know the tag), each exercise cell
    becomes an "Autograded answer" cell, and the next code cell, which calls the checks, an
    "Autograder tests" cell worth one point per check that asserts the checks passed. With
    ``hide_checks`` (for an exam) the test cell's lines sit between nbgrader's hidden-test
    markers: students see an empty test cell and get no hints, and nbgrader puts the checks back
    when it autogrades. Raises ``ReleaseError`` like a release does, and for an exercise that is
    not followed by a code cell calling a check.
    """
    imports = check_imports(notebook)
    functions: dict[int, list[str]] = {}
    for exercise in find_exercises(notebook, name):  # validates the markers as a release does
        functions.setdefault(exercise.cell_index, []).append(exercise.function or "exercise")
    graded = copy.deepcopy(notebook)
    kept = [index for index, cell in enumerate(notebook.cells) if SOLUTION_ONLY_TAG not in cell_tags(cell)]
    code_after = {
        index: [later for later in kept if later > index and notebook.cells[later].cell_type == "code"]
        for index in functions
    }
    for index, names in functions.items():
        label = f"{'-'.join(names)}-{index}"
        graded.cells[index].metadata["nbgrader"] = _nbgrader_metadata(f"{label}-answer", answer=True)
        try:
            test = _graded_check(notebook.cells[code_after[index][0]].source, imports) if code_after[index] else None
        except MarkerProblem as problem:
            raise ReleaseError(
                name, code_after[index][0], str(problem), notebook.cells[code_after[index][0]].source
            ) from None
        if test is None:
            raise ReleaseError(
                name,
                index,
                "this exercise is not followed by a code cell that calls a check_...() function, so nbgrader "
                "would have nothing to grade it with",
                notebook.cells[index].source,
            )
        check = graded.cells[code_after[index][0]]
        check.source = f"### BEGIN HIDDEN TESTS\n{test[0]}\n### END HIDDEN TESTS" if hide_checks else test[0]
        check.metadata["nbgrader"] = _nbgrader_metadata(f"{label}-check", answer=False, points=test[1])
    graded.cells = [graded.cells[index] for index in kept]
    for cell in graded.cells:
        if cell.cell_type == "markdown":
            cell.source = drop_folded_notes(cell.source)  # nbgrader's release holds no solution to unfold
    # The solution run's widget state (31-56 KB a lesson): nbgrader clears outputs on release but keeps this.
    graded.metadata.pop("widgets", None)
    return graded


def _refuse_output_inside_lessons(out_dir: Path, notebooks_dir: Path, what: str) -> None:
    """nbval and `make test` collect every notebook under the lessons' folder: never write copies there."""
    if out_dir.exists() and out_dir.resolve() == notebooks_dir.resolve():
        raise ReleaseError(
            str(out_dir), None, f"the output folder is the lessons' own folder; {what} would overwrite the solutions"
        )
    if notebooks_dir.resolve() in out_dir.resolve().parents:
        raise ReleaseError(
            str(out_dir),
            None,
            f"the output folder is inside the lessons' folder {notebooks_dir}; nbval and `make test` would take "
            f"the {what} for lessons. Choose a folder outside it.",
        )


def _nbgrader(out_dir: Path, notebooks_dir: Path, hide_checks: bool) -> None:
    _refuse_output_inside_lessons(out_dir, notebooks_dir, "nbgrader notebooks (with solutions)")
    sources = sorted(notebooks_dir.glob("*.ipynb"))
    if not sources:
        raise ReleaseError(str(notebooks_dir), None, "expected lesson notebooks (*.ipynb) in this folder, found none")
    contents = {
        source: _serialize(nbgrader_source(read_notebook(source), str(source), hide_checks), str(source))
        for source in sources
    }
    for source, data in contents.items():
        target = out_dir / source.stem / source.name  # nbgrader: source/<assignment>/<notebook>.ipynb
        target.parent.mkdir(parents=True, exist_ok=True)
        print(f"{'wrote' if _write_atomically(target, data) else 'unchanged'}  {target}")
    from course.grading.nbgrader import CONFIG_TEMPLATE, write_config

    config = write_config(out_dir.parent)
    print(f"wrote  {config} (a template: set your course id and students)" if config else "kept  nbgrader_config.py")
    kept = out_dir.parent / "nbgrader_config.py"
    if config is None and kept.is_file() and "SandboxedExecute" not in kept.read_text(encoding="utf-8"):
        # A config written before autograde had the sandbox: nbgrader would run students' code as the teacher.
        print(
            f"warning: {kept} does not sandbox autograde: nbgrader runs students' code as your user, who can read "
            f"the solutions. Copy the autograde_preprocessors lines from {CONFIG_TEMPLATE} into it.",
            file=sys.stderr,
        )


# ---------------------------------------------------------------------------------------------
# Solutions out of sight in the lessons themselves (self-study)
# ---------------------------------------------------------------------------------------------
def is_solution_cell(cell: dict) -> bool:
    """A cell that holds a solution: a code cell with a ``# BEGIN SOLUTION`` line, or one tagged ``solution-only``."""
    source = cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else source
    tagged = SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", [])
    return tagged or (
        cell.get("cell_type") == "code" and any(line.strip() == BEGIN_MARKER for line in text.split("\n"))
    )


def collapse_solutions(notebook: dict) -> int:
    """Set ``metadata.jupyter.source_hidden`` on every solution cell (JupyterLab shows them collapsed).

    Works on the notebook as stored (a JSON dict), so nothing else changes; returns how many cells changed.
    Idempotent: a second call changes nothing. Student copies drop this metadata (they keep only tags).
    """
    changed = 0
    for cell in notebook.get("cells", []):
        if is_solution_cell(cell):
            jupyter = cell.setdefault("metadata", {}).setdefault("jupyter", {})
            if jupyter.get("source_hidden") is not True:
                jupyter["source_hidden"] = True
                changed += 1
    return changed


def _collapse(notebooks_dir: Path, check_only: bool) -> int:
    """Collapse every lesson's solution cells in place (metadata only); 1 if ``check_only`` finds one open."""
    open_cells = 0
    for source in sorted(notebooks_dir.glob("*.ipynb")):
        notebook = json.loads(source.read_text(encoding="utf-8"))
        changed = collapse_solutions(notebook)
        open_cells += changed
        if changed and not check_only:  # nbformat's own layout, so that only the metadata lines differ
            write_atomically(source, json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
        verb = "would collapse" if check_only else "collapsed"
        print(f"{source.name}: {verb} {changed} solution cell(s)" if changed else f"{source.name}: unchanged")
    return 1 if check_only and open_cells else 0


def _list(notebooks_dir: Path) -> None:
    for source in sorted(notebooks_dir.glob("*.ipynb")):
        exercises = find_exercises(read_notebook(source), str(source))
        print(f"{source.name}: {len(exercises)} exercise(s)")
        for exercise in exercises:
            function = exercise.function or "(top level)"
            print(f"  cell index {exercise.cell_index:3d}  {function:32s} {exercise.lines} solution line(s)")


def _nbgrader_totals(database: Path, out: Path | None) -> int:
    from course.grading.nbgrader import write_nbgrader_totals

    try:
        written = write_nbgrader_totals(database, out)
    except (FileNotFoundError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"totals: {written}")
    return 0


def _grading_timeouts() -> str:
    """The lessons' grading timeouts in a phrase: the default and the lessons that have more."""
    longer = [
        f"{lesson.number}: {lesson.grading_timeout_s} s"
        for lesson in LESSONS
        if lesson.grading_timeout_s != DEFAULT_GRADING_TIMEOUT_S
    ]
    return f"{DEFAULT_GRADING_TIMEOUT_S} s" + (f" ({', '.join(longer)})" if longer else "")


def _positive_int(text: str, unit: str = "second", units: str | None = None) -> int:
    """``text`` as a whole number of at least 1 ``unit``; argparse's error, in that unit, otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of {units or unit + 's'}, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 {unit}, got {value}")
    return value


def _jobs(text: str) -> int:
    return _positive_int(text, "job")


def _mebibytes(text: str) -> int:
    return _positive_int(text, "MiB", "MiB")


def _bytes(text: str) -> int:
    return _positive_int(text, "byte")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``release``, ``list``, ``nbgrader``, ``nbgrader-totals`` or ``check``; exit status 1 on
    errors (2 for a missing gradebook or a missing sandbox)."""
    parser = argparse.ArgumentParser(prog="python -m course.assignments", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    release_parser = commands.add_parser("release", help="write student copies (no solutions) of every lesson")
    release_parser.add_argument(
        "--out", required=True, type=Path, help="folder for the student copies (created if missing)"
    )
    release_parser.add_argument(
        "--lessons",
        nargs="+",
        metavar="LESSON",
        help="release only these lessons, by number or name (e.g. --lessons 02 03 09; default: every lesson)",
    )
    list_parser = commands.add_parser("list", help="list the exercises (solution regions) of every lesson")
    nbgrader_parser = commands.add_parser(
        "nbgrader", help="write nbgrader source notebooks, one assignment folder per lesson"
    )
    nbgrader_parser.add_argument(
        "--out",
        type=Path,
        default=Path("classroom/source"),
        help="nbgrader's source/ folder, outside the package (default: %(default)s; nbgrader_config.py is "
        "written beside it if missing)",
    )
    nbgrader_parser.add_argument(
        "--hide-checks",
        action="store_true",
        help="exam mode: students see no checks and no hints; nbgrader runs them when grading",
    )
    totals_parser = commands.add_parser(
        "nbgrader-totals",
        help="write per-student totals from nbgrader's gradebook.db (after nbgrader autograde), as check's totals.csv",
    )
    totals_parser.add_argument(
        "--gradebook",
        type=Path,
        default=Path("classroom/gradebook.db"),
        help="nbgrader's gradebook (default: %(default)s)",
    )
    totals_parser.add_argument(
        "--out", type=Path, default=None, help="the CSV file to write (default: totals.csv beside the gradebook)"
    )
    collapse_parser = commands.add_parser(
        "collapse",
        help="collapse every solution cell of the lessons in JupyterLab (cell metadata only; run after editing)",
    )
    collapse_parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a solution cell is not collapsed"
    )
    for sub in (release_parser, list_parser, nbgrader_parser, collapse_parser):
        sub.add_argument(
            "--notebooks", type=Path, default=NOTEBOOKS_DIR, help="folder of solution notebooks (default: %(default)s)"
        )
    check_parser = commands.add_parser(
        "check",
        help="run handed-in notebooks and write a gradebook (a row per exercise; tab-separated on stdout)",
        description="Run handed-in notebooks, --jobs at a time, and print one tab-separated row per exercise of each "
        "(student, lesson, exercise, verdict, points, message; verdict 'error' where it could not be graded, "
        "and a '(notebook)' row saying what stopped a notebook), then add them to gradebook.csv in --out (a "
        "notebook graded again replaces its old rows; every other row is kept) and rewrite totals.csv (per "
        "student and lesson, and per student over all lessons). Cells that a spreadsheet would take for a "
        "formula are written with a leading '. The exit status is 1 when any row is 'error', 2 when the batch "
        "is refused before it runs (a name with control characters, a notebook given twice, a gradebook check "
        "did not write).\n\n" + CHECK_ISOLATION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check_parser.add_argument(
        "submissions", nargs="+", type=Path, help="student notebooks to run (their code is executed)"
    )
    check_parser.add_argument(
        "--timeout",
        type=_positive_int,
        default=None,
        help="seconds one cell may run (default: its lesson's grading timeout in course/lessons.py, from its "
        f"slowest cell: {_grading_timeouts()}; {UNKNOWN_LESSON_TIMEOUT_S} s for a notebook it does not name)",
    )
    check_parser.add_argument(
        "--notebook-timeout",
        type=_positive_int,
        default=1800,
        help="seconds a whole notebook may run (default: %(default)s)",
    )
    check_parser.add_argument(
        "--output-cap",
        type=_bytes,
        default=10_000_000,
        help="bytes of cell outputs kept per notebook; more is dropped (default: %(default)s)",
    )
    check_parser.add_argument(
        "--out",
        type=Path,
        default=Path("grades"),
        help="folder for gradebook.csv and totals.csv (default: %(default)s)",
    )
    check_parser.add_argument(
        "--notebooks", type=Path, default=NOTEBOOKS_DIR, help="folder of the lessons (default: %(default)s)"
    )
    check_parser.add_argument(
        "--memory",
        type=_mebibytes,
        default=8192,
        help="MiB of address space each process of a notebook may use (default: %(default)s)",
    )
    check_parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run the notebooks without bubblewrap's sandbox: for a machine without bwrap, and only for students "
        "you trust (see 'What it does NOT stop' above)",
    )
    check_parser.add_argument(
        "--jobs",
        type=_jobs,
        default=usable_cores(),
        help="notebooks graded at once, each with one thread (default: the cores this process may use, %(default)s)",
    )
    check_parser.add_argument(
        "--hide-checks",
        action="store_true",
        help="exam mode: each row's message is the verdict alone (no hint, no expected value), for rows you pass on",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "release":
            copies = release(args.out, args.notebooks, args.lessons)
            print(f"{len(copies)} student copies in {args.out}")
        elif args.command == "nbgrader":
            _nbgrader(args.out, args.notebooks, args.hide_checks)
        elif args.command == "collapse":
            return _collapse(args.notebooks, args.check)
        elif args.command == "nbgrader-totals":
            return _nbgrader_totals(args.gradebook, args.out)
        elif args.command == "check":
            refused = refuse_to_check(args.out, sandboxed=not args.no_sandbox)
            if refused:
                print(f"error: {refused}", file=sys.stderr)
                return 2
            return check_command(
                args.submissions,
                args.timeout,
                args.notebook_timeout,
                args.out,
                args.notebooks,
                args.output_cap,
                sandboxed=not args.no_sandbox,
                memory_mib=args.memory,
                jobs=args.jobs,
                exam=args.hide_checks,
            )
        else:
            _list(args.notebooks)
    except UnknownLesson as error:
        print(f"error: {error}", file=sys.stderr)
        print("error: nothing was written; name lessons that exist (their numbers are listed above).", file=sys.stderr)
        return 1
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        if args.command in ("release", "nbgrader"):
            print("error: nothing was written; fix the notebook and run the release again.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
