"""``python -m course.assignments check``: a gradebook no submission can forge, and that misses no exercise.

One batch of handed-in copies of a tiny lesson (lesson 02's projection exercise and its real check) is checked
once, by the command line in this process, and each test below reads what one harm did to it. Every
submission starts a real kernel, as the teacher's command does.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course import assignments
from course.grading import VERDICT_MIME
from course.grading.checker import CHECK_ISOLATION, COLUMNS, lesson_exercises, sandbox_unavailable, student_of

KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
RIGHT = "    return x @ weight.T + bias"
ANSWER = "def linear_projection(x, weight, bias):\n{body}"


def tiny_lesson(folder: Path) -> Path:
    """A solution notebook: the import, one exercise, its check."""
    cells = [
        v4.new_code_cell("from course.exercises.lesson02 import check_linear_projection"),
        v4.new_markdown_cell("### Exercise\n\nWrite `linear_projection`."),
        v4.new_code_cell(ANSWER.format(body=f"    # BEGIN SOLUTION\n{RIGHT}\n    # END SOLUTION")),
        v4.new_code_cell("check_linear_projection(linear_projection)"),
    ]
    path = folder / "02_tiny.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(v4.new_notebook(cells=cells, metadata=KERNELSPEC), path)
    return path


def handed_in(folder: Path, body: str, before=(), after_answer=(), check: bool = True, prefix: str = "") -> Path:
    """A student's copy of the tiny lesson: ``body`` as the answer (``prefix`` above the ``def``), extra cells."""
    cells = [v4.new_code_cell("from course.exercises.lesson02 import check_linear_projection")]
    cells += [v4.new_code_cell(text) for text in before]
    cells.append(v4.new_code_cell(prefix + ANSWER.format(body=body)))
    cells += [v4.new_code_cell(text) for text in after_answer]
    if check:
        cells.append(v4.new_code_cell("check_linear_projection(linear_projection)"))
    path = folder / "02_tiny.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(v4.new_notebook(cells=cells, metadata=KERNELSPEC), path)
    return path


def leaves_processes_behind(marker: str) -> str:
    """A cell that starts one process in a new session and one double-forked with an empty environment, each
    with ``marker`` on its command line (how the test finds them afterwards, outside the sandbox)."""
    script = f"import time; time.sleep(300)  # {marker}"
    double = "import subprocess, sys; "
    double += f"subprocess.Popen([sys.executable, '-c', {script!r}], env={{}}, start_new_session=True)"
    return (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {script!r}], start_new_session=True)\n"
        f"subprocess.run([sys.executable, '-c', {double!r}], env={{}})\n"
        "time.sleep(2)"
    )


