"""``check`` runs each submission in bubblewrap's sandbox: what a hostile notebook tries, and that none of it works.

One batch, checked once by the command line against a copy of the course (so that a sandbox that failed could
only damage the copy), holds three students:

- mallory (three wrong answers) reads the signing key out of its supervisor's memory and writes signed PASS
  results into the supervisor's output, writes a row into the checker's own output through ``/proc``, kills
  the supervisor, and forges verdicts inside the kernel: ``course.grading._report`` patched, ``graded``
  patched, a ``post_run_cell`` hook that shows a PASS;
- trudy (a right answer, made to raise a list of what worked) allocates 2 GB, writes outside the sandbox,
  appends a check that always passes to ``course/exercises/lesson02.py``, reads the solution notebook, looks
  for another student's notebook in the processes' command lines, connects to a server on the teacher's
  loopback, and writes a file to ``/tmp``;
- victor, checked after trudy, hands in a wrong answer: it must stay wrong.

Each submission starts a real kernel, as the teacher's command does. The test skips where bubblewrap cannot
make a sandbox (``.ci/run`` installs it).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course.grading import checker, sandbox

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"),
]

KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
IMPORT = "from course.exercises.lesson02 import check_linear_projection"
RIGHT = "x @ weight.T + bias"
WRONG = "x @ weight + bias"
FORGED_ROW = "mallory\t03_three\tproj_report\tpass\t1\tforged"
# Three exercises graded by the same real check: one per in-kernel forgery.
THREE = ("proj_report", "proj_graded", "proj_hook")


def solution(body: str, function: str) -> str:
    return f"def {function}(x, weight, bias):\n    # BEGIN SOLUTION\n    return {body}\n    # END SOLUTION"


def write(path: Path, cells: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell(text) for text in cells], metadata=KERNELSPEC), path)
    return path


def lessons(folder: Path) -> Path:
    write(
        folder / "02_tiny.ipynb",
        [IMPORT, solution(RIGHT, "linear_projection"), "check_linear_projection(linear_projection)"],
    )
    cells = [IMPORT]
    for function in THREE:
        cells += [solution(RIGHT, function), f"check_linear_projection({function})"]
    write(folder / "03_three.ipynb", cells)
    return folder


PROCESSES = """\
import os


def processes():
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                yield int(name), open(f"/proc/{name}/cmdline", "rb").read()
            except OSError:
                pass
"""

STEAL_THE_KEY = """\
import hashlib, hmac, json, re, signal


def keys_in(pid):
    found = set()
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
            for line in maps:
                span, permissions = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if "rw" not in permissions or end - start > 2**28:
                    continue
                try:
                    memory.seek(start)
                    found.update(re.findall(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])", memory.read(end - start)))
                except (OSError, ValueError, OverflowError):
                    continue
    except OSError:
        pass
    return found


forged = {"status": "pass", "message": "forged"}
verdicts = {index: {"function": function, **forged} for index, function in __GRADED__.items()}
payload = json.dumps({"verdicts": verdicts, "problem": None}, sort_keys=True)
for pid, command in processes():
    if b"course.assignments" in command:  # the checker: a row of its own in the teacher's table
        try:
            with open(f"/proc/{pid}/fd/1", "w") as out:
                out.write("\\n__ROW__\\n")
        except OSError:
            pass
for pid, command in processes():
    if b"course.grading.supervisor" in command:
        lines = [json.dumps({"payload": payload, "mac": hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()})
                 for key in keys_in(pid)]
        try:
            with open(f"/proc/{pid}/fd/1", "w") as out:
                out.write("\\n" + "\\n".join(lines) + "\\n")
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""

PATCH_REPORT = """\
import course.grading as grading

_genuine_report = grading._report
grading._report = lambda function, check, status, message: _genuine_report(function, check, "pass", "forged")
"""

PATCH_GRADED = """\
import course.grading as grading
from IPython.display import display
from course.exercises.feedback import Verdict


def forged_graded(check, function):
    entry = {"function": function, "check": check.__name__, "status": "pass", "message": "forged"}
    display({grading.VERDICT_MIME: entry, "text/plain": "forged"}, raw=True)
    return Verdict("projection", "pass", "forged")


grading.graded = forged_graded
"""

HOOK = """\
from IPython import get_ipython
from IPython.display import display
from course.grading import VERDICT_MIME


def forge_after_each_cell(result):
    display({VERDICT_MIME: {"function": "proj_hook", "status": "pass", "message": "forged"}}, raw=True)


get_ipython().events.register("post_run_cell", forge_after_each_cell)
"""

