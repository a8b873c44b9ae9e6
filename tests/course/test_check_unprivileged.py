"""``check`` run by a teacher who is not root: the sandbox is then made in an unprivileged user namespace.

A teacher on a shared or university machine has no root, and bubblewrap then needs the kernel to let ordinary
users make user namespaces (docs/teaching.md, section 4: the sysctls ``kernel.unprivileged_userns_clone``,
``user.max_user_namespaces`` and, on Ubuntu 24.04, AppArmor's ``kernel.apparmor_restrict_unprivileged_userns``).
This test grades two students' notebooks as such a teacher: run as root (a container, CI), it runs the checker as
user ``nobody`` (65534) with ``setpriv --reuid``, which changes nothing on the machine (no user is created); run as
an ordinary user, it runs the checker as that user. Where that user cannot make a sandbox, it skips, saying why.

Run as root with a Python that lies under a folder closed to other users (pyenv's under ``/root``, mode 0700), the
checker starts in a mount namespace of its own made by root's bubblewrap: there each closed folder is a fresh empty
one, open to all, holding only the interpreter's tree, read-only. Nothing else changes: no user namespace (the
checker runs as ``nobody`` in the machine's own, with no capabilities), the same ``/proc``, ``/tmp`` and course.
One thing is added: bwrap sets ``no_new_privs``, so there a setuid bwrap would gain nothing; Debian's is not
setuid, and what this test proves is the sandbox made in an unprivileged user namespace, which needs no setuid.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course.grading import checker, sandbox

NOBODY = 65534
KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
IMPORT = "from course.exercises.lesson02 import check_linear_projection"
CHECK = "check_linear_projection(linear_projection)"


# Run as the teacher: what would stop the checker, or nothing. The checker starts its workers and kernels with its
# own interpreter, so that interpreter must be one the teacher may run (a Python under /root, mode 0700, is not).
# The probe's own start proves nothing: root's setpriv started it here as nobody, whose children then could not.
PROBE = """\
import os, sys
from course.grading import sandbox
if not os.access(os.path.realpath(sys.executable), os.X_OK):
    print(f"user {os.geteuid()} may not run {os.path.realpath(sys.executable)} (a folder above it is closed to them)")
else:
    print(sandbox.unavailable() or "")
