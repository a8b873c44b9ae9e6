"""Tests for helpers.tools.files: one atomic writer for the whole package."""

from __future__ import annotations

import os
import stat

import pytest

from helpers.tools.files import atomic_target, default_file_mode, write_atomically


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_written_file_has_the_umask_mode_not_mkstemps_0600(tmp_path, umask_022):
    target = tmp_path / "out.bin"
    assert write_atomically(target, b"abc") is True
    assert target.read_bytes() == b"abc"
    assert _mode(target) == 0o644 == default_file_mode()
    previous = os.umask(0o077)  # a private umask is respected too
    try:
        write_atomically(tmp_path / "private.txt", "x")
    finally:
        os.umask(previous)
    assert _mode(tmp_path / "private.txt") == 0o600


def test_text_is_written_as_utf8_and_unchanged_files_are_skipped(tmp_path):
    target = tmp_path / "text.txt"
    write_atomically(target, "Größe\n")
    assert target.read_bytes() == "Größe\n".encode()
    os.utime(target, (1, 1))
    assert write_atomically(target, "Größe\n", skip_unchanged=True) is False
    assert target.stat().st_mtime == 1
    assert write_atomically(target, "Größe\n") is True  # without skip_unchanged it is rewritten
    assert target.stat().st_mtime != 1


def test_a_failure_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "model.pt"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_target(target) as temporary:
        temporary.write_bytes(b"half")
        raise KeyboardInterrupt  # Ctrl-C in the middle of a save
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


def test_atomic_target_replaces_only_at_the_end(tmp_path):
    target = tmp_path / "model.pt"
    with atomic_target(target) as temporary:
        temporary.write_bytes(b"new")
        assert not target.exists()  # nothing under the real name until the block ends
        assert temporary.parent == tmp_path and temporary.name.startswith(".model.pt.")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


def test_missing_folder_is_a_clear_oserror_and_leaves_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "absent" / "file", b"x")
    assert list(tmp_path.iterdir()) == []