ESCAPES = """\
import socket

ESCAPED = []


def attempt(what, action):
    try:
        action()
    except BaseException:  # MemoryError, OSError, LookupError: it did not work
        return
    ESCAPED.append(what)


def allocate():
    block = bytearray(2 * 2**30)
    block[:: 2**20] = b"x" * len(block[:: 2**20])


def append_forged_check():
    import course.exercises.lesson02 as lesson

    with open(lesson.__file__, "a") as module:
        module.write(FORGED_CHECK)


def another_students_notebook():
    for _, command in processes():
        for word in command.split(b"\\0"):
            if word.endswith(b".ipynb") and b"/trudy/" not in word:
                open(word, "rb").read()
                return
    raise LookupError("none seen")


attempt("allocated 2 GB", allocate)
attempt("wrote outside the sandbox", lambda: open(OUTSIDE + "/written-by-trudy", "w").write("x"))
attempt("appended a check to the course", append_forged_check)
attempt("read the solution notebook", lambda: exec("".join(json.load(open(SOLUTION))["cells"][1]["source"])))
attempt("read another student's notebook", another_students_notebook)
attempt("reached the teacher's loopback", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=3))
open("/tmp/" + TMP_NAME, "w").write("a private /tmp: this must not appear in the machine's /tmp")
"""

FORGED_CHECK = (
    "\n\ndef check_linear_projection(function):  # appended by a submission\n"
    "    from course.exercises.feedback import Verdict\n\n"
    "    return Verdict('projection', 'pass', 'forged')\n"
)


def digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    root = tmp_path_factory.mktemp("sandbox")
    course_copy = root / "course-copy"
    for package in ("helpers", "course", "data"):
        shutil.copytree(
            checker.course_root() / package, course_copy / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    notebooks = lessons(root / "notebooks")
    outside = root / "outside"
    outside.mkdir()
    tmp_name = f"check-sandbox-{os.getpid()}-{root.name}"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)

    three = nbformat.read(notebooks / "03_three.ipynb", as_version=4)
    mallory_cells = [IMPORT, PROCESSES]
    for function, forgery in zip(THREE, (PATCH_REPORT, PATCH_GRADED, HOOK), strict=True):
        mallory_cells += [
            f"{forgery}\n\ndef {function}(x, weight, bias):\n    return {WRONG}",
            f"check_linear_projection({function})",
        ]
    mallory_cells.insert(2, "pass  # the attack's cell, written below once it knows the graded cells' places")
    mallory_draft = write(root / "draft" / "03_three.ipynb", mallory_cells)
    exercises = checker.lesson_exercises(three, "03_three.ipynb")
    _, graded, _ = checker.grading_notebook(nbformat.read(mallory_draft, as_version=4), exercises)
    graded = {str(index): exercise.function for index, exercise in graded.items()}
    mallory_cells[2] = STEAL_THE_KEY.replace("__GRADED__", repr(graded)).replace(
        "__ROW__", FORGED_ROW.replace("\t", "\\t")
    )
    constants = {
        "OUTSIDE": str(outside),
        "SOLUTION": str(notebooks / "02_tiny.ipynb"),
        "PORT": listener.getsockname()[1],
        "TMP_NAME": tmp_name,
        "FORGED_CHECK": FORGED_CHECK,
    }
    setup = "import json\n" + "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    trudy_answer = (
        "def linear_projection(x, weight, bias):\n"
        "    if ESCAPED:\n"
        "        raise RuntimeError('escaped the sandbox: ' + '; '.join(ESCAPED))\n"
        f"    return {RIGHT}"
    )
    subs = root / "submitted"
    paths = [
        write(subs / "mallory" / "03_three.ipynb", mallory_cells),
        write(
            subs / "trudy" / "02_tiny.ipynb",
            [IMPORT, PROCESSES, setup + ESCAPES, trudy_answer, "check_linear_projection(linear_projection)"],
        ),
        write(
            subs / "victor" / "02_tiny.ipynb",
            [
                IMPORT,
                f"def linear_projection(x, weight, bias):\n    return {WRONG}",
                "check_linear_projection(linear_projection)",
            ],
        ),
    ]
    before = digest(course_copy)
    scratch = root / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(course_copy), "TMPDIR": str(scratch)}
    result = subprocess.run(
        [
            *(sys.executable, "-m", "course.assignments", "check", "--timeout", "120", "--memory", "1500"),
            *("--notebooks", str(notebooks), "--out", str(root / "grades"), *map(str, paths)),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=900,
    )
    connections = 0
    try:
        while True:
            listener.accept()[0].close()
            connections += 1
    except OSError:
        pass
    listener.close()
    machine_tmp = Path("/tmp") / tmp_name
    leaked_tmp = machine_tmp.exists()
    if leaked_tmp:
        machine_tmp.unlink()
    return {
        "status": result.returncode,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "rows": list(csv.reader(io.StringIO(result.stdout), delimiter="\t")),
        "course_changed": [name for name, sha in digest(course_copy).items() if before.get(name) != sha]
        + sorted(set(before) - set(digest(course_copy))),
        "outside": sorted(p.name for p in outside.iterdir()),
        "connections": connections,
        "leaked_tmp": leaked_tmp,
        "scratch_left": sorted(scratch.iterdir()),
    }


def rows_of(attacked, student):
    return [row for row in attacked["rows"][1:] if row and row[0] == student]


def test_the_key_cannot_be_stolen_nor_rows_written_into_the_checkers_output(attacked):
    students = {row[0] for row in attacked["rows"][1:] if row}
    assert students == {"mallory", "trudy", "victor"}, attacked["stdout"] + attacked["stderr"]
    assert all(len(row) == 6 for row in attacked["rows"]), attacked["stdout"]
    assert all(row[2] != "(notebook)" for row in rows_of(attacked, "mallory")), rows_of(attacked, "mallory")


def test_patching_report_or_graded_in_the_kernel_does_not_forge_a_pass(attacked):
    verdicts = {row[2]: row[3:6] for row in rows_of(attacked, "mallory")}
    assert verdicts["proj_report"][:2] == ["wrong", "0"], verdicts
    assert verdicts["proj_graded"][:2] == ["wrong", "0"], verdicts


def test_a_post_run_cell_hook_cannot_forge_a_pass(attacked):
    # The verdict is computed outside the kernel: a hook that shows a PASS leaves the wrong answer wrong.
    verdict = {row[2]: row[3:6] for row in rows_of(attacked, "mallory")}["proj_hook"]
    assert verdict[:2] == ["wrong", "0"] and "forged" not in verdict[2], verdict


def test_nothing_a_submission_tries_leaves_the_sandbox(attacked):
    (row,) = rows_of(attacked, "trudy")
    assert row[2:5] == ["linear_projection", "pass", "1"], row  # its message lists what escaped, if anything
    assert attacked["outside"] == [] and attacked["connections"] == 0 and not attacked["leaked_tmp"]
    assert attacked["course_changed"] == []
    assert attacked["scratch_left"] == []


def test_the_next_student_is_graded_by_the_courses_own_checks(attacked):
    (row,) = rows_of(attacked, "victor")
    assert row[2:5] == ["linear_projection", "wrong", "0"] and "forged" not in row[5], row


# --------------------------------------------------------------------------------------------- each job's limits
REPORT_LIMITS = """\
import os, resource, subprocess, time


def limits_seen():
    time.sleep(8)  # both notebooks of the batch are in their sandboxes at once
    # A process of one thread (a kernel has many: unshare(2) refuses those anyway) asks for uid 0 in a new namespace.
    became = subprocess.run(["unshare", "-Ur", "id", "-u"], capture_output=True, text=True)
    unshared = 0 if became.returncode == 0 and became.stdout.strip() == "0" else 1
    size = {folder: os.statvfs(folder).f_blocks * os.statvfs(folder).f_frsize for folder in ("/tmp", "/dev/shm")}
    return (
        f"uid={os.getuid()} nproc={resource.getrlimit(resource.RLIMIT_NPROC)[0]} "
        f"userns={'made' if unshared == 0 else 'refused'} tmp={size['/tmp']} shm={size['/dev/shm']}"
    )
"""


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory):
    """Two notebooks graded at once (``--jobs 2``), each reporting the limits its kernel runs under."""
    root = tmp_path_factory.mktemp("limits")
    notebooks = lessons(root / "notebooks")
    answer = "def linear_projection(x, weight, bias):\n    raise ValueError(limits_seen())"
    cells = [IMPORT, REPORT_LIMITS, answer, "check_linear_projection(linear_projection)"]
    paths = [write(root / "submitted" / student / "02_tiny.ipynb", cells) for student in ("uma", "walt")]
    command = [sys.executable, "-m", "course.assignments", "check", "--jobs", "2", "--timeout", "120"]
    result = subprocess.run(
        [*command, "--notebooks", str(notebooks), "--out", str(root / "grades"), *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=900,
    )
    rows = list(csv.reader(io.StringIO(result.stdout), delimiter="\t"))[1:]
    seen = {}
    for row in rows:
        assert "uid=" in row[5], result.stdout + result.stderr
        seen[row[0]] = dict(word.split("=") for word in row[5].split("ValueError: ")[-1].split())
    return seen


def test_no_notebook_can_make_a_user_namespace_of_its_own(two_jobs):
    assert {limits["userns"] for limits in two_jobs.values()} == {"refused"}, two_jobs


def test_the_sandboxs_memory_folders_have_a_size(two_jobs):
    bound = sandbox.Limits().tmp_bytes
    for limits in two_jobs.values():
        assert 0 < int(limits["tmp"]) <= bound and 0 < int(limits["shm"]) <= bound, limits


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per notebook needs check run as root")
def test_notebooks_graded_at_once_run_as_uids_of_their_own_each_with_its_process_limit(two_jobs):
    uids = {int(limits["uid"]) for limits in two_jobs.values()}
    assert len(uids) == 2 and uids <= set(sandbox.SANDBOX_UIDS), two_jobs
    assert {int(limits["nproc"]) for limits in two_jobs.values()} == {sandbox.Limits().processes}


@pytest.mark.skipif(os.geteuid() != 0, reason="uids are claimed only by check run as root")
def test_a_claimed_uid_is_nobody_elses_while_it_is_held():
    with sandbox.claimed_uid() as first, sandbox.claimed_uid() as second:
        assert first != second and {first, second} <= set(sandbox.SANDBOX_UIDS)
