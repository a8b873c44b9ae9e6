"""``check`` run by a teacher who is not root: the sandbox is then made in an unprivileged user namespace.

A teacher on a shared or university machine has no root, and bubblewrap then needs the kernel to let ordinary
users make user namespaces (docs/teaching.md, section 4: the sysctls ``kernel.unprivileged_userns_clone``,
``user.max_user_namespaces`` and, on Ubuntu 24.04, AppArmor's ``kernel.apparmor_restrict_unprivileged_userns``).
This test grades two students' notebooks as such a teacher: run as root (a container, CI), it runs the checker as
user ``nobody`` (65534) with ``setpriv --reuid``, which changes nothing on the machine (no user is created); run as
an ordinary user, it runs the checker as that user. Where that user cannot make a sandbox, it skips, saying why.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course.grading import checker

pytestmark = pytest.mark.integration

NOBODY = 65534
KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
IMPORT = "from course.exercises.lesson02 import check_linear_projection"
CHECK = "check_linear_projection(linear_projection)"


# Run as the teacher: what would stop the checker, or nothing. The checker starts its workers and kernels with its
# own interpreter, so that interpreter must be one the teacher may run (a Python under /root, mode 0700, is not).
PROBE = """\
import os, sys
from course.grading import sandbox
if not os.access(os.path.realpath(sys.executable), os.X_OK):
    print(f"user {os.geteuid()} may not run {os.path.realpath(sys.executable)} (a folder above it is closed to them)")
else:
    print(sandbox.unavailable() or "")
"""


def notebook(path: Path, body: str) -> Path:
    """A lesson 02 notebook of one exercise whose answer returns ``body``; the answer refuses to run as root, so
    that a pass also says the kernel ran as the teacher, not as root."""
    answer = (
        "import os\n\n\ndef linear_projection(x, weight, bias):\n    # BEGIN SOLUTION\n"
        "    if os.geteuid() == 0:\n        raise RuntimeError('the kernel runs as root')\n"
        f"    return {body}\n    # END SOLUTION"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [v4.new_code_cell(text) for text in (IMPORT, answer, CHECK)]
    nbformat.write(v4.new_notebook(cells=cells, metadata=KERNELSPEC), path)
    return path


def as_teacher(command: list[str]) -> list[str]:
    """``command`` run by a user who is not root: ``nobody`` when this test runs as root, else this user."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): no way to run the checker as another user")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]


@pytest.fixture
def folder():
    """A folder the teacher owns, outside pytest's own (root's, mode 0700, which nobody cannot enter); removed
    afterwards, whoever wrote into it."""
    path = Path(tempfile.mkdtemp(prefix="check-unprivileged-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


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
    probe = subprocess.run(as_teacher([sys.executable, "-c", PROBE]), capture_output=True, text=True, env=env,
                           cwd=folder, timeout=120)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"the course cannot run as a user who is not root here: {probe.stderr.strip()[-300:]}")
    if probe.stdout.strip():
        pytest.skip(f"a user who is not root cannot grade here: {probe.stdout.strip()}")

    result = subprocess.run(
        as_teacher(
            [
                *(sys.executable, "-m", "course.assignments", "check", "--timeout", "120", "--memory", "1500"),
                *("--notebooks", str(lessons), "--out", str(folder / "grades"), str(alice), str(bob)),
            ]
        ),
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