"""


def notebook(path: Path, body: str) -> Path:
    """A lesson 02 notebook of one exercise whose answer returns ``body``; the answer refuses to run as root or in
    this test's user namespace, so that a pass also says the kernel ran as the teacher, in a user namespace of the
    sandbox's own, not as root nor beside the checker."""
    answer = (
        "import os\n\n\ndef linear_projection(x, weight, bias):\n    # BEGIN SOLUTION\n"
        "    if os.geteuid() == 0:\n        raise RuntimeError('the kernel runs as root')\n"
        f"    if os.readlink('/proc/self/ns/user') == {os.readlink('/proc/self/ns/user')!r}:\n"
        "        raise RuntimeError('the kernel runs in the user namespace of the checker')\n"
        f"    return {body}\n    # END SOLUTION"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [v4.new_code_cell(text) for text in (IMPORT, answer, CHECK)]
    nbformat.write(v4.new_notebook(cells=cells, metadata=KERNELSPEC), path)
    return path


def closed_folders(paths: list[Path]) -> dict[Path, list[Path]]:
    """The outermost folder above each of ``paths`` that users other than its owner may not pass (no ``x`` for
    others; ACLs aside), each with the ``paths`` below it; empty where every path is open to all."""
    closed: dict[Path, list[Path]] = {}
    for path in sorted({Path(os.path.realpath(p)) for p in paths}):
        above = list(reversed(path.parents))[1:]  # /a/b/c -> /a, /a/b
        shut = next((folder for folder in above if not folder.stat().st_mode & stat.S_IXOTH), None)
        if shut is not None and not any(kept in path.parents or kept == path for kept in closed.get(shut, [])):
            closed.setdefault(shut, []).append(path)
    return closed


def interpreter_shown(closed: dict[Path, list[Path]]) -> list[str]:
    """bwrap's words (run as root) that start a command in a mount namespace where each ``closed`` folder is an
    empty tmpfs, mode 0755, holding read-only only the paths below it (the folders between them 0755 too), so that
    any user can run the interpreter while nothing else of, say, root's home is there to read. [] if none is closed.
    Only a mount namespace: the command keeps root's user namespace and uid, and two capabilities, for setpriv."""
    if not closed:
        return []
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        shut = ", ".join(map(str, closed))
        pytest.skip(f"running as root, Python lies under {shut}, closed to other users, and without bwrap "
                    "(bubblewrap) there is no mount namespace to show the interpreter to user nobody")  # fmt: skip
    words = [bwrap, "--dev-bind", "/", "/", "--die-with-parent"]
    for folder, inside in closed.items():
        words += ["--perms", "0755", "--tmpfs", str(folder)]
        made = {folder}
        for path in inside:
            for between in [p for p in reversed(path.parents) if folder in p.parents and p not in made]:
                words += ["--perms", "0755", "--dir", str(between)]  # bwrap would make it 0700
                made.add(between)
            words += ["--ro-bind", str(path), str(path)]
    # bwrap run as root drops every capability; these two let setpriv become nobody, which drops them.
    return [*words, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--"]


def as_teacher() -> tuple[list[str], str]:
    """The words that make a command run by a user who is not root (``nobody`` when this test runs as root, seeing
    the interpreter through :func:`interpreter_shown` where a folder above it is closed to them; else this user),
    and who that is, in words."""
    if os.geteuid() != 0:
        return [], f"user {os.geteuid()}"
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): no way to run the checker as another user")
    closed = closed_folders([*sandbox.python_paths(), checker.course_root()])
    who = f"user nobody, in a mount namespace where {', '.join(map(str, closed))} holds only Python"
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return [*interpreter_shown(closed), *drop], who if closed else "user nobody"


@pytest.fixture
def folder():
    """A folder the teacher owns, outside pytest's own (root's, mode 0700, which nobody cannot enter); removed
    afterwards, whoever wrote into it."""
    path = Path(tempfile.mkdtemp(prefix="check-unprivileged-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.integration
def test_check_grades_in_its_sandbox_run_by_a_teacher_who_is_not_root(folder):
    lessons = notebook(folder / "notebooks" / "02_tiny.ipynb", "x @ weight.T + bias").parent
    alice = notebook(folder / "submitted" / "alice" / "02_tiny.ipynb", "x @ weight.T + bias")
    bob = notebook(folder / "submitted" / "bob" / "02_tiny.ipynb", "x @ weight + bias")
    (folder / "tmp").mkdir()
    if os.geteuid() == 0:
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(folder),  # nobody's own home does not exist
        "TMPDIR": str(folder / "tmp"),
        "PYTHONPATH": str(checker.course_root()),
        "LANG": "C.UTF-8",
    }
    teacher, who = as_teacher()
    probe = subprocess.run([*teacher, sys.executable, "-c", PROBE], capture_output=True, text=True, env=env,
                           cwd=folder, timeout=120)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"the course cannot run as {who} here: {probe.stderr.strip()[-300:]}")
    if probe.stdout.strip():
        pytest.skip(f"{who} cannot grade here: {probe.stdout.strip()}")

    result = subprocess.run(
        [
            *(*teacher, sys.executable, "-m", "course.assignments", "check", "--timeout", "120", "--memory", "1500"),
            *("--notebooks", str(lessons), "--out", str(folder / "grades"), str(alice), str(bob)),
        ],
        capture_output=True, text=True, env=env, cwd=folder, timeout=600,
    )  # fmt: skip
    assert "--no-sandbox" not in result.stderr, result.stderr  # it sandboxed, rather than asking to run without
    rows = [row for row in csv.reader(io.StringIO(result.stdout), delimiter="\t") if row][1:]
    status = {row[0]: row[3] for row in rows}
    assert status == {"alice": "pass", "bob": "wrong"}, (result.stdout, result.stderr)
    totals = list(csv.DictReader((folder / "grades" / "totals.csv").open(encoding="utf-8")))
    points = {row["student"]: row["points"] for row in totals if row["lesson"] == "(all lessons)"}
    assert points == {"alice": "1", "bob": "0"}
    if os.geteuid() == 0:
        assert (folder / "grades" / "totals.csv").stat().st_uid == NOBODY  # written by the teacher, not by root


@pytest.mark.parametrize("refused", ["the sandbox", "its locked user namespace"])
def test_a_teacher_refused_user_namespaces_is_told_what_allows_them(monkeypatch, refused):
    """Where the kernel refuses a teacher who is not root bwrap's user namespace (for the sandbox, or for its
    locked inner one), ``unavailable`` gives bwrap's complaint, the switches that allow it and the guide's section."""
    complaint = "bwrap: setting up uid map: Permission denied"
    results = iter([(1, complaint)] if refused == "the sandbox" else [(0, ""), (1, complaint)])

    def run(words, **_):
        status, stderr = next(results)
        return subprocess.CompletedProcess(words, status, "", stderr + "\n")

    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(sandbox.subprocess, "run", run)
    reason = sandbox.unavailable() or ""
    section = "A teacher who is not root"
    assert f"**{section}.**" in (checker.course_root() / "docs" / "teaching.md").read_text(encoding="utf-8")
    for needed in (complaint, "kernel.unprivileged_userns_clone=1", "user.max_user_namespaces", section,
                   "bwrap-userns-restrict", "kernel.apparmor_restrict_unprivileged_userns=0"):  # fmt: skip
        assert needed in reason, reason
