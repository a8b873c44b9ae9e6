"""helpers.tools.threads in real processes: the load it sees, OpenMP's wait as torch's library reads it, and a
kernel whose thread count follows the load cell by cell."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import nbformat
import pytest
from nbclient import NotebookClient

from helpers.tools import threads

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc and GNU OpenMP")


@linux_only
def test_a_busy_process_beside_this_one_is_seen_at_once():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # started: from now on it is always running or runnable
        busy = threads.busy_cores()
    finally:
        spinner.kill()
        spinner.wait()
    assert busy >= 0.9, busy  # a one-minute load average would still read the machine as it was before


def _openmp_spin_count(code: str, **env: str) -> str:
    """GNU OpenMP's spin count as it read it when torch's library loaded (OMP_DISPLAY_ENV=VERBOSE prints it)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    environment.update(OMP_DISPLAY_ENV="VERBOSE", **env)
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120, check=True
    )
    lines = [line for line in result.stderr.splitlines() if "GOMP_SPINCOUNT" in line]
    assert lines, result.stderr[-2000:]
    return lines[0].split("=")[1].strip().strip("'")


@linux_only
def test_importing_helpers_leaves_how_openmp_waits_alone():
    """A forced OMP_WAIT_POLICY=PASSIVE made idle 2-thread runs 1.3-3x slower (RESULTS.md, "Threads on a shared
    machine"): importing helpers first or last, OpenMP keeps its default spin, and a user's choice stands."""
    assert _openmp_spin_count("import helpers, torch") == "300000"
    assert _openmp_spin_count("import torch, helpers") == "300000"
    assert _openmp_spin_count("import helpers, torch", OMP_WAIT_POLICY="PASSIVE") == "0"


def test_a_lessons_kernel_follows_the_load_until_a_cell_sets_the_threads():
    cells = [
        # torch first, as the lessons do; then the follower, registered by the call a lesson's first cell makes.
        # Its choices are faked and not rate-limited, so that the test sees each one.
        "import torch\nimport helpers.tools.threads as t\nt.RECHOOSE_AFTER_S = 0\nt.pick_threads = lambda: 1\n"
        "_ = t.follow_load_in_notebook()",
        "print(torch.get_num_threads())",
        "t.pick_threads = lambda: 2",
        "print(torch.get_num_threads())",
        "torch.set_num_threads(1)",
        "t.pick_threads = lambda: 2",
        "print(torch.get_num_threads())",
    ]
    assert _printed(cells) == ["1", "2", "1"]
    # A cell that calls the follower and sets one thread, before the follower sees any cell: the one thread stands.
    cells = [
        "import torch\nimport helpers\n_ = helpers.follow_load_in_notebook()\ntorch.set_num_threads(1)",
        "import helpers.tools.threads as t\nt.RECHOOSE_AFTER_S = 0\nt.pick_threads = lambda: 2",
        "print(torch.get_num_threads())",
    ]
    assert _printed(cells) == ["1"]


def test_importing_helpers_in_a_kernel_registers_no_hook_until_a_lesson_asks():
    cells = [
        "import helpers, helpers.tools.threads, helpers.viewing.plotting\nshell = get_ipython()\n"
        "print(sum(len(shell.events.callbacks[name]) for name in ('pre_run_cell', 'post_run_cell')))",
        "_ = helpers.follow_load_in_notebook()\n"
        "print(sum(len(shell.events.callbacks[name]) for name in ('pre_run_cell', 'post_run_cell')))",
    ]
    before, after = map(int, _printed(cells))
    assert after == before + 2  # pre_run_cell and post_run_cell, and only when called


def _printed(cells: list[str]) -> list[str]:
    """What the cells printed, run in a fresh kernel (one notebook)."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=120, kernel_name="python3", shutdown_kernel="immediate").execute()
    return [c.outputs[0]["text"].strip() for c in notebook.cells if c.outputs]


def test_the_command_lines_training_follows_the_load_while_it_runs():
    """follow_load_during_run re-chooses the threads from a module pre-hook while a computation runs (in a process
    of its own: the hook is global). The choices are faked and not rate-limited, so that each forward call sees one."""
    code = "\n".join([
        "import torch, helpers.tools.threads as t",
        "t.RECHOOSE_AFTER_S = 0",
        "t.pick_threads = lambda: 1",
        "follower = t.follow_load_during_run()",
        "layer = torch.nn.Linear(4, 4)",
        "layer(torch.zeros(1, 4)); print(torch.get_num_threads())",
        "t.pick_threads = lambda: 2",
        "layer(torch.zeros(1, 4)); print(torch.get_num_threads())",
        "torch.set_num_threads(1)",  # someone else chose: that choice stands
        "layer(torch.zeros(1, 4)); print(torch.get_num_threads(), follower.active)",
    ])  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:3] == ["1", "2", "1 False"], result.stdout
