"""How many threads torch computes on, chosen for the machine's load, and how its idle threads wait.

Why this module exists. torch runs an op on several threads through OpenMP, and each op ends at a barrier:
every thread waits for the slowest. On a machine whose cores are all in use (a second kernel, a classroom
server, a test run beside a lesson), one of those threads shares its core with another process and runs only
part of the time, so *every* op waits for it, and while they wait the other threads spin (OpenMP's default
waits actively for about 3 ms, longer than most of this course's ops), taking more of the CPU the slow thread
needs. Measured on the course's 2-core machine (``benchmarks/contention.py``, ``benchmarks/RESULTS.md``): the
captions translator at torch's default of 2 threads trained 4.1 times slower beside one busy process, and up to
50 times slower at load 2-3, while on 1 thread it ran at nearly its idle speed. The remedy has two parts:

- ``choose_threads``: compute on the cores nobody else is using (at least one), shared among this program's
  own processes (torchrun ranks, grading workers). On an idle machine that is every core, as torch chooses
  today, so nothing gets slower there.
- no change to how OpenMP's idle threads wait. Making them sleep at once (``OMP_WAIT_POLICY=PASSIVE``) was tried
  and measured (RESULTS.md, "Threads on a shared machine"): on an idle machine at 2 threads it made the command
  line 2.6 times and lessons 09-10's work 2.3-3.1 times slower, since every op then wakes its threads from sleep,
  while the thread count alone kept every workload within 1.34 times its idle time beside a busy process.

In a notebook (``follow_load_in_notebook``, which each lesson calls in its first cell) the thread count is
chosen again before each cell, at most every ``RECHOOSE_AFTER_S`` seconds, so that a lesson follows the load as
it changes. A count set explicitly wins everywhere: ``OMP_NUM_THREADS`` in the environment, and a cell that
calls ``torch.set_num_threads`` (lessons 06-08 fix one thread, so that their models do not depend on the
machine), after which that kernel's count is left alone. An ``OMP_NUM_THREADS`` that is not a positive integer
("abc", "-3", "0") is not a choice: a lesson warns once and follows the load; the translator's command line refuses it.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
import warnings
from collections.abc import Mapping

THREADS_VARIABLE = "OMP_NUM_THREADS"
# A core counts as taken when other processes keep it busy at least this share of the time (see choose_threads).
TAKEN_SHARE = 0.5
RECHOOSE_AFTER_S = 2.0
_SAMPLES = 10
_SAMPLE_INTERVAL_S = 0.001


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or ``taskset``'s limit), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS and Windows have no affinity mask
        return max(1, os.cpu_count() or 1)


def busy_cores() -> float:
    """How many cores other processes keep busy right now (a mean, so it can be fractional; 0.0 if unknown).

    On Linux: the mean, over ``_SAMPLES`` readings about a millisecond apart, of the threads the kernel counts as
    running (``procs_running`` in /proc/stat) less this process's own running threads. That is the load *now*;
    ``os.getloadavg()`` lags by about a minute (it is a one-minute moving average), so a process started beside
    a busy one would first see an idle machine. Elsewhere: ``os.getloadavg()[0]``, which counts this process too.
    """
    readings = []
    for i in range(_SAMPLES):
        running = _running_threads()
        if running is None:
            break
        readings.append(max(0, running - _own_running_threads()))
        if i + 1 < _SAMPLES:
            time.sleep(_SAMPLE_INTERVAL_S)
    if readings:
        return sum(readings) / len(readings)
    try:
        return max(0.0, os.getloadavg()[0])
    except (AttributeError, OSError):  # Windows; or no load average available
        return 0.0


def choose_threads(cores: int, busy: float, processes: int = 1) -> int:
    """The threads one of ``processes`` processes of one program should compute on: the free cores, shared out.

    ``cores`` are the CPUs available (``usable_cores()``); ``busy`` is how many of them other programs keep
    busy (``busy_cores()``; a load average). A core counts as taken when it is busy at least ``TAKEN_SHARE`` of
    the time, so the free cores are ``cores - busy`` rounded to the nearest whole core (a half rounds down to
    taken); they are divided evenly among ``processes``; never fewer than 1 thread, never more than ``cores``.

    >>> choose_threads(2, 0.0), choose_threads(2, 1.0), choose_threads(2, 3.5), choose_threads(16, 0.2, processes=4)
    (2, 1, 1, 4)
    """
    if cores < 1 or processes < 1:
        raise ValueError(f"expected cores >= 1 and processes >= 1, got cores={cores}, processes={processes}")
    if not busy >= 0:  # also refuses NaN
        raise ValueError(f"expected busy >= 0 (cores other programs use), got {busy}")
    free = math.ceil(cores - busy - TAKEN_SHARE)  # cores - busy to the nearest whole, x.5 down
    return max(1, min(cores, free // processes))


def threads_from_environment(environ: Mapping[str, str] | None = None) -> int | None:
    """``OMP_NUM_THREADS`` as a thread count: None when it is unset or empty (as OpenMP reads it), the number when
    it is a positive integer (or OpenMP's list of counts per nesting level, "4,2": the first is torch's). Raises
    ValueError, saying what was expected, for anything else ("abc", "-3", "0")."""
    raw = (os.environ if environ is None else environ).get(THREADS_VARIABLE, "")
    first = raw.strip().split(",")[0].strip()
    if not raw.strip():
        return None
    if not re.fullmatch(r"[0-9]+", first) or int(first) == 0:
        raise ValueError(f"{THREADS_VARIABLE}={raw!r} is not a positive integer (a count of threads, such as 1 or 4)")
    return int(first)


def pick_threads(processes: int | None = None) -> int:
    """The thread count for this process now: ``OMP_NUM_THREADS`` if it is set, else ``choose_threads`` on this
    machine. ``processes`` defaults to torchrun's ``LOCAL_WORLD_SIZE`` (ranks sharing this machine), else 1.

    An ``OMP_NUM_THREADS`` that is not a positive integer is ignored with a warning, once per value, that says what
    was expected and how many threads were used instead: a variable set wrong in a shell should not stop a lesson
    (the command line, a process one starts on purpose, refuses it instead: ``cli.main``)."""
    problem: str | None
    try:
        explicit = threads_from_environment()
    except ValueError as error:
        explicit, problem = None, str(error)
    else:
        problem = None
    if explicit is not None:
        return explicit
    if processes is None:
        local = os.environ.get("LOCAL_WORLD_SIZE", "1")
        processes = int(local) if local.isdigit() and int(local) > 0 else 1
    chosen = choose_threads(usable_cores(), busy_cores(), processes)
    if problem is not None and problem not in _WARNED:
        _WARNED.add(problem)
        warnings.warn(
            f"{problem}; ignored: computing on {chosen} thread{'s' if chosen > 1 else ''} chosen from the machine's "
            f"load instead (unset it, or set it to a count, to choose yourself)",
            RuntimeWarning,
            stacklevel=2,
        )
    return chosen


# The bad OMP_NUM_THREADS values already warned about: the notebook's follower asks again every few seconds.
_WARNED: set[str] = set()


class LoadFollower:
    """Keeps torch's thread count at ``pick_threads()`` while nobody else sets it; ``update()`` re-chooses.

    ``update(cell)`` is called before each notebook cell with the cell's source. It re-chooses at most every
    ``RECHOOSE_AFTER_S`` seconds (sampling the load takes about 10 ms), and stops for good once a cell calls
    ``torch.set_num_threads`` or the count is found changed by someone else: that choice then stands.
    """

    def __init__(self) -> None:
        self.active = True
        self._chosen: int | None = None
        self._last = -math.inf

    def saw(self, cell: str) -> None:
        """A cell has run: if it set the thread count, that count stands."""
        if "set_num_threads" in cell:
            self.active = False

    def update(self, cell: str = "") -> None:
        torch = sys.modules.get("torch")  # not imported here: a notebook that never computes does not load it
        if not self.active or torch is None:
            return
        if "set_num_threads" in cell or (self._chosen is not None and torch.get_num_threads() != self._chosen):
            self.active = False  # the lesson (or the learner) chose a thread count
            return
        now = time.monotonic()
        if now - self._last < RECHOOSE_AFTER_S:
            return
        self._last = now
        self._chosen = pick_threads()
        if torch.get_num_threads() != self._chosen:
            torch.set_num_threads(self._chosen)


def follow_load_during_run() -> LoadFollower:
    """In a long computation outside a notebook (the command line's training): re-choose torch's threads while it
    runs, from a global module pre-hook (``LoadFollower.update`` is a clock read except every ``RECHOOSE_AFTER_S``
    seconds), so that a process that starts beside it after the threads were chosen does not slow every op of it.
    The count changes only between two modules' calls, in the computing thread itself."""
    import torch

    follower = LoadFollower()
    torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: follower.update())
    follower.update()
    return follower


