"""Lesson 16 on a machine without Triton (macOS, Windows): its first code cell stops with a message that points to
WSL 2 or a Linux machine, never with an ImportError from deep inside an import. Triton's absence is simulated in a
fresh interpreter (``sys.modules["triton"] = None`` makes ``find_spec`` and ``import triton`` both fail, as an
uninstalled package does)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

LESSON = Path(__file__).resolve().parents[1] / "notebooks" / "16_attention_as_a_kernel.ipynb"
WITHOUT_TRITON = "import sys\nsys.modules['triton'] = None  # as if the wheel were not installed\n"

pytestmark = pytest.mark.integration  # each case starts an interpreter of its own


def first_code_cell() -> str:
    cells = json.loads(LESSON.read_text(encoding="utf-8"))["cells"]
    return next("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")


def run(source: str, ipython: bool = False) -> subprocess.CompletedProcess:
    """``source`` run by Python, or by IPython (as a notebook's kernel runs a cell: its error shown as Jupyter does)."""
    command = [sys.executable, "-m", "IPython", "--quick", "--no-banner"] if ipython else [sys.executable]
    return subprocess.run([*command, "-c", source], capture_output=True, text=True, timeout=120)


def test_the_first_cell_stops_with_directions_when_triton_is_missing():
    """Run All stops at the first cell, which shows the directions alone: no traceback, no "%tb" line, no "To exit"
    warning (a SystemExit would add both)."""
    result = run(WITHOUT_TRITON + first_code_cell(), ipython=True)
    shown = result.stdout + result.stderr
    assert result.returncode == 1, result
    assert "WSL 2" in shown and "Linux" in shown, shown
    assert "Traceback" not in shown and "%tb" not in shown and "exit" not in shown, shown
    assert "ImportError" not in shown and "ModuleNotFoundError" not in shown, shown


def test_without_the_simulation_the_first_cell_passes_where_triton_is_installed():
    """The other side of the test above: the same cell, run as it is, stops only where Triton is missing."""
    pytest.importorskip("triton", reason="Triton is installed on Linux only")
    result = run(first_code_cell() + "\nimport triton\nprint('triton', triton.__version__)")
    assert result.returncode == 0 and result.stdout.startswith("triton "), result
