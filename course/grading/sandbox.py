"""The sandbox a handed-in notebook's kernel runs in: bubblewrap (``bwrap``) plus resource limits.

The checker's supervisor (:mod:`course.grading.supervisor`) stays outside; only the kernel, and whatever the
notebook starts, runs inside. The kernel command becomes::

    prlimit --as=… --cpu=… --nproc=… --fsize=… --core=0 --
      bwrap <a new root: read-only views of the system, Python and the course> --unshare-pid --unshare-net …
        setpriv --reuid=<this job's uid> … bwrap --unshare-user --disable-userns --unshare-pid --dev-bind / / --
          python -m ipykernel_launcher -f <connection file>

so that inside

- the filesystem is a fresh, empty root holding read-only views of ``/usr`` (and ``/lib``, ``/bin``...),
  a few files of ``/etc`` (no ``/etc/shadow``), the Python installation and its virtual environment, the
  course's ``helpers/``, ``course/`` and ``data/`` (not ``notebooks/``: no solutions) and the download cache;
  the only writable places are the notebook's own folder (a copy of the one notebook), a private ``/tmp``
  and ``/dev/shm`` (memory of the host's, so each of a bounded size, ``Limits.tmp_bytes``) and the folder of
  the kernel's sockets, all deleted afterwards;
- it has its own process namespace (``/proc`` shows only the notebook's processes: no checker, no command
  line naming other students), no network (its own empty network namespace: the kernel talks to the
  supervisor through Unix sockets in a shared folder), its own IPC namespace and hostname;
- it runs, when the checker runs as root, as a user of its own (``SANDBOX_UIDS``: one uid per notebook being
  graded, claimed for as long as it runs, so that ``--jobs`` notebooks never share one), otherwise as the
  teacher in a user namespace; with no capabilities, in a session of its own (``--new-session``): it cannot
  read or write the teacher's files even where a view is shared, nor ptrace or signal a process outside;
- it cannot make a user namespace of its own (``--disable-userns``): ``unshare -Ur`` would give it uid 0
  there, and with it the mounts and capabilities a namespace's root has;
- ``prlimit`` bounds its address space (memory), CPU seconds, each file's size and (as root's sandbox user)
  the processes of its uid: a fork bomb stops at ``Limits.processes`` and starves no other notebook;
- everything inside dies with the sandbox (``--die-with-parent``; killing the sandbox's first process ends
  its process namespace).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SANDBOX_GID",
    "SANDBOX_UID",
    "SANDBOX_UIDS",
    "Limits",
    "SandboxUnavailable",
    "claimed_uid",
    "kernel_prefix",
    "scratch_parent",
    "unavailable",
]

SANDBOX_UID = SANDBOX_GID = 65534  # "nobody": owns nothing of the teacher's
# One uid per notebook being graded, each its own group too: Debian reserves 65000-65533 (never given to a user or
# a package), so these own nothing on the machine, and processes counted per uid are counted per notebook.
SANDBOX_UIDS = range(65000, 65534)
# Where the claims on those uids are held (a lock per uid, released when the claiming process ends, however).
_CLAIMS_DIR = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")
# Files of /etc that programs read (the dynamic linker's cache, user names, time zone, fonts, certificates).
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "localtime", "fonts", "ssl")
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # symbolic links into /usr on merged-/usr systems
# What lets a user who is not root make user namespaces: an ordinary teacher's sandbox needs them, and so does root's
# (its inner, locked one is made by the sandbox's user). The guide gives the commands.
_USERNS_SWITCHES = (
    "user namespaces for users who are not root (sysctl kernel.unprivileged_userns_clone=1, "
    "user.max_user_namespaces not 0; on Ubuntu 23.10 or later AppArmor's bwrap-userns-restrict profile or "
    "kernel.apparmor_restrict_unprivileged_userns=0: docs/teaching.md, 'A teacher who is not root')"
)


class SandboxUnavailable(RuntimeError):
    """bubblewrap (or prlimit/setpriv) is missing or cannot make a sandbox on this machine."""


@dataclass(frozen=True)
class Limits:
    """What one notebook's sandbox may use: ``memory_bytes`` of address space per process, ``cpu_s`` CPU
    seconds per process, ``processes`` (and threads: a kernel has a dozen or more) alive at once for the
    sandbox's user, ``file_bytes`` per file written, ``tmp_bytes`` in each of ``/tmp`` and ``/dev/shm`` (kept
    in the host's memory). The process count is set only when the sandbox's user is the notebook's own (the
    checker run as root): for an ordinary teacher it would count the teacher's own processes."""

    memory_bytes: int = 8 * 2**30
    cpu_s: int = 3600
    processes: int = 1024
    file_bytes: int = 2 * 2**30
    tmp_bytes: int = 2**30

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "cpu_s", "processes", "file_bytes", "tmp_bytes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} should be a positive whole number, got {getattr(self, name)!r}")


