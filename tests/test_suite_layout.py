"""The suite's own bookkeeping: every file tests/conftest.py marks as integration or runs first exists, so a
rename cannot silently move slow tests into `make unit` or to the end of the run; and the slowest files run first."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from conftest import INTEGRATION, SLOWEST_FIRST

TESTS = Path(__file__).resolve().parent


def test_every_integration_file_exists():
    missing = sorted(name for name in INTEGRATION if not (TESTS / name).is_file())
    assert missing == [], f"tests/conftest.py INTEGRATION names files that do not exist: {missing}"


def test_every_file_run_first_exists():
    missing = sorted(name for name in SLOWEST_FIRST if not (TESTS.parent / name).is_file())
    assert missing == [], f"tests/conftest.py SLOWEST_FIRST names files that do not exist: {missing}"


def test_the_slowest_files_are_collected_first(request):
    collected = [os.path.relpath(item.path, TESTS.parent) for item in request.session.items]
    files = list(dict.fromkeys(collected))  # in the order they run
    listed = [name for name in SLOWEST_FIRST if name in files]  # those this run collected
    assert files[: len(listed)] == listed
    runs = [name for name, _ in itertools.groupby(collected)]
    assert runs == files, "a file's tests are split up: its fixtures would be set up twice, on either worker"


def test_the_integration_marker_is_applied_by_file(pytestconfig):
    from conftest import pytest_collection_modifyitems

    class Item:
        def __init__(self, path):
            self.path, self.markers = path, []

        def add_marker(self, marker):
            self.markers.append(marker.name)

    slow, quick = Item(TESTS / "test_browser.py"), Item(TESTS / "test_attention.py")
    pytest_collection_modifyitems(pytestconfig, [slow, quick])
    assert slow.markers == ["integration"] and quick.markers == []
