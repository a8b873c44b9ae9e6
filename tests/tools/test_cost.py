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


def test_median_time_is_positive_and_runs_the_function():
    calls = []
    assert median_time(lambda: calls.append(1), repeats=3, warmup=2) >= 0
    assert len(calls) == 5
