"""Measuring what a computation costs on the CPU: its wall time and the peak memory it adds.

Peak memory is read from Linux's own bookkeeping of this process: ``VmHWM`` in ``/proc/self/status`` is the
high-water mark of resident memory, and writing ``5`` to ``/proc/self/clear_refs`` resets it to the current
resident size. So "reset, run, read the mark, subtract the resident size before" is the largest amount of memory
the call held at any moment: every tensor it allocated and wrote, temporaries included. (``tracemalloc`` sees
only Python's own objects, not the tensors' memory.)

Memory freed by an earlier call may stay resident inside the C allocator (glibc's malloc keeps freed blocks for
reuse), and a later call reusing it would raise no mark. So the first measurement tells glibc to serve every block
of 64 KiB or more straight from the system and to hand it back on ``free`` (``mallopt``: a fixed mmap threshold),
for the rest of the process: allocation-heavy work done later in the same process runs slower (measured in
benchmarks/RESULTS.md). PyTorch's CPU allocator keeps no cache of its own. Linux with glibc only; elsewhere
``peak_memory`` raises ``OSError``.
"""

from __future__ import annotations

import ctypes
import functools
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["median_time", "peak_memory"]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), flags=re.MULTILINE)
    if match is None:
        raise OSError(f"/proc/self/status has no {field} line: peak memory is measured on Linux only")
    return int(match.group(1))


@functools.cache
def _libc() -> ctypes.CDLL:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError as error:
        raise OSError(f"peak_memory needs glibc (libc.so.6): {error}") from None
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers in glibc's malloc.h
    libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024)  # fixed: large blocks are mmapped and unmapped when freed
    libc.mallopt(M_TRIM_THRESHOLD, 64 * 1024)  # the heap's free top goes back to the system too
    return libc


def peak_memory(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn()`` once; return its result and the peak resident memory it added, in bytes."""
    if not _CLEAR_REFS.exists():
        raise OSError("peak_memory needs Linux's /proc/self/clear_refs to reset the high-water mark")
    _libc().malloc_trim(0)  # give freed memory back first, so that reusing it counts
    before = _status_kib("VmRSS")
    _CLEAR_REFS.write_text("5")  # the high-water mark VmHWM restarts from the resident size now
    result = fn()
    return result, max(0, _status_kib("VmHWM") - before) * 1024


def median_time(
    fn: Callable[[], Any], repeats: int = 3, warmup: int = 1, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs, after ``warmup`` runs not timed.

    ``clock`` reads the time in seconds (default ``time.perf_counter``), read just before and after each timed run.
    """
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"repeats must be a whole number of at least 1, got {repeats!r}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"warmup must be a whole number of at least 0, got {warmup!r}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)
