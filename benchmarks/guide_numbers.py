"""The teacher's guide's measured numbers, measured and written in one place (issue 38: never typed by hand).

    .venv/bin/python benchmarks/guide_numbers.py                       # every lesson and the site (minutes)
    .venv/bin/python benchmarks/guide_numbers.py --lessons 02 03       # some lessons (others keep their numbers)
    .venv/bin/python benchmarks/guide_numbers.py --no-lessons          # the site only
    .venv/bin/python benchmarks/guide_numbers.py --no-lessons --no-site --grading 13 16   # grading two students
    .venv/bin/python benchmarks/guide_numbers.py --write-guide-only    # measure nothing: rewrite the guide's blocks

Measures how long each lesson runs top to bottom in a fresh kernel (``notebook_times.run``: wall and kernel CPU
seconds, as CI's nbval run costs, and its slowest cell's seconds, from which its grading timeout in
course/lessons.py is set), how long ``check`` takes to grade it (``--grading``: two students, ``--jobs 1`` then
``--jobs 2``, as ``benchmarks/grading_time.py`` does) and what ``make site`` prints (lessons, head views, seconds,
megabytes), each stored with its date and the load average of the minute before (``os.getloadavg``) in
``benchmarks/guide_numbers.json``. Then the guide's blocks between ``<!-- guide-numbers:NAME -->`` and
``<!-- /guide-numbers -->`` in docs/teaching.md are rewritten from that file; ``tests/test_guide_numbers.py``
holds the guide to it. Counts that need no clock (prose words, code cells, exercises and their solution lines)
are read from the lessons each time. Measure on a quiet machine (load average well below the core count): on a
busy one every time grows, and the table says so in its last column.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from notebook_times import BUDGET_S, run  # noqa: E402

from course.assignments import find_exercises  # noqa: E402
from course.lessons import DEFAULT_BUDGET_S, grading_timeout  # noqa: E402

RESULTS = ROOT / "benchmarks" / "guide_numbers.json"
GUIDE = ROOT / "docs" / "teaching.md"
LESSON_GLOB = "[0-9][0-9]_*.ipynb"
BLOCK = re.compile(r"(<!-- guide-numbers:(\w+) -->\n)(.*?)(<!-- /guide-numbers -->)", re.DOTALL)


def _now() -> dict:
    """When, and how busy the machine was over the last minute."""
    return {"at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "load_1min": round(os.getloadavg()[0], 1)}


def measure_lesson(path: Path) -> dict:
    before = _now()
    wall, cpu, slowest = run(path)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "slowest_cell_s": round(slowest, 1), **before}


def measure_site() -> dict:
    from course import site

    before = _now()
    with tempfile.TemporaryDirectory(prefix="guide-site-") as folder:
        out = Path(folder) / "site"
        start = time.perf_counter()
        lessons = site.build(out)
        seconds = time.perf_counter() - start
        size = sum(path.stat().st_size for path in out.rglob("*") if path.is_file())
    views = sum(lesson.head_views for lesson in lessons)
    measured = {"lessons": len(lessons), "head_views": views, "seconds": round(seconds, 1), "mb": round(size / 1e6, 1)}
    return measured | before


def lesson_counts(path: Path) -> dict:
    """What a lesson holds, counted: words of prose, code cells, exercises and their solution lines."""
    nb = nbformat.read(path, as_version=4)
    words = sum(len(cell.source.split()) for cell in nb.cells if cell.cell_type == "markdown")
    code = sum(cell.cell_type == "code" for cell in nb.cells)
    exercises = find_exercises(nb, path.name)
    return {"words": words, "code_cells": code, "exercises": len(exercises), "lines": sum(e.lines for e in exercises)}


def lessons_block(results: dict) -> str:
    rows = [
        "| lesson | machine: wall (s) | machine: kernel CPU (s) | slowest cell (s) | CI budget (s) "
        "| grading timeout (s) | prose (words) | code cells | exercises (solution lines) | measured (load average) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for path in sorted((ROOT / "notebooks").glob(LESSON_GLOB)):
        timing = results.get("lessons", {}).get(path.stem)
        counts = lesson_counts(path)
        wall, cpu, slowest, when = (
            (
                f"{timing['wall_s']:.1f}",
                f"{timing['cpu_s']:.1f}",
                f"{timing['slowest_cell_s']:.1f}" if "slowest_cell_s" in timing else "not measured",
                f"{timing['at']} ({timing['load_1min']})",
            )
            if timing
            else ("not measured", "", "", "")
        )
        rows.append(
            f"| [{path.stem}](../notebooks/{path.name}) | {wall} | {cpu} | {slowest} "
            f"| {BUDGET_S.get(path.name[:2], DEFAULT_BUDGET_S)} | {grading_timeout(path.name)} "
            f"| {counts['words']:,} | {counts['code_cells']} | {counts['exercises']} ({counts['lines']}) | {when} |"
        )
    return "\n".join(rows) + "\n"


def site_block(results: dict) -> str:
    built = results.get("site")
    if not built:
        return "(not measured yet: run `benchmarks/guide_numbers.py --no-lessons`)\n"
    return (
        "```console\n$ make site\n.venv/bin/python -m course.site --out build/site\n"
        f"wrote {built['lessons']} lessons ({built['head_views']} interactive head views, solutions folded) to "
        f"build/site/index.html in {built['seconds']:.1f} s\n```\n\n"
        f"({built['seconds']:.0f} s and {built['mb']:.1f} MB, measured {built['at']} at a load average of "
        f"{built['load_1min']} on the course's 2-core machine; `benchmarks/guide_numbers.py` measures it again.)\n"
    )


GRADING_STUDENTS, CLASS_SIZE = 2, 30


def measure_grading(path: Path) -> dict:
    """``check --jobs 1``, then ``--jobs 2``, on two copies of the lesson's solution notebook (every exercise must
    pass), one thread per notebook as the guide advises; each run's wall seconds and the load average around them."""
    from grading_time import grade, make_class

    before = _now()
    loads, walls = [os.getloadavg()[0]], {}
    threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the checker passes it to each notebook's kernel
    try:
        with tempfile.TemporaryDirectory(prefix="guide-grading-") as folder:
            paths = make_class(path, GRADING_STUDENTS, Path(folder) / "submissions")
            for jobs in (1, 2):
                walls[jobs] = grade(paths, jobs, Path(folder) / f"grades-{jobs}", timeout_s=600)
                loads.append(os.getloadavg()[0])
    finally:
        if threads is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = threads
    return {
        "jobs1_s": round(walls[1], 1),
        "jobs2_s": round(walls[2], 1),
        "students": GRADING_STUDENTS,
        "load": f"{min(loads):.2f}–{max(loads):.2f}",
        "at": before["at"],
    }