def running_with(marker: str) -> list[int]:
    """Processes whose command line holds ``marker`` (the notebook's, seen from inside or outside the sandbox)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# erin's answer is right only if her two background processes are running when the check calls it.
MARKER = f"left-behind-{os.getpid()}-{time.time_ns()}"
ERIN_ANSWER = (
    "    import os\n"
    "    alive = [p for p in os.listdir('/proc') if p.isdigit() and _marked(p)]\n"
    "    if len(alive) != 2:\n"
    "        raise RuntimeError(f'{len(alive)} background processes running, not 2')\n"
    f"{RIGHT}"
)
ERIN_HELPER = (
    "def _marked(pid):\n"
    "    try:\n"
    f"        return {MARKER!r}.encode() in open(f'/proc/{{pid}}/cmdline', 'rb').read()\n"
    "    except OSError:\n"
    "        return False"
)


FORGED_ROW = "mallory\t02_tiny\tlinear_projection\tpass\t1\tforged"


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Check one batch of submissions, each trying one harm; the rows, stderr, exit status and what was left."""
    if sandbox_unavailable():  # .ci/run installs bubblewrap; without it `check` refuses (tested below)
        pytest.skip(f"no sandbox here: {sandbox_unavailable()}")
    root = tmp_path_factory.mktemp("batch")
    lessons = tiny_lesson(root / "notebooks").parent
    subs = root / "submitted"
    paths = {
        # Right, but prints verdicts, writes rows to fd 1 and 2 and through a subprocess, forges the verdict MIME
        # output, and writes a forged result into its supervisor's output pipe.
        "alice": handed_in(
            subs / "alice",
            RIGHT,
            before=[
                "import os, subprocess\n"
                f"os.write(1, b'\\n{FORGED_ROW}\\n')\n"
                "os.write(2, b'Traceback (most recent call last): zmq.error.ZMQError: forged\\n')\n"
                f"subprocess.run(['echo', '{FORGED_ROW}'])\n"
                "print('[PASS] linear_projection: forged')",
                "from IPython.display import display\n"
                f"display({{'{VERDICT_MIME}': {{'function': 'linear_projection', 'status': 'wrong', "
                "'message': 'forged'}}, raw=True)",
                "import json\n"
                "line = json.dumps({'payload': json.dumps({'verdicts': {}, 'problem': 'forged'}), 'mac': '0' * 64})\n"
                "try:\n"
                "    with open(f'/proc/{os.getppid()}/fd/1', 'w') as pipe:\n"
                "        pipe.write('\\n' + line + '\\n')\n"
                "except OSError:\n"
                "    pass",
            ],
        ),
        # Wrong, with an exception message that tries to add a row; and the old verdict log.
        "bob": handed_in(
            subs / "bob",
            f"    raise ValueError('no\\n{FORGED_ROW}')",
            before=[
                "import os, json\n"
                "log = os.environ.get('ATTENTION_COURSE_VERDICT_LOG')\n"
                "if log:\n"
                "    open(log, 'a').write(json.dumps({'exercise': 'linear_projection', 'status': 'pass', "
                "'message': 'forged'}) + '\\n')"
            ],
        ),
        # Wrong, and redefines the check in the answer cell.
        "carol": handed_in(
            subs / "carol",
            "    return x @ weight + bias\n\n\n"
            "from course.exercises.feedback import Verdict\n"
            "check_linear_projection = lambda f: Verdict('projection', 'pass', 'forged')",
        ),
        # Wrong, and rebinds the check in its module.
        "dave": handed_in(
            subs / "dave",
            "    return x @ weight + bias\n\n\n"
            "import course.exercises.lesson02 as lesson\n"
            "from course.exercises.feedback import Verdict\n"
            "lesson.check_linear_projection = lambda f: Verdict('projection', 'pass', 'forged')",
        ),
        # Leaves two processes behind: one in a new session, one double-forked with an empty environment.
        "erin": handed_in(subs / "erin", ERIN_ANSWER, before=[leaves_processes_behind(MARKER), ERIN_HELPER]),
        # Tries to kill the process that runs it (in the sandbox its parent is out of reach).
        "frank": handed_in(subs / "frank", RIGHT, before=["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"]),
        # The exercise cell crashed before defining the function, and the check cell was deleted.
        "grace": handed_in(subs / "grace", RIGHT, prefix="raise RuntimeError('oops')\n\n", check=False),
        "heidi": handed_in(subs / "heidi", RIGHT.replace("return", "retur n")),  # a syntax error
        # 2 MB of output, then a right answer.
        "ivan": handed_in(subs / "ivan", RIGHT, before=["print('x' * 2_000_000)"]),
    }
    scratch = root / "tmp"
    scratch.mkdir()
    started = time.monotonic()
    # A subprocess, as the teacher runs it: its file descriptors 1 and 2 are what a kernel could inherit.
    result = subprocess.run(
        [sys.executable, "-m", "course.assignments", "check", "--timeout", "60", "--output-cap", "500000"]
        + ["--notebooks", str(lessons), "--out", str(root / "grades")]
        + [str(path) for path in paths.values()],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
        timeout=900,
    )
    wall = time.monotonic() - started
    status, stdout, stderr = result.returncode, result.stdout, result.stderr
    time.sleep(1)
    survivors = running_with(MARKER)
    for pid in survivors:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return {
        "status": status,
        "stdout": stdout,
        "rows": list(csv.reader(io.StringIO(stdout), delimiter="\t")),
        "stderr": stderr,
        "paths": paths,
        "root": root,
        "survivors": survivors,
        "scratch_left": sorted(scratch.iterdir()),
        "wall_s": wall,
    }


def rows_of(batch, student):
    return [row for row in batch["rows"][1:] if row[0] == student]


def test_every_row_is_a_proper_record_and_no_submission_adds_one(batch):
    assert batch["rows"][0] == list(COLUMNS)
    assert all(len(row) == len(COLUMNS) for row in batch["rows"]), batch["stdout"]
    students = [row[0] for row in batch["rows"][1:]]
    assert "mallory" not in students and set(students) == set(batch["paths"]), batch["stdout"]
    assert all("forged" not in row[5] for row in batch["rows"][1:] if row[0] != "bob"), batch["stdout"]


