"""helpers.tools.threads: the thread count for a machine's cores and load, as documented, and who may override it."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from helpers.tools import threads


@pytest.mark.parametrize(
    ("cores", "busy", "processes", "expected"),
    [
        (2, 0.0, 1, 2),  # idle: every core, as torch's default
        (2, 0.4, 1, 2),  # a shell or an editor now and then does not take a core
        (2, 0.5, 1, 1),  # busy half the time: taken
        (2, 1.0, 1, 1),  # one busy process beside: the free core
        (2, 6.0, 1, 1),  # overloaded: still one thread, never zero
        (16, 3.0, 1, 13),
        (16, 0.0, 2, 8),  # two torchrun ranks share the cores
        (16, 10.0, 4, 1),  # 6 free cores for 4 processes: 1 each (never more threads than cores free)
        (1, 0.0, 3, 1),
    ],
)
def test_threads_are_the_free_cores_shared_among_the_processes(cores, busy, processes, expected):
    assert threads.choose_threads(cores, busy, processes) == expected


@pytest.mark.parametrize(
    ("cores", "busy", "processes", "fragment"),
    [(0, 0.0, 1, "cores >= 1"), (2, -1.0, 1, "busy >= 0"), (2, math.nan, 1, "busy >= 0"), (2, 0.0, 0, "processes")],
)
def test_impossible_machines_are_refused_with_what_was_expected(cores, busy, processes, fragment):
    with pytest.raises(ValueError, match=fragment):
        threads.choose_threads(cores, busy, processes)


def test_omp_num_threads_in_the_environment_wins(monkeypatch):
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.pick_threads() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert threads.pick_threads() == 8
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # empty is unset, as OpenMP reads it
    assert threads.pick_threads() == 8


@pytest.mark.parametrize("value", ["abc", "-3", "0", "2.5", "\u00b2"])
def test_an_omp_num_threads_that_is_not_a_count_is_ignored_with_one_warning(monkeypatch, value):
    """A variable set wrong in a shell must not stop a lesson, nor silently decide its threads: it says what it
    expected and what it used instead, once (the notebook's follower asks every few seconds)."""
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    monkeypatch.setattr(threads, "_WARNED", set())
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    expected = rf"OMP_NUM_THREADS={value!r} is not a positive integer .*ignored: computing on 8 threads chosen from"
    with pytest.warns(RuntimeWarning, match=expected):
        assert threads.pick_threads() == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert threads.pick_threads() == 8  # said once
    with pytest.raises(ValueError, match=r"not a positive integer \(a count of threads"):
        threads.threads_from_environment()


@pytest.mark.parametrize(("value", "expected"), [(" 3 ", 3), ("4,2", 4), ("", None), ("  ", None)])
def test_omp_num_threads_is_read_as_openmp_reads_it(monkeypatch, value, expected):
    """Spaces around it are fine, a list is OpenMP's counts per nesting level (the first is torch's), empty is unset."""
    assert threads.threads_from_environment({"OMP_NUM_THREADS": value}) == expected


def test_torchrun_ranks_on_one_machine_share_its_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert threads.pick_threads() == 4
    assert threads.pick_threads(processes=8) == 1


def test_the_usable_cores_are_the_affinity_mask():
    expected = len(threads.os.sched_getaffinity(0)) if hasattr(threads.os, "sched_getaffinity") else None
    assert threads.usable_cores() == (expected or threads.os.cpu_count())


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_follower_sets_the_chosen_count_and_follows_it(monkeypatch, torch_threads):
    choice = iter([1, 2])
    monkeypatch.setattr(threads, "pick_threads", lambda: next(choice))
    monkeypatch.setattr(threads, "RECHOOSE_AFTER_S", 0.0)
    follower = threads.LoadFollower()
    torch.set_num_threads(2)
    follower.update("x = 1")
    assert torch.get_num_threads() == 1
    follower.update("y = 2")  # the load went: back to two
    assert torch.get_num_threads() == 2 and follower.active


def test_the_follower_waits_between_choices(monkeypatch, torch_threads):
    calls = []
    monkeypatch.setattr(threads, "pick_threads", lambda: calls.append(1) or 1)
    follower = threads.LoadFollower()
    for _ in range(5):
        follower.update("")
    assert len(calls) == 1  # within RECHOOSE_AFTER_S: the load is sampled once


def test_a_cell_that_sets_the_threads_ends_the_following(monkeypatch, torch_threads):
    monkeypatch.setattr(threads, "pick_threads", lambda: 2)
    monkeypatch.setattr(threads, "RECHOOSE_AFTER_S", 0.0)
    follower = threads.LoadFollower()
    follower.update("torch.set_num_threads(1)  # one thread: this lesson's model must not depend on the machine")
    assert not follower.active
    torch.set_num_threads(1)
    follower.update("")
    assert torch.get_num_threads() == 1


def test_a_count_changed_by_someone_else_ends_the_following(monkeypatch, torch_threads):
    monkeypatch.setattr(threads, "pick_threads", lambda: 2)
    monkeypatch.setattr(threads, "RECHOOSE_AFTER_S", 0.0)
    follower = threads.LoadFollower()
    follower.update("")
    torch.set_num_threads(1)  # e.g. a helper the cell called
    follower.update("")
    assert not follower.active and torch.get_num_threads() == 1


def test_outside_a_notebook_nothing_is_registered():
    assert threads.follow_load_in_notebook() is None


def test_a_cell_seen_only_after_it_ran_ends_the_following_if_it_set_the_threads():
    follower = threads.LoadFollower()
    follower.saw("x = torch.ones(3)")
    assert follower.active
    follower.saw("import helpers\ntorch.set_num_threads(1)")  # the cell that imported helpers: not seen before
    assert not follower.active
