"""A learner's own copies of the lessons: exercises to fill in, kept out of the course's files.

The lessons in ``notebooks/`` are the solution notebooks (their checks pass at once). A learner working alone
works in their own copies instead: the student copies that ``course.assignments release`` writes (each exercise
a ``raise NotImplementedError()`` to replace, whose check says NOT YET until it passes), in a folder that git
ignores (``my-lessons/`` by default). ``make lab`` makes the copies and opens JupyterLab there::

    python -m course.learner copy                      # a copy of each lesson not copied yet (make lab runs it)
                                                       # and, on stdout, the folder JupyterLab is to open
    python -m course.learner solution 02               # print lesson 02's reference solutions (make solution LESSON=02)
    python -m course.learner solution 02 --exercise linear_projection
    python -m course.learner restart 02                # lesson 02 from scratch (make restart LESSON=02)
    python -m course.learner restart 02 --exercise linear_projection   # just that exercise's cell

A class's hand-out (docs/teaching.md, section 3) has student copies in ``notebooks/``, no solution in any: those
are the student's own copies already, so ``copy`` makes none and names ``notebooks/`` as the folder to open.

A copy, once made, is never written over by ``copy``: the learner's work survives ``git pull`` (the folder is not
tracked) and every later ``make lab``, while a lesson added by a pull gets its copy on the next one. ``restart``
keeps what it replaces under ``my-lessons/.previous/`` (a hidden folder), with the time in its name.

The reference solution is one deliberate step away, a command in a terminal, and never in the learner's
notebook: a solution that sits folded one click under the exercise is read before it is tried, which is what
the copies are for. (The offline site, ``make site``, also shows it behind a button.)
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from course.assignments import _refuse_output_inside_lessons, _serialize, select_lessons
from course.solution_notebooks import (
    BEGIN_MARKER,
    END_MARKER,
    NOTEBOOKS_DIR,
    Exercise,
    ReleaseError,
    find_exercises,
    read_notebook,
    student_copy,
)
from helpers.tools.files import write_atomically

LEARNER_DIR = NOTEBOOKS_DIR.parent / "my-lessons"
PREVIOUS = ".previous"  # inside the learner's folder: what restart replaced (JupyterLab hides dot-folders)


def _lessons(notebooks_dir: Path) -> list[Path]:
    lessons = sorted(notebooks_dir.glob("*.ipynb"))
    if not lessons:
        raise ReleaseError(str(notebooks_dir), None, "expected lesson notebooks (*.ipynb) in this folder, found none")
    return lessons


def _fresh_copy(source: Path) -> NotebookNode:
    return student_copy(read_notebook(source), str(source))


def make_copies(into: Path = LEARNER_DIR, notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """Write a learner's copy of every lesson that has none in ``into`` yet; returns the copies made.

    A file already there is never read or written: it holds the learner's work. Every copy is converted before
    the first is written, so a lesson that cannot be copied leaves ``into`` as it was.
    """
    into, notebooks_dir = Path(into), Path(notebooks_dir)
    if into.exists() and not into.is_dir():
        raise ReleaseError(str(into), None, "expected a folder for your copies, but a file of that name exists")
    _refuse_output_inside_lessons(into, notebooks_dir, "your copies")
    missing = [source for source in _lessons(notebooks_dir) if not (into / source.name).exists()]
    contents = {source.name: _serialize(_fresh_copy(source), str(source)) for source in missing}
    into.mkdir(parents=True, exist_ok=True)
    made = []
    for name, data in contents.items():
        write_atomically(into / name, data)
        made.append(into / name)
    return made


def holds_solutions(notebooks_dir: Path = NOTEBOOKS_DIR) -> bool:
    """Whether ``notebooks_dir`` holds the solution notebooks (a lesson with a solution region), not a hand-out's
    student copies (none)."""
    return any(
        line.strip() == BEGIN_MARKER
        for source in _lessons(Path(notebooks_dir))
        for cell in read_notebook(source).cells
        if cell.cell_type == "code"
        for line in cell.source.split("\n")
    )


def _exercise(source: Path, exercise: str) -> Exercise:
    found = find_exercises(read_notebook(source), str(source))
    for candidate in found:
        if candidate.function == exercise:
            return candidate
    names = ", ".join(e.function for e in found if e.function) or "none"
    raise ReleaseError(str(source), None, f"there is no exercise {exercise!r} in this lesson; its exercises: {names}")


def solution_text(source: Path, exercise: str | None = None) -> str:
    """The reference solution of each exercise of the lesson ``source`` (or of ``exercise`` alone), as text."""
    notebook = read_notebook(source)
    chosen = [_exercise(source, exercise)] if exercise else find_exercises(notebook, str(source))
    if not chosen:
        return f"{source.name} has no exercises.\n"
    parts = []
    for found in chosen:
        lines = notebook.cells[found.cell_index].source.split("\n")
        code = "\n".join(line for line in lines if line.strip() not in (BEGIN_MARKER, END_MARKER))
        name = f"`{found.function}`" if found.function else "(top level)"
        parts.append(f"# {source.name}, exercise {name}: the reference solution\n{code.rstrip()}\n")
    return "\n".join(parts)


def _exercise_cell(copy: NotebookNode, like: NotebookNode, function: str, name: str) -> int:
    """The index of the cell of ``copy`` that holds ``function``'s exercise: the one with ``like``'s id (JupyterLab
    keeps a cell's id through edits), else the first code cell that defines the function."""
    for index, cell in enumerate(copy.cells):
        if like.get("id") is not None and cell.get("id") == like.get("id"):
            return index
    defines = re.compile(rf"^(?:async\s+)?def\s+{re.escape(function)}\s*\(", re.MULTILINE)
    for index, cell in enumerate(copy.cells):
        if cell.cell_type == "code" and defines.search(cell.source):
            return index
    raise ReleaseError(name, None, f"no cell defines {function}(): restart the whole lesson")


def _keep_previous(copy_path: Path) -> Path:
    """Copy ``copy_path`` into the learner's ``.previous/`` folder, stamped with the time; returns the copy."""
    kept = copy_path.parent / PREVIOUS / f"{copy_path.stem}.{time.strftime('%Y-%m-%dT%H-%M-%S')}{copy_path.suffix}"
    kept.parent.mkdir(exist_ok=True)
    write_atomically(kept, copy_path.read_bytes())
    return kept


def restart(
    lesson: str, exercise: str | None = None, into: Path = LEARNER_DIR, notebooks_dir: Path = NOTEBOOKS_DIR
) -> tuple[Path, Path | None]:
    """Start lesson ``lesson`` (or its ``exercise`` alone) again in ``into``; returns the copy and the kept old one.

    The whole lesson: a fresh copy replaces the learner's. One exercise: only the cell that holds it is replaced,
    by the fresh copy's, and its outputs cleared; every other cell stays as the learner left it.
    """
    into = Path(into)
    (source,) = select_lessons(_lessons(Path(notebooks_dir)), [lesson])
    fresh = _fresh_copy(source)
    target = into / source.name
    if not target.exists():
        make_copies(into, notebooks_dir)
        return target, None
    kept = _keep_previous(target)
    if exercise is None:
        write_atomically(target, _serialize(fresh, str(source)))
        return target, kept
    found = _exercise(source, exercise)
    solution_cell = read_notebook(source).cells[found.cell_index]
    fresh_cell = fresh.cells[_exercise_cell(fresh, solution_cell, exercise, str(source))]
    try:
        mine = nbformat.read(target, as_version=4)
    except ValueError as error:  # nbformat's NotJSONError and a notebook it cannot read
        raise ReleaseError(str(target), None, f"cannot be read ({error}): restart the whole lesson") from None
    index = _exercise_cell(mine, fresh_cell, exercise, str(target))
    mine.cells[index].source = fresh_cell.source
    mine.cells[index].outputs = []
    mine.cells[index].execution_count = None
    write_atomically(target, nbformat.writes(mine) + "\n")
    return target, kept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.learner", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    copy_parser = commands.add_parser("copy", help="make your copy of every lesson not copied yet (never overwrites)")
    solution_parser = commands.add_parser("solution", help="print a lesson's reference solutions")
    restart_parser = commands.add_parser("restart", help="start a lesson, or one exercise, again")
    for sub in (solution_parser, restart_parser):
        sub.add_argument("lesson", help="the lesson's number (02) or file name")
        sub.add_argument("--exercise", help="one exercise, by its function's name (default: all of the lesson's)")
    for sub in (copy_parser, restart_parser):
        sub.add_argument("--into", type=Path, default=LEARNER_DIR, help="your folder (default: %(default)s)")
    for sub in (copy_parser, solution_parser, restart_parser):
        sub.add_argument("--notebooks", type=Path, default=NOTEBOOKS_DIR, help="the lessons (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        if args.command == "copy":  # what it says goes to stderr: stdout is the folder, for make lab
            if not holds_solutions(args.notebooks):
                print(f"{args.notebooks}/ holds student copies (a hand-out): write in them there", file=sys.stderr)
                print(args.notebooks)
                return 0
            made = make_copies(args.into, args.notebooks)
            for path in made:
                print(f"made  {path}  (your copy: write your answers here)", file=sys.stderr)
            untouched = len(list(args.into.glob("*.ipynb"))) - len(made)
            left = f" ({untouched} copies with your work left as they were)" if untouched else ""
            print(f"your lessons are in {args.into}/{left}", file=sys.stderr)
            print(args.into)
        elif args.command == "solution":
            (source,) = select_lessons(_lessons(args.notebooks), [args.lesson])
            print(solution_text(source, args.exercise), end="")
        else:
            target, kept = restart(args.lesson, args.exercise, args.into, args.notebooks)
            what = f"exercise {args.exercise} of {target}" if args.exercise else str(target)
            print(f"started again: {what}" + (f"; your previous copy is kept as {kept}" if kept else ""))
            print("if it is open in JupyterLab, close it without saving and open it again")
    except ReleaseError as error:  # UnknownLesson included
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