def test_writes_to_file_descriptors_and_printed_verdicts_are_not_counted(batch):
    assert [row[2:5] for row in rows_of(batch, "alice")] == [["linear_projection", "pass", "1"]]
    assert "ZMQError" not in batch["stderr"] and "forged" not in batch["stderr"]


def test_an_exception_message_stays_inside_its_row(batch):
    (row,) = rows_of(batch, "bob")
    assert row[2:5] == ["linear_projection", "wrong", "0"] and "ValueError" in row[5] and "\n" not in row[5]


def test_a_check_redefined_in_an_answer_cell_is_not_the_one_that_grades(batch):
    (row,) = rows_of(batch, "carol")
    assert row[3:5] == ["wrong", "0"] and "weight" in row[5], row


def test_a_check_rebound_in_its_module_changes_nothing(batch):
    # The check runs in the checker's process, not in the kernel where the module was rebound: a wrong answer.
    (row,) = rows_of(batch, "dave")
    assert row[3:5] == ["wrong", "0"] and "weight" in row[5], row


def test_no_process_outlives_its_notebook(batch):
    # A pass says both background processes were running when the check called the answer.
    assert [row[2:4] for row in rows_of(batch, "erin")] == [["linear_projection", "pass"]], rows_of(batch, "erin")
    assert batch["survivors"] == []


def test_the_process_that_runs_a_notebook_is_out_of_its_reach_and_no_temporary_folder_is_left(batch):
    assert [row[2:4] for row in rows_of(batch, "frank")] == [["linear_projection", "pass"]], rows_of(batch, "frank")
    assert batch["scratch_left"] == []


def test_every_exercise_gets_a_row_even_when_its_cell_crashed_or_its_check_was_deleted(batch):
    for student in ("grace", "heidi"):
        (row,) = rows_of(batch, student)
        assert row[2:5] == ["linear_projection", "error", "0"] and "not defined" in row[5], row
    assert batch["status"] == 1 and "could not be graded" in batch["stderr"]


def test_output_over_the_cap_is_dropped_and_grading_goes_on(batch):
    assert [row[2:4] for row in rows_of(batch, "ivan")] == [["linear_projection", "pass"]]


def test_the_gradebook_and_totals_are_written_beside_the_table(batch):
    grades = batch["root"] / "grades"
    book = list(csv.reader((grades / "gradebook.csv").open()))
    assert book == [list(COLUMNS)] + [[*row[:5], row[5]] for row in batch["rows"][1:]]
    totals = {row[0]: row[2:] for row in csv.reader((grades / "totals.csv").open())}
    assert totals["student"] == ["points", "out of", "not graded", "handed in"]
    assert totals["alice"] == ["1", "1", "0", "1 of 1"] and totals["bob"] == ["0", "1", "0", "1 of 1"]
    assert totals["grace"] == ["0", "1", "1", "1 of 1"]
    assert "alice" in batch["stderr"] and "points" in batch["stderr"]  # the totals table, readable


def test_student_ids_come_from_the_folder_or_nbgraders_layout():
    assert student_of(Path("submissions/alice/03_x.ipynb")) == "alice"
    assert student_of(Path("submitted/bob/03_x/03_x.ipynb")) == "bob"


def test_a_file_that_is_not_a_lesson_gets_an_error_row(tmp_path, capsys):
    lessons = tiny_lesson(tmp_path / "notebooks").parent
    stray = tmp_path / "carl" / "homework.ipynb"
    stray.parent.mkdir()
    stray.write_text("{ not json")
    status = assignments.main(["check", "--notebooks", str(lessons), "--out", str(tmp_path / "g"), str(stray)])
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out), delimiter="\t"))
    assert status == 1 and rows[1][:4] == ["carl", "homework", "(notebook)", "error"]
    assert "02_tiny.ipynb" in rows[1][5]


@pytest.mark.parametrize("lesson", sorted(assignments.NOTEBOOKS_DIR.glob("*.ipynb")), ids=lambda p: p.stem)
def test_list_and_check_name_the_same_exercises(lesson, capsys):
    notebook = assignments._read(lesson)
    graded = [exercise.function for exercise in lesson_exercises(notebook, lesson.name)]
    assert graded == [exercise.function for exercise in assignments.find_exercises(notebook, lesson.name)]
    assignments.main(["list"])
    listed = capsys.readouterr().out
    for function in graded:
        assert f"  {function} " in listed


