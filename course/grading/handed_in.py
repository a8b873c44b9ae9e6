"""A handed-in notebook, read the one way that is safe for ``check``, which runs as root: never through a link.

The teacher points ``check`` at students' folders (``alice/03_x.ipynb``, or nbgrader's
``submitted/alice/03_x/03_x.ipynb``), whose contents the students chose. Reading them as root with ordinary
``open`` would follow what they put there:

- a symbolic link named ``03_x.ipynb`` to the solution notebook would be graded as the solution, and one to
  ``/etc/shadow`` would be read by root (and copied into the sandbox);
- a hard link is the same file under a second name (the solution, if the student's folder is on the course's
  file system);
- a FIFO named like a notebook blocks ``open`` until someone writes to it: ``check`` would hang for ever;
- a device file (``/dev/zero`` made with ``mknod``) never ends.

So :func:`read_handed_in` accepts only a regular file with one name, inside the student's folder: every folder
from the student's down to the file is opened relative to the one above it without following a link
(``O_NOFOLLOW``), the file's kind is checked before it is opened (``lstat``) and again on the open descriptor
(``fstat``, the same inode), the open never waits (``O_NONBLOCK``), and at most ``MAX_NOTEBOOK_BYTES`` are read.
The bytes read are what is graded and what the kernel sees: the file is never opened a second time.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from course.solution_notebooks import file_kind

__all__ = ["MAX_NOTEBOOK_BYTES", "RefusedFile", "read_handed_in", "student_folder"]

MAX_NOTEBOOK_BYTES = 256 * 2**20  # a lesson with its outputs is under 1 MB; a notebook full of images is still less
_EXPECTED = "expected a regular file handed in inside the student's folder"


class RefusedFile(ValueError):
    """A handed-in path that is not a regular file of the student's own (a link, a FIFO, a device, too big)."""


def student_folder(path: Path) -> Path:
    """The student's folder of a handed-in file: its folder, or the one above in nbgrader's layout
    (``submitted/alice/03_x/03_x.ipynb``): the folder whose contents the student chose."""
    folder = path.parent
    return folder.parent if folder.name == path.stem and folder.parent.name else folder


def _open_folder(name: str | Path, parent: int | None, shown: Path) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError as error:
        if Path(shown).is_symlink():
            raise RefusedFile(f"{shown} is a symbolic link, not a folder: {_EXPECTED}") from None
        raise RefusedFile(f"{shown} cannot be opened as a folder ({error.strerror}): {_EXPECTED}") from None


def read_handed_in(path: str | Path, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of the handed-in file ``path``; ``RefusedFile`` saying why, for anything but a regular file
    with one name whose every folder from the student's down is a real folder (no link followed)."""
    path = Path(path)
    top = student_folder(path)
    folders = path.parent.relative_to(top).parts
    descriptors = [_open_folder(top, None, top)]
    try:
        for depth, name in enumerate(folders, start=1):
            descriptors.append(_open_folder(name, descriptors[-1], top.joinpath(*folders[:depth])))
        return _read_regular_file(path, descriptors[-1], limit)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def _read_regular_file(path: Path, folder: int, limit: int) -> bytes:
    try:
        seen = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
    except OSError as error:
        raise RefusedFile(f"{path} cannot be read ({error.strerror}): {_EXPECTED}") from None
    _refuse_unless_regular(path, seen, limit)  # before opening: opening a FIFO or a device can wait or act
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        descriptor = os.open(path.name, flags, dir_fd=folder)
    except OSError as error:
        raise RefusedFile(f"{path} cannot be opened ({error.strerror}): {_EXPECTED}") from None
    with contextlib.closing(os.fdopen(descriptor, "rb")) as file:
        opened = os.fstat(descriptor)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
            raise RefusedFile(f"{path} was replaced while it was being read: {_EXPECTED}; check it again")
        _refuse_unless_regular(path, opened, limit)
        data = file.read(limit + 1)
    if len(data) > limit:
        raise RefusedFile(f"{path} grew past {limit:,} bytes while it was read: {_EXPECTED}, under that size")
    return data


def _refuse_unless_regular(path: Path, status: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(status.st_mode):
        kind = file_kind(status.st_mode)
        why = " (it could point at the solutions, or at any file root can read)" if stat.S_ISLNK(status.st_mode) else ""
        raise RefusedFile(f"{path} is {kind}{why}: {_EXPECTED}")
    if status.st_nlink != 1:
        raise RefusedFile(
            f"{path} has {status.st_nlink} names (hard links): it is also a file elsewhere, perhaps the solution; "
            f"{_EXPECTED}, with one name (a copy)"
        )
    if status.st_size > limit:
        raise RefusedFile(f"{path} holds {status.st_size:,} bytes: {_EXPECTED}, of at most {limit:,} bytes")
