"""Time each lesson executed top to bottom in a fresh kernel, as CI's nbval run does.

    .venv/bin/python benchmarks/notebook_times.py [notebooks/03_*.ipynb ...]

Prints a Markdown table (wall seconds, and the kernel's CPU seconds for comparison on a busy
machine) against each lesson's budget. Nothing is written back to the notebooks.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
# 06 trains a translator, 07 a small GPT, 08 ablates a real model; the others: 60 s
BUDGET_S = {"06": 150, "07": 90, "08": 90, "09": 120, "10": 150, "11": 150, "12": 150}  # 09-12: issues 22, 23, 33, 34
CPU_PROBE = "import os; t = os.times(); print(t.user + t.system + t.children_user + t.children_system)"


def run(path: Path) -> tuple[float, float]:
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(CPU_PROBE))
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - start
    cpu = float(notebook.cells[-1].outputs[0]["text"])
    return wall, cpu


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    print("| lesson | wall (s) | kernel CPU (s) | budget (s) |")
    print("|---|---:|---:|---:|")
    for path in paths:
        wall, cpu = run(path)
        budget = BUDGET_S.get(path.name[:2], 60)
        flag = "" if wall <= budget else " **over**"
        print(f"| {path.name} | {wall:.1f}{flag} | {cpu:.1f} | {budget} |", flush=True)


if __name__ == "__main__":
    main()