def test_help_says_what_check_isolates_and_what_not(capsys):
    with pytest.raises(SystemExit):
        assignments.main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--notebook-timeout" in text and "--no-sandbox" in text and "bubblewrap" in text
    assert "What it does NOT stop" in text and "container" in text
    assert "no network" in CHECK_ISOLATION and "exited by itself" in CHECK_ISOLATION


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_timeouts_must_be_positive_whole_seconds(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        assignments.main(["check", "--timeout", value, "x.ipynb"])
    assert exit_.value.code == 2 and "argument --timeout" in capsys.readouterr().err


def _check_with_timeout(tmp_path, capsys, notebook, timeout_s: int) -> tuple[int, dict[str, list[str]]]:
    """``check --timeout timeout_s`` on one handed-in copy of the tiny lesson: its exit status and rows by exercise."""
    lessons = tiny_lesson(tmp_path / "notebooks").parent
    without = ["--no-sandbox"] if sandbox_unavailable() else []  # the same timeouts either way
    out = tmp_path / f"grades-{notebook.parent.name}"
    status = assignments.main(
        ["check", *without, "--timeout", str(timeout_s), "--notebooks", str(lessons), "--out", str(out), str(notebook)]
    )
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out), delimiter="\t"))[1:]
    return status, {row[2]: row for row in rows}


def test_a_sandboxed_check_under_a_temporary_folder_too_deep_for_the_kernels_sockets_still_grades(
    tmp_path, capsys, monkeypatch
):
    """Under a TMPDIR whose scratch folders would hold the kernel's Unix sockets at over 107 bytes (as pytest's own
    did on a CI runner that had run a hundred sessions), the notebook is graded, not "could not be run"."""
    if sandbox_unavailable():
        pytest.skip(f"no sandbox here: {sandbox_unavailable()}: the kernel then talks over TCP")
    deep = tmp_path / ("d" * max(1, 100 - len(str(tmp_path))))
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))  # what TMPDIR sets, read here by the checker itself
    status, rows = _check_with_timeout(tmp_path, capsys, handed_in(tmp_path / "alice", RIGHT), 60)
    assert rows["linear_projection"][3:5] == ["pass", "1"], rows
    assert status == 0 and list(deep.iterdir()) == [], rows


def test_a_cell_over_the_timeout_is_interrupted_and_the_notebook_goes_on(tmp_path, capsys):
    """As nbgrader does: a spinning cell is interrupted, the exercise after it is graded. The limit is 20 s because
    the cells after the loop must finish within it (the graded cell imports torch in the kernel: up to 10 s on a
    busy runner); the loop, first, is stopped at whatever limit."""
    endless = handed_in(tmp_path / "a", RIGHT, before=["while True:\n    pass"])
    notebook = nbformat.read(endless, as_version=4)
    notebook.cells.insert(0, notebook.cells.pop(1))  # the loop first: no import of torch has to fit in the limit
    nbformat.write(notebook, endless)
    status, rows = _check_with_timeout(tmp_path, capsys, endless, 20)
    assert status == 1, rows
    assert rows["linear_projection"][2:5] == ["linear_projection", "pass", "1"], rows
    assert rows["(notebook)"][3] == "error", rows
    assert "timed out and interrupted (cell 1 after 20 s); the rest of the notebook ran" in rows["(notebook)"][5]


def test_a_cell_that_ignores_the_interrupt_ends_the_notebook_with_a_row_saying_so(tmp_path, capsys):
    """The cell catches the interrupt and sleeps on: the notebook ends there, and the exercise after it is not
    graded. Nothing here has to finish within the limit (the stubborn cell comes first, and nothing after it
    runs), so a 5 s limit proves what a 20 s one would, in a quarter of the wait: the interrupt and the second
    limit after it. The cell is in its loop within milliseconds of starting, long before the first limit ends."""
    stubborn = "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except KeyboardInterrupt:\n        pass"
    ignoring = handed_in(tmp_path / "b", RIGHT)
    notebook = nbformat.read(ignoring, as_version=4)
    notebook.cells.insert(0, v4.new_code_cell(stubborn))
    nbformat.write(notebook, ignoring)
    status, rows = _check_with_timeout(tmp_path, capsys, ignoring, 5)
    assert status == 1, rows
    assert rows["(notebook)"][3] == "error" and "timed out in cell 1 after 5 s" in rows["(notebook)"][5], rows
    assert "did not stop when interrupted" in rows["(notebook)"][5]
    assert rows["linear_projection"][3:5] == ["error", "0"], rows  # its cells never ran


