"""The suite's own bookkeeping: every file tests/conftest.py marks as integration exists, so a rename cannot
silently move slow tests into `make unit`."""

from __future__ import annotations

from pathlib import Path

from conftest import INTEGRATION

TESTS = Path(__file__).resolve().parent


def test_every_integration_file_exists():
    missing = sorted(name for name in INTEGRATION if not (TESTS / name).is_file())
    assert missing == [], f"tests/conftest.py INTEGRATION names files that do not exist: {missing}"


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