def _tools() -> dict[str, str | None]:
    names = ("bwrap", "prlimit", "setpriv") if os.geteuid() == 0 else ("bwrap", "prlimit")
    return {name: shutil.which(name) for name in names}


def _found(tools: dict[str, str | None]) -> dict[str, str]:
    """The tools' paths, for a caller that has already refused a missing one (so none is None here)."""
    found = {name: path for name, path in tools.items() if path is not None}
    assert len(found) == len(tools), f"a sandbox tool is missing: {tools}"
    return found


def unavailable() -> str | None:
    """Why no sandbox can be made here (None: it can): a missing tool, or bwrap refusing to start one."""
    tools = _tools()
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        packages = {"bwrap": "bubblewrap", "prlimit": "util-linux", "setpriv": "util-linux"}
        wanted = sorted({packages[name] for name in missing})
        return f"{', '.join(missing)} not found (install the Debian/Ubuntu package {' and '.join(wanted)})"
    paths = _found(tools)
    trial = [paths["bwrap"], "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--proc", "/proc", "true"]
    try:
        done = subprocess.run(trial, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap could not start: {error}"
    if done.returncode != 0:
        reason = " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"
        needs = _USERNS_SWITCHES if os.geteuid() != 0 else "mount namespaces (which a container may refuse its root)"
        return f"bwrap cannot make a sandbox on this machine ({reason}); it needs {needs}"
    if os.geteuid() == 0:  # as kernel_prefix does: the sandbox's user makes the locked namespace inside
        trial = [paths["bwrap"], "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-pid"]
        trial += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", *_as_user(paths, SANDBOX_UIDS[0])]
        trial += [*_locked_user_namespace(paths), "true"]
    else:
        trial = [paths["bwrap"], "--ro-bind", "/", "/", "--unshare-user", "--disable-userns", "true"]
    try:
        done = subprocess.run(trial, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap could not start: {error}"
    if done.returncode != 0:
        reason = " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"
        return f"bwrap cannot lock the sandbox's user namespaces here ({reason}); it needs {_USERNS_SWITCHES}"
    return None


def _as_user(tools: dict[str, str], uid: int) -> list[str]:
    """setpriv's words that make the rest of the command run as ``uid`` (and its group), with no capabilities."""
    return [tools["setpriv"], f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all"]  # fmt: skip


def _locked_user_namespace(tools: dict[str, str]) -> list[str]:
    """bwrap's words for a user namespace the command cannot leave for a new one (``unshare -Ur`` fails).

    Its process namespace keeps this bwrap, which the sandbox's user could signal, out of the kernel's reach: the
    kernel's parent is the namespace's first process, which ignores what its namespace sends it. ``/proc`` stays
    the outer sandbox's (a user namespace may not mount one below bwrap's read-only parts of it): it shows only
    the notebook's processes, numbered as outside this namespace (``/proc/self`` is right; ``/proc/<getpid()>``
    is not)."""
    words = [tools["bwrap"], "--unshare-user", "--disable-userns", "--unshare-pid", "--dev-bind", "/", "/"]
    return [*words, "--die-with-parent", "--"]


@contextlib.contextmanager
def claimed_uid() -> Iterator[int]:
    """A uid of ``SANDBOX_UIDS`` that no other notebook's sandbox uses while this one holds it (an exclusive lock
    per uid, shared by every ``check`` on the machine; released when the block ends or the process dies). An
    ordinary teacher's sandbox runs as the teacher: their own uid. ``SandboxUnavailable`` when all are taken."""
    if os.geteuid() != 0:
        yield os.getuid()
        return
    for uid in SANDBOX_UIDS:
        lock = _CLAIMS_DIR / f"attention-course-sandbox-uid-{uid}.lock"
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            continue
        try:
            yield uid
        finally:
            os.close(descriptor)  # closing releases the lock
        return
    raise SandboxUnavailable(f"all {len(SANDBOX_UIDS)} sandbox uids are in use by notebooks being graded")


def _ancestors(path: Path) -> list[Path]:
    return list(reversed(path.parents))[1:]  # /a/b/c -> /a, /a/b (not /)


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """The existing ``paths`` (resolved), without those inside another one (one view covers them)."""
    resolved = sorted({Path(os.path.realpath(p)) for p in paths if Path(p).exists()}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in resolved:
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return kept


def python_paths() -> list[Path]:
    """The Python installation and virtual environment the kernel runs from (read-only inside)."""
    return [Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parents[1]]


def kernel_prefix(
    readable: Sequence[Path],
    writable: Sequence[Path],
    cwd: Path,
    limits: Limits,
    uid: int = SANDBOX_UID,
    replaced: Sequence[tuple[Path, Path]] = (),
) -> list[str]:
    """The words put before the kernel's command so that it runs in the sandbox described above.

    ``readable``: folders (or files) seen read-only at their own paths, besides the system and Python;
    ``writable``: folders seen read-write at their own paths (they must be writable by ``uid``); ``cwd``:
    the folder the kernel starts in; ``replaced``: (folder, place) pairs, each folder seen read-only in place of
    what a readable view shows there (the graded kernel's stand-in for course/exercises). Raises
    ``SandboxUnavailable`` when a tool is missing.
    """
    located = _tools()
    if None in located.values():
        raise SandboxUnavailable(unavailable() or "a sandbox tool is missing")
    tools = _found(located)
    words = [tools["prlimit"], f"--as={limits.memory_bytes}", f"--cpu={limits.cpu_s}"]
    words += [f"--nproc={limits.processes}"] if os.geteuid() == 0 else []
    words += [f"--fsize={limits.file_bytes}", "--core=0", "--", tools["bwrap"]]
    words += ["--ro-bind", "/usr", "/usr"]
    for name in _MERGED_USR:
        top = Path("/") / name
        if top.is_symlink():
            words += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            words += ["--ro-bind", str(top), str(top)]
    for name in _ETC:
        if (Path("/etc") / name).exists():
            words += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    words += ["--proc", "/proc", "--dev", "/dev"]
    for folder in ("/tmp", "/dev/shm"):  # memory of the host's: each of a bounded size
        words += ["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", folder]
    shown = [p for p in _outermost([*python_paths(), *readable]) if Path("/usr") not in [p, *p.parents]]
    made: set[Path] = {Path("/tmp"), Path("/dev"), Path("/dev/shm")}
    for path, mode in [*((p, "--ro-bind") for p in shown), *((Path(p), "--bind") for p in writable)]:
        for parent in _ancestors(path):
            if parent not in made:  # bwrap would make it 0700 (owner root): the sandbox's user could not pass
                words += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        words += [mode, str(path), str(path)]
    for source, place in replaced:  # after the views they sit in, so that they cover what those show there
        words += ["--ro-bind", str(source), str(place)]
    words += ["--chdir", str(cwd), "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    words += ["--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session"]
    # Inside, the kernel's parent is the namespace's first process: ipykernel, told its parent's pid by jupyter,
    # would take itself for an orphan and quit. It needs no watch: it dies with the sandbox.
    words += ["--unsetenv", "JPY_PARENT_PID"]
    if os.geteuid() != 0:  # an ordinary teacher: bwrap makes a user namespace, the kernel keeps the teacher's uid
        return [str(word) for word in [*words, "--unshare-user", "--disable-userns", "--"]]
    # bwrap drops every capability; these two only let setpriv become the sandbox's user, which drops them. bwrap
    # run as root cannot lock user namespaces (its --disable-userns needs one of its own, which would map the
    # sandbox's user to root outside), so a second bwrap, run as that user, makes the locked one inside.
    words += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", *_as_user(tools, uid)]
    return [str(word) for word in [*words, *_locked_user_namespace(tools)]]


# The kernel's sockets are Unix sockets, <scratch>/sockets/kernel-<n>, and Linux binds no socket whose path is over
# 107 bytes (sun_path: 108 with the closing NUL): under a deep TMPDIR every kernel would fail to start.
SOCKET_PATH_MAX = 107
_SOCKET_TAIL = len("/12345678/sockets/kernel-65535")  # mkdtemp's 8 random characters after the prefix, then ours


def scratch_parent(prefix: str) -> str:
    """Where a sandboxed notebook's scratch folder (``prefix`` and 8 characters, holding its work, home and
    sockets) goes: the teacher's temporary folder (``TMPDIR``), or ``/tmp`` where that one is too deep for the
    kernel's sockets (see ``SOCKET_PATH_MAX``). Raises :class:`SandboxUnavailable`, saying so, where neither will do."""
    chosen, tail = tempfile.gettempdir(), len(prefix) + _SOCKET_TAIL
    if len(os.fsencode(chosen)) + tail <= SOCKET_PATH_MAX:
        return chosen
    if os.access("/tmp", os.W_OK | os.X_OK):
        return "/tmp"
    raise SandboxUnavailable(
        f"the temporary folder {chosen} is {len(os.fsencode(chosen))} bytes long, too long for the kernel's Unix "
        f"sockets inside it (at most {SOCKET_PATH_MAX - tail} bytes), and /tmp cannot be written: set "
        "TMPDIR to a shorter folder"
    )


def give_to_sandbox(path: Path, uid: int = SANDBOX_UID) -> None:
    """Make ``path`` (a folder made for one notebook) and everything in it the sandbox user's, private to it
    (as root; an ordinary teacher's sandbox keeps the teacher's uid, which owns it already)."""
    if os.geteuid() != 0:
        return
    for folder, _, files in os.walk(path):
        os.chown(folder, uid, uid)
        os.chmod(folder, 0o700)
        for name in files:
            os.chown(Path(folder) / name, uid, uid)
