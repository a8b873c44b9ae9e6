"""A sandboxed notebook's scratch folder sits where its kernel's Unix sockets can be bound.

The kernel talks to its supervisor over Unix sockets in ``<scratch>/sockets/``, and Linux binds no socket whose path
is over 107 bytes. Under a deep ``TMPDIR`` (pytest's own folders on a CI runner that had run a hundred sessions
were deep enough) every notebook came back "could not be run"; the scratch folder now goes to ``/tmp`` there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from course.grading import checker, sandbox

LONGEST_SOCKET = "sockets/kernel-65535"


@pytest.fixture
def short(tmp_path):
    """A fresh folder of a short path (pytest's own can be deeper than a folder the tests want), removed after."""
    path = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    yield path
    shutil.rmtree(path)


def _deep(base: Path, length: int) -> str:
    """A new folder under ``base`` whose path is ``length`` bytes long."""
    path = base / ("d" * (length - len(str(base)) - 1))
    path.mkdir()
    assert len(str(path)) == length
    return str(path)


def test_a_short_temporary_folder_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert sandbox.scratch_parent(checker.SCRATCH_PREFIX) == str(tmp_path)


@pytest.mark.parametrize("prefix", [checker.SCRATCH_PREFIX, "nbgrader-sandbox-"])
def test_the_deepest_kept_folder_leaves_room_for_every_socket_one_byte_more_goes_to_tmp(short, monkeypatch, prefix):
    room = sandbox.SOCKET_PATH_MAX - len(f"/{prefix}12345678/{LONGEST_SOCKET}")
    for length, expected in ((room, "kept"), (room + 1, "/tmp")):
        folder = _deep(short, length)
        monkeypatch.setattr(tempfile, "tempdir", folder)
        parent = sandbox.scratch_parent(prefix)
        assert parent == (folder if expected == "kept" else "/tmp"), (length, parent)
        socket = os.path.join(tempfile.mkdtemp(prefix=prefix, dir=parent), LONGEST_SOCKET)
        assert len(os.fsencode(socket)) <= sandbox.SOCKET_PATH_MAX, socket
        os.rmdir(os.path.dirname(os.path.dirname(socket)))


def test_a_deep_temporary_folder_without_a_writable_tmp_is_refused_before_any_notebook(tmp_path, short, monkeypatch):
    folder = _deep(short, 100)
    monkeypatch.setattr(tempfile, "tempdir", folder)
    monkeypatch.setattr(sandbox.os, "access", lambda path, mode: path != "/tmp")
    with pytest.raises(sandbox.SandboxUnavailable, match="set TMPDIR to a shorter folder"):
        sandbox.scratch_parent(checker.SCRATCH_PREFIX)
    monkeypatch.setattr(checker, "sandbox_unavailable", lambda: None)
    refusal = checker.refuse_to_check(tmp_path / "grades", sandboxed=True) or ""
    assert folder in refusal and "too long for the kernel's Unix sockets" in refusal, refusal
    assert checker.refuse_to_check(tmp_path / "grades", sandboxed=False) is None  # TCP then: any folder will do
