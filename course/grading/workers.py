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
  each, never the batch.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

__all__ = ["ONE_THREAD", "WorkerDied", "in_workers", "usable_cores"]

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


def _start_worker(environment: dict[str, str], interrupt_ignored: bool, hangup_ignored: bool) -> None:
    os.environ.update(environment)
    # Handlers, unlike an ignored signal, are reset when a child execs: the notebook's kernel keeps its own. Where
    # the checker ignores Ctrl-C (started under nohup, or in the background of a script), its workers do too.
    signal.signal(signal.SIGINT, signal.SIG_IGN if interrupt_ignored else _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    # A closed terminal (or `kill -HUP` of the checker's process group) hangs up every worker too: the same clean-up.
    signal.signal(signal.SIGHUP, signal.SIG_IGN if hangup_ignored else _on_signal)


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
    interrupt_ignored, hangup_ignored = (
        signal.getsignal(number) == signal.SIG_IGN for number in (signal.SIGINT, signal.SIGHUP)
    )
    initargs = (environment, interrupt_ignored, hangup_ignored)
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
