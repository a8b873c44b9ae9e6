"""One handed-in notebook, run by a process of its own: ``python -m course.grading.supervisor`` (the checker starts it).

The checker (:mod:`course.grading.checker`) starts this process in a session of its own and writes the job to
its standard input as one JSON object: the notebook to run, the cells whose verdicts count, time limits, an
output cap, a key, and (unless the teacher passed ``--no-sandbox``) the sandbox's command prefix. This process
stays outside the sandbox (:mod:`course.grading.sandbox`): only the kernel runs inside, so the notebook cannot
see this process, read its memory (where the key is) or write to its pipes. This process

- makes itself not dumpable (without a sandbox, an ordinary user's notebook cannot read its memory either);
- becomes a child subreaper (Linux), so that a process the notebook leaves behind, even one that detached
  itself, is re-parented here and can be found and killed;
- starts the kernel (in the sandbox, talking to it over Unix sockets) with its standard output and error
  going nowhere (what a cell writes to file descriptor 1 or 2, and a killed kernel's ZeroMQ traceback, never
  reach the teacher), and runs the notebook;
- interrupts a cell that runs over its time limit and goes on with the next, as nbgrader does (a cell that
  ignores the interrupt, or the whole notebook's time running out, ends the notebook);
- keeps at most ``output_cap`` bytes of cell outputs (the rest is dropped and counted);
- computes each verdict itself: in each cell the checker wrote, the kernel only answers the course's check,
  which runs here (:mod:`course.grading.remote`, driven by :mod:`course.grading.remote_cells`, which nbgrader's
  route shares), calling the learner's function in the kernel over the cell's Jupyter ``input`` messages and
  receiving its results as data; nothing the kernel displays is read as a verdict;
- kills every process still alive below it, also when it is stopped (SIGTERM, SIGHUP) or its checker dies;
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
from typing import ClassVar

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
CHECKER_PID_ENV = "ATTENTION_COURSE_CHECKER_PID"  # the checker that started this process (set by the checker)


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


def become_undumpable() -> bool:
    """Forbid core dumps and ptrace of this process, and make its /proc/<pid>/mem root's only: without a
    sandbox (``--no-sandbox``) a notebook running as the same ordinary user cannot read the key from here."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def stop_with_the_checker() -> None:
    """Stop this notebook, its processes killed, when the checker goes: SIGTERM or SIGHUP sent here, or the
    checker dead (even by SIGKILL, which it cannot clean up after: Linux sends this process SIGTERM then)."""

    def stop(signum: int, frame: object) -> None:
        kill_descendants(os.getpid())  # the kernel's sandbox and anything that escaped below it
        os._exit(128 + signum)

    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, stop)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    checker = os.environ.get(CHECKER_PID_ENV)
    if checker and os.getppid() != int(checker):  # it died before the request above took effect
        stop(signal.SIGTERM, None)


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


def _sandboxed_kernel_manager(sandbox: dict):
    """A kernel manager whose kernel runs inside the sandbox: the job's ``prefix`` (see
    :func:`course.grading.sandbox.kernel_prefix`) before the kernel's command, Unix sockets in ``sockets``
    (the sandbox has no network, so no TCP), interrupts sent as messages (the kernel, in a session of its
    own inside the sandbox, interrupts itself)."""
    from jupyter_client.manager import AsyncKernelManager

    sockets = Path(sandbox["sockets"])

    class SandboxedKernelManager(AsyncKernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            # The connection file (written just before this) is read by the sandbox's user.
            os.chown(self.connection_file, sandbox["uid"], sandbox["uid"])
            kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]
            return [*sandbox["prefix"], *kernel, *(extra_arguments or [])]

    manager = SandboxedKernelManager(
        kernel_name="python3", transport="ipc", ip=str(sockets / "kernel"), connection_file=str(sockets / "kernel.json")
    )
    spec = manager.kernel_spec
    assert spec is not None, "the python3 kernel spec is ipykernel's own, always installed beside it"
    spec.interrupt_mode = "message"
    return manager


