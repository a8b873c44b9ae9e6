"""Grading several notebooks at once: worker processes, each with its own thread settings, results in order.

``check --jobs N`` hands its notebooks to N worker processes. Each is *spawned* (a fresh interpreter, not a fork
of the checker), so what grading does to a process (its signals, its environment) stays in its worker, and each
gets ``ONE_THREAD`` in its environment before it grades anything: N notebooks on N cores then use one thread each
instead of each starting a thread per core (PyTorch's default) and fighting for the cores.

Stopping is the part a pool gets wrong by default, so it is spelled out here:

* Ctrl-C (or a hang-up) reaches every worker (they share the terminal's process group); a worker that is grading
  unwinds through the grading code's own clean-up (which kills the notebook's processes) and exits, one that is
  idle exits at once, and the checker stops the rest (SIGTERM, handled the same way) and starts no further notebook;
* a worker that dies (the out-of-memory killer, ``kill -9``) costs the notebooks it held a :class:`WorkerDied`
  each, never the batch;
* a checker that dies (``kill -9``, the out-of-memory killer), which can clean up nothing, takes its workers with it:
  each worker asks Linux for SIGTERM when the checker dies (``PR_SET_PDEATHSIG``) and handles it as above, so its
  notebook's supervisor, sandbox and kernel are killed and its scratch folder removed within a second or two. Each
  level below does the same (the supervisor dies with its worker, the sandbox with its supervisor: bwrap's
  ``--die-with-parent``, which is the same request).

Why a death signal on each level, and not another design: it is Linux's own, sent whatever killed the parent
(SIGKILL included), with nothing to run in the child meanwhile and nothing inherited that could keep the link alive.
A pipe that each child watches needs a thread per process, and its write end, once inherited by a grandchild, keeps
it open after the checker is gone; a process group is not signalled when its leader is SIGKILLed alone (``kill -9
PID``); a subreaper must itself survive to act. Its two limits are handled here: the request is tied to the thread
that started the child (the pool starts its workers from the thread that submits, the checker's main thread, and
the supervisors are started from a worker's main thread), and a parent that died before the request was made is
found by asking for the parent afterwards.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

__all__ = ["ONE_THREAD", "WorkerDied", "die_with_parent", "in_workers", "usable_cores"]

Item = TypeVar("Item")
Result = TypeVar("Result")

# N notebooks on N cores: one thread each (helpers.tools.choose_threads(N, 0, processes=N) is 1). The grading code
# decides which settings reach a notebook's kernel (checker.submission_environment).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class WorkerDied(Exception):
    """The worker that held an item died before it returned a result (killed, out of memory)."""


class _Stopped(BaseException):
    """SIGTERM in a busy worker: unwind through the grading code's clean-up, then exit."""


_busy = False  # in a worker: is it inside the function right now?

PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int, parent: int) -> bool:
    """Ask Linux to send this process ``signum`` when its parent (whose pid is ``parent``) dies; if it has died
    already (before the request took effect), send it now. False where Linux's request is not available."""
    try:
        requested = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if requested and os.getppid() != parent:  # re-parented already: the death signal will never come
        os.kill(os.getpid(), signum)
    return requested


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or ``taskset``'s share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _on_signal(signum: int, frame: object) -> None:
    if not _busy:
        os._exit(128 + signum)  # idle: nothing to clean up
    # The first signal starts the clean-up; a second one (the checker's SIGTERM right after Ctrl-C) must not cut
    # it short, or the notebook's processes would outlive it.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    raise KeyboardInterrupt if signum == signal.SIGINT else _Stopped


def _start_worker(environment: dict[str, str], hangup_ignored: bool, checker: int) -> None:
    os.environ.update(environment)
    # Handlers, unlike an ignored signal, are reset when a child execs: the notebook's kernel keeps its own. SIGINT
    # always stops a worker, as it always stops the checker (course.grading.checker says why).
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    # A closed terminal (or `kill -HUP` of the checker's process group) hangs up every worker too: the same clean-up.
    # Where the checker ignores it (started under nohup), its workers do too.
    signal.signal(signal.SIGHUP, signal.SIG_IGN if hangup_ignored else _on_signal)
    die_with_parent(signal.SIGTERM, checker)  # after the handler: a checker already gone is handled the same way


def _call_in_worker(function: Callable[[Item], Result], item: Item) -> Result:
    global _busy
    _busy = True
    try:
        return function(item)
    except (KeyboardInterrupt, _Stopped):
        os._exit(130)  # the function's own clean-up ran on the way out; take no further item
    finally:
        _busy = False


def in_workers(
    function: Callable[[Item], Result], items: Sequence[Item], jobs: int, environment: dict[str, str]
) -> Iterator[Result | WorkerDied]:
    """``function(item)`` for each item, ``jobs`` at a time in spawned workers, yielded in the order of ``items``.

    ``function`` must be picklable (a module-level function, or a ``functools.partial`` of one). With one job, or
    one item, it runs here, in this process and its environment. An item whose worker died yields ``WorkerDied``.
    """
    workers = min(jobs, len(items))
    if workers <= 1:
        yield from map(function, items)
        return
    context = multiprocessing.get_context("spawn")
    others = set(multiprocessing.active_children())
    initargs = (environment, signal.getsignal(signal.SIGHUP) == signal.SIG_IGN, os.getpid())
    with ProcessPoolExecutor(workers, context, initializer=_start_worker, initargs=initargs) as pool:
        futures = [pool.submit(_call_in_worker, function, item) for item in items]
        try:
            for future in futures:
                try:
                    yield future.result()
                except BrokenProcessPool as error:
                    yield WorkerDied(f"its worker process died ({error})")
        except BaseException:  # Ctrl-C, or the caller stopped early: start no further item, stop the running ones
            for future in futures:
                future.cancel()
            for worker in set(multiprocessing.active_children()) - others:
                worker.terminate()
            raise