def follow_load_in_notebook() -> LoadFollower | None:
    """Inside an IPython kernel (a lesson), re-choose torch's threads before each cell (``LoadFollower``); the
    follower is registered once per kernel. Returns it, or None outside IPython. IPython is not imported here:
    only a process that already runs it has one."""
    ipython_module = sys.modules.get("IPython")
    shell = ipython_module.get_ipython() if ipython_module is not None else None
    if shell is None:
        return None
    existing = getattr(shell, "_course_load_follower", None)
    if existing is not None:
        return existing
    follower = LoadFollower()
    shell._course_load_follower = follower
    shell.events.register("pre_run_cell", lambda info: follower.update(info.raw_cell or ""))
    # The cell running now (it imports helpers) was not seen before it ran: a set_num_threads in it counts, too.
    shell.events.register("post_run_cell", lambda result: follower.saw(getattr(result.info, "raw_cell", "") or ""))
    if "torch" in sys.modules:  # the cell importing helpers computes too: choose now
        follower.update()
    return follower


def _running_threads() -> int | None:
    """Threads the kernel counts as running or runnable, on every CPU (Linux's /proc/stat); None elsewhere."""
    try:
        with open("/proc/stat", "rb") as stat:
            for line in stat:
                if line.startswith(b"procs_running "):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _own_running_threads() -> int:
    """This process's threads in state R (running or runnable): the reading thread, and OpenMP threads that
    spin while they wait, which are this process's load, not another's."""
    count = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as stat:
                # "pid (name) S ...": the state follows the name's closing parenthesis (a name may hold spaces)
                if stat.read().rpartition(b")")[2].split()[0] == b"R":
                    count += 1
        except (OSError, IndexError):
            continue
    return max(1, count)
