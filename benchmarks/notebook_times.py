"""Time each lesson executed top to bottom in a fresh kernel, as CI's nbval run does.

    .venv/bin/python benchmarks/notebook_times.py [notebooks/03_*.ipynb ...]

Prints a Markdown table (wall seconds, the kernel's CPU seconds for comparison on a busy machine, and the
slowest cell's seconds, which a grading timeout must leave room for) against each lesson's budget. Nothing is
written back to the notebooks.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course.lessons import DEFAULT_BUDGET_S, LESSONS  # noqa: E402

# Each lesson's budget is in its registry entry (course/lessons.py): 06 trains a translator, 07 a small GPT, 08
# ablates a real model, 09-12 load one (issues 22, 23, 33, 34); the others have the default, 60 s.
BUDGET_S = {lesson.number: lesson.budget_s for lesson in LESSONS}
CPU_PROBE = "import os; t = os.times(); print(t.user + t.system + t.children_user + t.children_system)"


def cell_seconds(cell) -> float:
    """How long one executed cell ran in its kernel: from the kernel turning busy to its reply, the timestamps
    nbclient records in the cell's metadata (``record_timing``); 0 for a cell that did not run."""
    execution = cell.get("metadata", {}).get("execution", {})
    if "iopub.status.busy" not in execution or "shell.execute_reply" not in execution:
        return 0.0
    started, replied = (datetime.fromisoformat(execution[key]) for key in ("iopub.status.busy", "shell.execute_reply"))
    return (replied - started).total_seconds()


def run(path: Path) -> tuple[float, float, float]:
    """Wall seconds, kernel CPU seconds and the slowest cell's seconds of ``path`` run top to bottom."""
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(CPU_PROBE))
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        record_timing=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - start
    cpu = float(notebook.cells[-1].outputs[0]["text"])
    slowest = max(cell_seconds(cell) for cell in notebook.cells[:-1] if cell.cell_type == "code")
    return wall, cpu, slowest


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    print("| lesson | wall (s) | kernel CPU (s) | slowest cell (s) | budget (s) |")
    print("|---|---:|---:|---:|---:|")
    for path in paths:
        wall, cpu, slowest = run(path)
        budget = BUDGET_S.get(path.name[:2], DEFAULT_BUDGET_S)
        flag = "" if wall <= budget else " **over**"
        print(f"| {path.name} | {wall:.1f}{flag} | {cpu:.1f} | {slowest:.1f} | {budget} |", flush=True)


if __name__ == "__main__":
    main()
