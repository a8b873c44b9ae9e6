"""Writing a file so that no reader ever sees it half-written, in one place for the whole package.

Every file the course writes for someone else to read (student copies, downloaded corpora,
checkpoints, the generated corpus) goes through :func:`write_atomically` or
:func:`atomic_target`: the bytes go to a temporary file in the target's own folder, are flushed
to disk, get the permissions a plain ``open(path, "w")`` would give (``0o666`` less the umask:
``mkstemp`` makes its files ``0o600``, which would lock every other account out of a class
checkpoint), and only then replace the target with one ``os.replace`` (atomic on one file
system). On any failure, including Ctrl-C, the temporary file is removed and the target is left
as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["TEMPORARY_SUFFIX", "atomic_target", "default_file_mode", "write_atomically"]

#: Suffix of the temporary files (hidden, ``.<name>.<random>.part``): what a clean-up may look for.
TEMPORARY_SUFFIX = ".part"


def default_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666`` less the process's umask."""
    umask = os.umask(0)  # the only portable way to read the umask is to set it and put it back
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_target(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without error it becomes ``path``.

    For writers that want a file name rather than bytes (``torch.save``)::

        with atomic_target("runs/model.pt") as temporary:
            torch.save(payload, temporary)

    The folder must exist. The temporary file exists (empty) when the block starts; whatever the
    block leaves in it is flushed to disk, given the default mode and renamed into place.
    """
    path = Path(path)
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
    os.close(descriptor)
    temporary = Path(name)
    try:
        yield temporary
        with open(temporary, "rb+") as handle:  # on disk before the rename: a crash cannot leave a hollow file
            os.fsync(handle.fileno())
        os.chmod(temporary, default_file_mode())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # after a failure; after success the name is already gone


def write_atomically(path: str | os.PathLike, data: bytes | str, *, skip_unchanged: bool = False) -> bool:
    """Write ``data`` (bytes, or text written as UTF-8 with ``\\n`` line ends) to ``path`` atomically.

    With ``skip_unchanged`` a file that already holds exactly ``data`` is not rewritten (its
    modification time stays). Returns True if the file was written, False if it was left alone.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if skip_unchanged and path.is_file() and path.read_bytes() == payload:
        return False
    with atomic_target(path) as temporary:
        temporary.write_bytes(payload)
    return True