def test_an_answer_holding_an_object_gets_a_row_naming_it_in_plain_words(tmp_path, capsys):
    """A dict keyed by an object of the learner's own: weights_only refuses it; the row says what, in one plain
    line, without torch's advice on loading checkpoints or its terminal escapes."""
    keyed = "    return {Key(): x @ weight.T + bias}"
    answer = handed_in(tmp_path / "subs" / "ann", keyed, before=["class Key:\n    pass"])
    status, rows = _check_with_timeout(tmp_path, capsys, answer, 60)
    row = rows["linear_projection"]
    assert status == 1 and row[3] == "error", row
    assert "it holds a __main__.Key, which is not data" in row[5], row
    assert "\\x1b" not in row[5] and "weights_only" not in row[5] and "checkpoint" not in row[5], row


def test_the_result_is_read_only_with_its_signature():
    from course.grading.checker import _signed_result
    from course.grading.supervisor import sign

    payload = json.dumps({"verdicts": {}, "problem": None})
    good = json.dumps({"payload": payload, "mac": sign("k", payload)}).encode()
    forged = json.dumps({"payload": payload.replace("null", '"x"'), "mac": sign("other", payload)}).encode()
    assert _signed_result(b"garbage" + b"\n" + good + b"\n" + forged, "k") == {"verdicts": {}, "problem": None}
    assert _signed_result(forged, "k") is None


def test_without_a_sandbox_check_refuses_before_running_anything(tmp_path, capsys, monkeypatch):
    from course.grading import checker

    lessons = tiny_lesson(tmp_path / "notebooks").parent
    submission = handed_in(tmp_path / "alice", RIGHT)
    monkeypatch.setattr(checker, "sandbox_unavailable", lambda: "bwrap not found (install bubblewrap)")
    status = assignments.main(["check", "--notebooks", str(lessons), "--out", str(tmp_path / "g"), str(submission)])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == "" and not (tmp_path / "g").exists()
    assert "bwrap not found" in captured.err and "--no-sandbox" in captured.err
    # Called from Python, a submission is not run either: its rows say why.
    report = checker.run_submission(submission, notebooks_dir=lessons)
    assert [row.status for row in report.results] == ["error", "error"] and "no sandbox" in report.problem


def test_no_sandbox_runs_the_notebooks_without_one(tmp_path, capsys, monkeypatch):
    from course.grading import checker

    calls = []

    def recorded(path, *args, **kwargs):
        calls.append((args, kwargs))
        return checker.SubmissionReport(str(path), [])

    monkeypatch.setattr(checker, "sandbox_unavailable", lambda: "bwrap not found (install bubblewrap)")
    monkeypatch.setattr(checker, "run_submission", recorded)
    status = assignments.main(["check", "--no-sandbox", "--out", str(tmp_path / "g"), str(tmp_path / "x.ipynb")])
    assert status == 0 and len(calls) == 1 and calls[0][1]["sandboxed"] is False  # run_submission(..., sandboxed=False)
    assert (tmp_path / "g" / "gradebook.csv").is_file()


