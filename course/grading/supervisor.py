"""One handed-in notebook, run by a process of its own: ``python -m course.grading.supervisor`` (the checker starts it).

The checker (:mod:`course.grading.checker`) starts this process in a session of its own and writes the job to
its standard input as one JSON object: the notebook to run, the cells whose verdicts count, time limits, an
output cap, and a key. This process then

- becomes a child subreaper (Linux), so that a process the notebook leaves behind, even one that detached
  itself, is re-parented here and can be found and killed;
- starts the kernel with its standard output and error going nowhere (what a cell writes to file
  descriptor 1 or 2, and a killed kernel's ZeroMQ traceback, never reach the teacher), and runs the notebook;
- keeps at most ``output_cap`` bytes of cell outputs (the rest is dropped and counted);
- reads each verdict from the display output (``VERDICT_MIME``) of the cells the checker wrote, the last
  one of each such cell (the check displays it after the learner's code has run);
- kills every process still alive below it;
- writes one line to standard output: the result, signed with the key (HMAC-SHA256). A notebook that writes
  into this process's output pipe (through ``/proc``) cannot sign what it writes, so the checker ignores it.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def sign(key: str, payload: str) -> str:
    """The HMAC-SHA256 of ``payload`` (hex) under ``key``."""
    return hmac.new(key.encode(), payload.encode(), hashlib.sha256).hexdigest()


def become_subreaper() -> bool:
    """Ask Linux to re-parent orphaned descendants to this process; False where that is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (read from /proc; empty where /proc is missing)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants(root: int) -> int:
    """SIGKILL every process below ``root`` until none is left (a few rounds: some may fork meanwhile)."""
    killed = 0
    for _ in range(20):
        alive = descendants(root)
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:  # reap what re-parented to us, so that /proc forgets it
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    time.sleep(0.02)
            except ChildProcessError:
                break
    return killed


def _client_class():
    from nbclient import NotebookClient

    from course.grading import VERDICT_MIME

    class CappedClient(NotebookClient):
        """A NotebookClient that keeps at most ``output_cap`` bytes of outputs and drops the rest."""

        output_cap = 10_000_000
        kept_bytes = 0
        dropped_bytes = 0

        def output(self, outs, msg, display_id, cell_index):
            if VERDICT_MIME in msg.get("content", {}).get("data", {}):  # a verdict is always kept
                return super().output(outs, msg, display_id, cell_index)
            size = len(json.dumps(msg.get("content", {}), default=str))
            if self.kept_bytes + size > self.output_cap:
                self.dropped_bytes += size
                return None
            self.kept_bytes += size
            return super().output(outs, msg, display_id, cell_index)

    return CappedClient


def run(job: dict) -> dict:
    """Run the job's notebook; the verdicts of its graded cells and what stopped it (None: ran to the end)."""
    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from course.grading import VERDICT_MIME

    notebook = nbformat.from_dict(job["notebook"])
    timeout_s, notebook_timeout_s = job["timeout_s"], job.get("notebook_timeout_s")
    started = time.monotonic()
    current = {"index": 0, "limit": timeout_s}

    def cell_started(cell, cell_index, **_) -> None:
        current["index"] = cell_index

    def cell_timeout(cell) -> int:
        limit = timeout_s
        if notebook_timeout_s is not None:
            limit = max(1, min(timeout_s, math.ceil(notebook_timeout_s - (time.monotonic() - started))))
        current["limit"] = limit
        return limit

    client = _client_class()(
        notebook,
        timeout_func=cell_timeout,
        kernel_name="python3",
        allow_errors=True,
        interrupt_on_timeout=False,
        shutdown_kernel="immediate",  # no graceful goodbye (about 1 s a notebook): everything below is killed anyway
        on_cell_start=cell_started,
        resources={"metadata": {"path": job["work"]}},
    )
    client.output_cap = job["output_cap"]
    cell_numbers = job["cell_numbers"]  # a cell of this notebook -> its number in the handed-in notebook

    def where() -> str:
        number = cell_numbers[current["index"]] if current["index"] < len(cell_numbers) else None
        return f"cell {number}" if number else "a graded check cell"

    problem = None
    try:
        client.execute(env=job["env"], cwd=job["work"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except CellTimeoutError:
        problem = f"timed out in {where()} after {current['limit']} s"
        if current["limit"] < timeout_s:
            problem += f" (the whole notebook may take {notebook_timeout_s} s)"
    except DeadKernelError:
        problem = f"kernel died in {where()}"
    except Exception as error:  # a kernel that cannot start, a broken message: this notebook only
        problem = f"could not be run ({where()}): {type(error).__name__}: {str(error)[:300]}"
    verdicts = {}
    for index in job["graded_cells"]:
        found = [
            output["data"][VERDICT_MIME]
            for output in notebook.cells[index].get("outputs", [])
            if output.get("output_type") == "display_data" and VERDICT_MIME in output.get("data", {})
        ]
        if found and isinstance(found[-1], dict):
            verdicts[str(index)] = {key: str(found[-1].get(key, "")) for key in ("function", "status", "message")}
    return {
        "verdicts": verdicts,
        "problem": problem,
        "dropped_output_bytes": client.dropped_bytes,
    }


def main() -> int:
    job = json.loads(sys.stdin.read())
    become_subreaper()
    try:
        result = run(job)
    except Exception as error:  # never die silently: the checker turns this into an error row
        result = {"verdicts": {}, "problem": f"the checker could not run it: {type(error).__name__}: {error}"}
    result["killed_survivors"] = kill_descendants(os.getpid())
    payload = json.dumps(result, sort_keys=True)
    # A newline first: whatever a notebook wrote into this pipe, the signed line starts on a line of its own.
    os.write(1, ("\n" + json.dumps({"payload": payload, "mac": sign(job["key"], payload)}) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
