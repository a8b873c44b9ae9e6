"""helpers.peak_memory sees tensors' memory (which tracemalloc cannot), freed or not, and nothing of earlier calls."""

from __future__ import annotations

import sys

import pytest
import torch

from helpers import median_time, peak_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak memory is read from Linux's /proc")

MIB = 2**20


def test_a_temporary_tensor_is_counted_even_after_it_is_freed():
    def make_and_drop():
        x = torch.ones(64 * MIB // 4)  # 64 MiB of float32, written
        return float(x[0])  # x is freed on return

    result, peak = peak_memory(make_and_drop)
    assert result == 1.0
    assert 60 * MIB < peak < 100 * MIB


def test_reused_memory_is_counted_again_and_small_work_is_small():
    for _ in range(2):  # the second call reuses what the first freed: it must count again
        _, peak = peak_memory(lambda: torch.ones(32 * MIB // 4).sum())
        assert peak > 28 * MIB
    _, small = peak_memory(lambda: torch.ones(1000).sum())
    assert small < 4 * MIB


def test_median_time_is_the_median_of_the_timed_runs_only():
    calls = []
    durations = iter([5.0, 1.0, 3.0])  # what each timed run takes on the fake clock
    now = [100.0]

    def fn():
        calls.append(1)
        if len(calls) > 2:  # the two warm-up runs are not timed: they take no time on the clock
            now[0] += next(durations)

    assert median_time(fn, repeats=3, warmup=2, clock=lambda: now[0]) == 3.0
    assert len(calls) == 5


def test_median_time_refuses_bad_counts():
    for repeats in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="repeats must be a whole number of at least 1"):
            median_time(lambda: None, repeats=repeats)
    with pytest.raises(ValueError, match="warmup must be a whole number of at least 0"):
        median_time(lambda: None, warmup=-1)


def test_median_time_with_the_real_clock_is_positive():
    assert median_time(lambda: sum(range(1000)), repeats=3, warmup=0) > 0