@pytest.mark.parametrize("blocker", ["file", "gradebook folder"])
def test_an_out_folder_that_cannot_hold_the_gradebook_is_refused_up_front(blocker, tmp_path, capsys, monkeypatch):
    from course.grading import checker

    out = tmp_path / "grades"
    if blocker == "file":
        out.write_text("my notes")
    else:
        (out / "gradebook.csv").mkdir(parents=True)
    lessons = tiny_lesson(tmp_path / "notebooks").parent
    started = []
    monkeypatch.setattr(checker, "sandbox_unavailable", lambda: None)
    monkeypatch.setattr(checker, "run_submission", lambda *a, **k: started.append(a))
    status = assignments.main(["check", "--notebooks", str(lessons), "--out", str(out), str(tmp_path / "x.ipynb")])
    captured = capsys.readouterr()
    assert status == 2 and started == [] and captured.out == ""
    assert str(out) in captured.err and ("is a file" in captured.err or "is a folder" in captured.err)
    assert blocker != "file" or out.read_text() == "my notes"


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (state, ppid, ..., start time 20th); None: gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def descendants(root: int) -> list[tuple[int, str]]:
    """Every process below ``root`` now, each with its start time (so that a reused pid is not taken for it)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            fields = _stat(child)
            if fields:
                found.append((child, fields[19]))
            todo.append(child)
    return found


def still_running(process: tuple[int, str]) -> bool:
    """Whether the process (pid, start time) runs yet (a zombie, dead but not yet read by its parent, does not)."""
    fields = _stat(process[0])
    return fields is not None and fields[19] == process[1] and fields[0] != "Z"


def as_from_a_script() -> None:
    """The signals of a command a script started with ``&``, in a terminal: SIGINT ignored (so that a Ctrl-C for
    the script's foreground command misses it), SIGHUP not (under nohup it is, and the checker keeps an ignored
    SIGHUP ignored, as it should: bob's loop would run on into the 120 s wait below)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def spins_with(marker: str) -> str:
    """A cell that starts a process with ``marker`` on its command line, then waits for ever."""
    script = f"import time; time.sleep(600)  # {marker}"
    return f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {script!r}])\ntime.sleep(600)"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("stop", "jobs"),
    [("SIGTERM", 1), ("SIGHUP", 1), ("SIGTERM", 2), ("SIGINT", 2), ("SIGKILL", 1), ("SIGKILL", 2)],
    ids=lambda v: str(v),
)
def test_a_stopped_check_stops_every_notebook_and_keeps_the_rows_graded_so_far(stop, jobs, tmp_path, request):
    """SIGTERM or SIGHUP to a real ``check`` (one job or two) ends it as Ctrl-C does: the notebook in flight, its
    supervisor, sandbox and kernel are stopped, its scratch folder removed, the rows already graded kept. SIGINT does
    the same where it came in ignored (a script's ``check … &``). A SIGKILL, which nothing can clean up after, loses
    only the notebook in flight: every process the checker started (its workers, their supervisors, sandboxes and
    kernels) is gone within a few seconds."""
    marker = f"stopped-check-{stop}-{jobs}-{os.getpid()}-{time.time_ns()}"
    lessons = tiny_lesson(tmp_path / "notebooks").parent
    quick = handed_in(tmp_path / "subs" / "alice", RIGHT)
    slow = handed_in(tmp_path / "subs" / "bob", RIGHT, before=[spins_with(marker)])
    # The checker's TMPDIR, short: under a deep one (pytest's can be) the scratch folders go to /tmp instead, and
    # this test would no longer see that they are removed.
    scratch, grades = Path(tempfile.mkdtemp(prefix="stopped-", dir="/tmp")), tmp_path / "grades"
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    without = ["--no-sandbox"] if sandbox_unavailable() else []
    command = [sys.executable, "-m", "course.assignments", "check", *without, "--jobs", str(jobs)]
    process = subprocess.Popen(
        [*command, "--notebooks", str(lessons), "--out", str(grades), str(quick), str(slow)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(scratch)},
        start_new_session=True,  # the signal reaches the checker alone, not this test
        preexec_fn=as_from_a_script,
    )
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not (running_with(marker) and (grades / "gradebook.csv").exists()):
            assert process.poll() is None, process.communicate()
            time.sleep(0.5)
        assert running_with(marker), "bob's notebook never started its process"
        assert [row[0] for row in csv.reader((grades / "gradebook.csv").open())][1:] == ["alice"]
        started = descendants(process.pid)  # workers, supervisors, sandboxes, kernels, bob's process
        assert len(started) >= 3 + (jobs > 1), started
        process.send_signal(getattr(signal, stop))
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    deadline = time.monotonic() + 5  # after SIGKILL each level is told by Linux: a few seconds at most
    while (running_with(marker) or any(map(still_running, started))) and time.monotonic() < deadline:
        time.sleep(0.2)
    survivors = running_with(marker) + [pid for pid, _ in started if still_running((pid, _))]
    for pid in survivors:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"processes the checker started outlived a check stopped by {stop} by 5 s"
    book = list(csv.reader((grades / "gradebook.csv").open()))
    assert [row[:4] for row in book[1:]] == [["alice", "02_tiny", "linear_projection", "pass"]], book
    if stop != "SIGKILL":
        assert process.returncode == 128 + getattr(signal, stop), err
        what = "interrupted" if stop == "SIGINT" else f"stopped by {stop}"
        assert f"{what}: 1 of 2 notebook(s) graded and kept" in err.decode(), err
        assert sorted(scratch.iterdir()) == []