def grading_block(results: dict) -> str:
    """One row a lesson: two students graded with one job, then two, and a class of 30 scaled from them (``ceil(S /
    jobs)`` notebooks in turn)."""
    rows = [
        f"| lesson | `--jobs 1`, {GRADING_STUDENTS} students | `--jobs 2`, {GRADING_STUDENTS} students | ratio "
        f"| {CLASS_SIZE} students, scaled: `--jobs 1` / `--jobs 2` | measured (load average) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for path in sorted((ROOT / "notebooks").glob(LESSON_GLOB)):
        row = results.get("grading", {}).get(path.stem)
        if row is None:
            command = f"benchmarks/guide_numbers.py --no-lessons --no-site --grading {path.name[:2]}"
            rows.append(f"| {path.name[:2]} | not measured: `{command}` | | | | |")
            continue
        one, two, students = row["jobs1_s"], row["jobs2_s"], row["students"]
        class_one = one * math.ceil(CLASS_SIZE / 1) / math.ceil(students / 1) / 60
        class_two = two * math.ceil(CLASS_SIZE / 2) / math.ceil(students / 2) / 60
        rows.append(
            f"| {path.name[:2]} | {one:.1f} s ({one / students:.1f} s a notebook) | {two:.1f} s | {one / two:.2f}× "
            f"| {class_one:.0f} min / {class_two:.0f} min | {row['at']} ({row['load']}) |"
        )
    return "\n".join(rows) + "\n"


BLOCKS = {"lessons": lessons_block, "site": site_block, "grading": grading_block}


def render(guide: str, results: dict) -> str:
    """The guide with every guide-numbers block rewritten from ``results``; an unknown block name is refused."""

    def block(match: re.Match) -> str:
        name = match.group(2)
        if name not in BLOCKS:
            raise SystemExit(f"docs/teaching.md has a guide-numbers block {name!r}; known: {', '.join(BLOCKS)}")
        return match.group(1) + BLOCKS[name](results) + match.group(4)

    return BLOCK.sub(block, guide)


def paths_numbered(numbers: list[str]) -> list[Path]:
    """The lessons of these numbers ("13", "16"); an unknown number is refused."""
    paths = {path.name[:2]: path for path in (ROOT / "notebooks").glob(LESSON_GLOB)}
    unknown = [number for number in numbers if number.zfill(2) not in paths]
    if unknown:
        raise SystemExit(f"no lesson numbered {', '.join(unknown)}; the lessons: {', '.join(sorted(paths))}")
    return [paths[number.zfill(2)] for number in numbers]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", nargs="*", metavar="NN", help="lesson numbers to time (default: all)")
    parser.add_argument("--no-lessons", action="store_true", help="time no lesson")
    parser.add_argument("--no-site", action="store_true", help="do not build the site")
    parser.add_argument("--grading", nargs="+", default=[], metavar="NN", help="lessons whose grading to time")
    parser.add_argument("--write-guide-only", action="store_true", help="measure nothing; rewrite the guide")
    args = parser.parse_args(argv)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if not args.write_guide_only:
        paths = sorted((ROOT / "notebooks").glob(LESSON_GLOB))
        if args.lessons:
            paths = [path for path in paths if path.name[:2] in args.lessons]
        for path in [] if args.no_lessons else paths:
            results.setdefault("lessons", {})[path.stem] = measured = measure_lesson(path)
            print(f"{path.stem}: {measured}", flush=True)
            RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")  # kept if a later one fails
        for path in paths_numbered(args.grading):
            results.setdefault("grading", {})[path.stem] = measured = measure_grading(path)
            print(f"{path.stem} graded: {measured}", flush=True)
            RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        if not args.no_site:
            results["site"] = measure_site()
            print(f"site: {results['site']}", flush=True)
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    GUIDE.write_text(render(GUIDE.read_text(encoding="utf-8"), results), encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)} and the guide's numbers in {GUIDE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