def _client_class():
    from nbclient.exceptions import CellTimeoutError

    from course.grading import VERDICT_MIME
    from course.grading.remote_cells import RemoteChecks

    class CappedClient(RemoteChecks):
        """A notebook client that grades the checker's cells here (:class:`~course.grading.remote_cells.
        RemoteChecks`), keeps at most ``output_cap`` bytes of outputs and drops the rest."""

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

        # A cell over its time limit is interrupted and the notebook goes on, as nbgrader does. A cell that
        # ignores the interrupt, or the whole notebook's time running out, ends the notebook.
        timed_out: ClassVar[dict[int, int]] = {}  # cell index -> the limit it ran over (set per client)
        current_index = 0
        notebook_time_left = True

        async def _async_handle_timeout(self, timeout, cell=None):
            if self.current_index in self.timed_out or not self.notebook_time_left:
                raise CellTimeoutError.error_from_timeout_and_cell("Cell execution timed out", timeout, cell)
            self.timed_out[self.current_index] = timeout
            return await super()._async_handle_timeout(timeout, cell)

        async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
            # The cells the checker wrote (remote_checks, one check each) run learner_side.answer_the_checker in
            # the kernel while RemoteChecks runs the check here. A cell that timed out, or whose kernel died,
            # keeps no verdict: the notebook's problem says what happened.
            try:
                executed = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
            except BaseException:
                self.verdicts.pop(cell_index, None)
                raise
            if cell_index in self.timed_out:
                self.verdicts.pop(cell_index, None)
            return executed

    return CappedClient


def run(job: dict) -> dict:
    """Run the job's notebook; the verdicts of its graded cells and what stopped it (None: ran to the end)."""
    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    notebook = nbformat.from_dict(job["notebook"])
    timeout_s, notebook_timeout_s = job["timeout_s"], job.get("notebook_timeout_s")
    started = time.monotonic()
    current = {"index": 0, "limit": timeout_s}

    def cell_started(cell, cell_index, **_) -> None:
        current["index"] = client.current_index = cell_index

    def cell_timeout(cell) -> int:
        limit = timeout_s
        if notebook_timeout_s is not None:
            left = math.ceil(notebook_timeout_s - (time.monotonic() - started))
            client.notebook_time_left = left > timeout_s
            limit = max(1, min(timeout_s, left))
        current["limit"] = limit
        return limit

    sandbox = job.get("sandbox")
    client = _client_class()(
        notebook,
        km=_sandboxed_kernel_manager(sandbox) if sandbox else None,
        timeout_func=cell_timeout,
        kernel_name="python3",
        allow_errors=True,
        interrupt_on_timeout=True,
        shutdown_kernel="immediate",  # no graceful goodbye (about 1 s a notebook): everything below is killed anyway
        on_cell_start=cell_started,
        resources={"metadata": {"path": job["work"]}},
    )
    client.output_cap, client.timed_out = job["output_cap"], {}
    client.remote_checks = {int(index): [tuple(entry)] for index, entry in job.get("exercises", {}).items()}
    cell_numbers = job["cell_numbers"]  # a cell of this notebook -> its number in the handed-in notebook

    def where() -> str:
        number = cell_numbers[current["index"]] if current["index"] < len(cell_numbers) else None
        return f"cell {number}" if number else "a graded check cell"

    problem = None
    try:
        client.execute(env=job["env"], cwd=job["work"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except CellTimeoutError:
        problem = f"timed out in {where()} after {current['limit']} s"
        if current["limit"] < timeout_s or not client.notebook_time_left:
            problem += f" (the whole notebook may take {notebook_timeout_s} s)"
        else:
            problem += " and did not stop when interrupted"
    except DeadKernelError:
        problem = f"kernel died in {where()}"
    except Exception as error:  # a kernel that cannot start, a broken message: this notebook only
        problem = f"could not be run ({where()}): {type(error).__name__}: {str(error)[:300]}"
    verdicts = {
        str(index): {key: str(entries[0].get(key, "")) for key in ("function", "status", "message")}
        for index, entries in client.verdicts.items()
        if index in job["graded_cells"] and entries
    }
    if client.timed_out and problem is None:
        cells = ", ".join(
            f"{f'cell {cell_numbers[i]}' if cell_numbers[i] else 'a graded check cell'} after {limit} s"
            for i, limit in sorted(client.timed_out.items())
        )
        problem = f"timed out and interrupted ({cells}); the rest of the notebook ran"
    return {
        "verdicts": verdicts,
        "problem": problem,
        "timed_out": {str(index): limit for index, limit in client.timed_out.items()},
        "dropped_output_bytes": client.dropped_bytes,
    }


def main() -> int:
    become_undumpable()  # before the key is read
    stop_with_the_checker()
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
