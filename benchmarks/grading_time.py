"""How long ``check`` takes to grade a class: N copies of one submission, graded with --jobs 1 and --jobs 2.

    .venv/bin/python benchmarks/grading_time.py --lesson 02 --students 30          # what docs/teaching.md quotes
    .venv/bin/python benchmarks/grading_time.py --lesson 09 --students 4 --jobs 1 2 --repeats 1

Each student's notebook is a copy of the lesson's own solution notebook (a right answer that runs every cell, as
a finished submission does), in ``submissions/studentNN/``. Each ``--jobs`` value runs ``python -m
course.assignments check`` once per repeat, in turns (1, 2, 1, 2, ...), so a change in the machine's load hits
both alike; every run must grade every exercise ``pass``. The load average (``os.getloadavg``, 1 minute) is
printed before and after each run: on a shared machine the ratio between the two columns is the measurement,
more than either time.

Grading is ``jobs`` notebooks at a time, so the time for S students is about ``ceil(S / jobs)`` times one
notebook's: the last column scales the measured time to 30 students that way.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASS_SIZE = 30


def lesson_file(number: str) -> Path:
    matches = sorted((ROOT / "notebooks").glob(f"{number.zfill(2)}_*.ipynb"))
    if len(matches) != 1:
        raise SystemExit(f"expected one lesson numbered {number} in notebooks/, found {len(matches)}")
    return matches[0]


def make_class(lesson: Path, students: int, folder: Path) -> list[Path]:
    paths = []
    for number in range(1, students + 1):
        target = folder / f"student{number:02d}" / lesson.name
        target.parent.mkdir(parents=True)
        shutil.copyfile(lesson, target)
        paths.append(target)
    return paths


def grade(paths: list[Path], jobs: int, out: Path, timeout_s: int) -> float:
    """Wall seconds of one ``check`` run; refuses a run where any exercise is not ``pass``."""
    command = [sys.executable, "-m", "course.assignments", "check", "--jobs", str(jobs), "--out", str(out)]
    command += ["--timeout", str(timeout_s), *map(str, paths)]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    rows = list(csv.reader(result.stdout.splitlines(), delimiter="\t"))[1:]
    graded = [row for row in rows if len(row) != 6 or row[2] != "(notebook)"]
    if result.returncode != 0 or not graded or any(row[3:4] != ["pass"] for row in graded):
        raise SystemExit(f"check --jobs {jobs} did not pass every exercise:\n{result.stdout}\n{result.stderr[-3000:]}")
    return wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lesson", default="02", help="lesson number (default: %(default)s)")
    parser.add_argument("--students", type=int, default=4, help="copies of the submission (default: %(default)s)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="--jobs values (default: 1 2)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each --jobs value (default: %(default)s)")
    parser.add_argument("--timeout", type=int, default=600, help="check's --timeout (default: %(default)s)")
    args = parser.parse_args(argv)
    lesson = lesson_file(args.lesson)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"# {lesson.name}: {args.students} students, {cores} usable cores, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')} for --jobs 1"
    )
    walls: dict[int, list[float]] = {jobs: [] for jobs in args.jobs}
    with tempfile.TemporaryDirectory(prefix="grading-time-") as scratch:
        paths = make_class(lesson, args.students, Path(scratch) / "submissions")
        print("| run | --jobs | wall (s) | s per notebook | load before | load after |")
        print("|---:|---:|---:|---:|---:|---:|")
        for repeat in range(args.repeats):
            for jobs in args.jobs:
                before = os.getloadavg()[0]
                wall = grade(paths, jobs, Path(scratch) / f"grades-{jobs}-{repeat}", args.timeout)
                after = os.getloadavg()[0]
                walls[jobs].append(wall)
                row = (
                    f"| {repeat + 1} | {jobs} | {wall:.1f} | {wall / args.students:.1f} | {before:.2f} | {after:.2f} |"
                )
                print(row, flush=True)
    print()
    print(f"| --jobs | best wall (s) | speed against --jobs {args.jobs[0]} | {CLASS_SIZE} students, scaled (min) |")
    print("|---:|---:|---:|---:|")
    reference = min(walls[args.jobs[0]])
    for jobs, times in walls.items():
        best = min(times)
        scaled = best * math.ceil(CLASS_SIZE / jobs) / math.ceil(args.students / jobs)
        print(f"| {jobs} | {best:.1f} | {reference / best:.2f}x | {scaled / 60:.1f} |")


if __name__ == "__main__":
    main()
