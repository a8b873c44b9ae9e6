"""nbgrader's kernels in the course's sandbox (course/grading/nbgrader_kernel.py), without starting one.

The term test (test_nbgrader_term.py) grades a student who reads the solutions through the real nbgrader, and
test_nbgrader_remote_verdicts.py one who reaches for the reference answers or forges a verdict; these check what
they rest on, quickly: the template's autograde chain, the kernel manager nbgrader really gets, the command and
environment its kernel would start with, the refusal where no sandbox can be made, the opt-out, which test cells
are graded outside the kernel and what the kernel runs in their place, and the outputs nbgrader scores them by.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute
from traitlets.config import Config

from course.assignments import NOTEBOOKS_DIR, nbgrader_source
from course.grading import GRADING_ENV, nbgrader_kernel, sandbox
from course.grading.nbgrader import CONFIG_TEMPLATE
from course.grading.nbgrader_kernel import NOT_SANDBOXED, SandboxedExecute, SandboxedKernelManager
from course.grading.nbgrader_tests import NOT_PASSED, course_check_cell, verdict_outputs
from course.solution_notebooks import read_notebook

NO_SANDBOX = sandbox.unavailable()


def template_config() -> Config:
    """The configuration the template sets, read as nbgrader reads nbgrader_config.py."""
    config = Config()
    exec(compile(CONFIG_TEMPLATE.read_text(), str(CONFIG_TEMPLATE), "exec"), {"get_config": lambda: config})
    return config


def test_the_template_runs_autograde_with_nbgraders_own_chain_but_the_sandboxed_execute():
    chain = template_config().Autograde.autograde_preprocessors
    default = Autograde.class_traits()["autograde_preprocessors"].default()
    assert Execute in default and SandboxedExecute not in default
    assert len(chain) == len(default)
    for ours, theirs in zip(chain, default, strict=True):
        if theirs is Execute:  # the course's Execute: sandboxed (and under the lesson's timeout)
            assert issubclass(ours, SandboxedExecute), ours
        else:
            assert ours is theirs


def test_nbgrader_gets_the_sandboxed_kernel_manager_with_the_teachers_settings():
    config = Config()
    config.SandboxedKernelManager.memory_mib = 1234
    assert Execute(config=config).kernel_manager_class is not SandboxedKernelManager  # why the subclass exists
    execute = SandboxedExecute(config=config, kernel_name="python3")
    manager = execute.create_kernel_manager()
    assert type(manager) is SandboxedKernelManager
    assert manager.sandboxed is True and manager.memory_mib == 1234


def _pre_start(manager: SandboxedKernelManager, folder: Path) -> tuple[list[str], dict]:
    """The command and launch arguments (cwd, env) the kernel would start with: no process is started."""
    return asyncio.run(manager._async_pre_start_kernel(cwd=str(folder), extra_arguments=["--x=1"]))


@pytest.fixture
def scratch_root(monkeypatch):
    """Where the manager's scratch folders go (tempfile's folder), to see what it leaves behind: a short path, for
    under a deep one (pytest's can be) they would go to /tmp, out of the kernel's sockets' way."""
    root = Path(tempfile.mkdtemp(prefix="scratch-", dir="/tmp"))
    monkeypatch.setattr("tempfile.tempdir", str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_without_a_sandbox_no_kernel_starts_and_the_error_says_how_to_go_on(tmp_path, scratch_root, monkeypatch):
    monkeypatch.setattr(nbgrader_kernel, "sandbox_unavailable", lambda: "bwrap not found (install bubblewrap)")
    manager = SandboxedKernelManager(kernel_name="python3")
    with pytest.raises(sandbox.SandboxUnavailable) as refused:
        asyncio.run(manager.start_kernel(cwd=str(tmp_path)))
    message = str(refused.value)
    assert "bwrap not found" in message and "c.SandboxedKernelManager.sandboxed = False" in message
    assert not manager.has_kernel and list(scratch_root.iterdir()) == []


def test_the_opt_out_runs_the_plain_kernel_and_says_so(tmp_path, scratch_root, caplog):
    manager = SandboxedKernelManager(kernel_name="python3", sandboxed=False)
    manager.log = logging.getLogger("test-opt-out")
    with caplog.at_level(logging.WARNING, logger="test-opt-out"):
        command, kw = _pre_start(manager, tmp_path)
    try:
        assert NOT_SANDBOXED in caplog.text and "WITHOUT" in NOT_SANDBOXED
        assert not any(word.endswith("bwrap") for word in command)
        assert kw["cwd"] == str(tmp_path) and not list(scratch_root.glob("nbgrader-sandbox-*"))
    finally:
        asyncio.run(manager._async_cleanup_resources())


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
def test_the_kernel_would_start_in_the_sandbox_in_a_copy_of_its_folder_with_checks_environment(
    tmp_path, scratch_root, monkeypatch
):
    folder = tmp_path / "autograded" / "eve" / "03"
    folder.mkdir(parents=True)
    (folder / "03.ipynb").write_text("{}")
    (folder / "solutions.ipynb").symlink_to("/etc/hostname")  # a link a submission might hold
    monkeypatch.setenv("TEACHERS_TOKEN", "secret")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    manager = SandboxedKernelManager(kernel_name="python3", memory_mib=2048)
    command, kw = _pre_start(manager, folder)
    try:
        (scratch,) = scratch_root.iterdir()
        work = scratch / "work"
        assert kw["cwd"] == str(work) and sorted(p.name for p in work.iterdir()) == ["03.ipynb", "solutions.ipynb"]
        assert (work / "solutions.ipynb").is_symlink()  # copied as a link: resolved inside the sandbox only
        assert Path(command[0]).name == "prlimit" and f"--as={2048 * 2**20}" in command
        bwrap = next(i for i, word in enumerate(command) if Path(word).name == "bwrap")
        shown = {command[i + 1] for i in range(bwrap, len(command) - 1) if command[i] in ("--ro-bind", "--bind")}
        root = Path(nbgrader_kernel.__file__).resolve().parents[2]
        assert str(root / "course") in shown and str(work) in shown
        # No check and no reference answer in the kernel: course/exercises is the stand-in (they run in nbgrader).
        stand_in = command.index(str(root / "course" / "exercises"), bwrap) - 1
        assert command[stand_in - 1 : stand_in + 1] == [
            "--ro-bind",
            str(root / "course" / "grading" / "stand_in_exercises"),
        ]
        assert str(root / "notebooks") not in shown and str(root) not in shown and str(folder) not in shown
        assert command[-2:] == [manager.connection_file, "--x=1"]
        assert manager.transport == "ipc" and Path(manager.connection_file).parent == scratch / "sockets"
        assert manager.kernel_spec.interrupt_mode == "message"
        env = kw["env"]
        assert "TEACHERS_TOKEN" not in env and GRADING_ENV not in env  # nbgrader reads raises, not verdict displays
        assert env["NBGRADER_EXECUTION"] == "autograde" and env["HOME"] == "/tmp" and env["PYTHONPATH"] == str(root)
        if os.geteuid() == 0:
            assert Path(manager.connection_file).stat().st_uid == sandbox.SANDBOX_UID
    finally:
        asyncio.run(manager._async_cleanup_resources())
    assert list(scratch_root.iterdir()) == []  # the scratch folder goes with the kernel


def _test_cells(hide_checks: bool) -> list:
    """Lesson 04's nbgrader test cells (one calls two checks), as ``course.assignments nbgrader`` writes them."""
    name = "04_multi_head_attention.ipynb"
    source = nbgrader_source(read_notebook(NOTEBOOKS_DIR / name), name, hide_checks=hide_checks)
    return [cell for cell in source.cells if cell.metadata.get("nbgrader", {}).get("grade")]


@pytest.mark.parametrize("hide_checks", [False, True])
def test_each_test_cell_of_a_lesson_answers_its_checks_in_the_kernel_and_holds_none(hide_checks):
    cells = _test_cells(hide_checks)
    found = [course_check_cell(cell) for cell in cells]
    assert cells and None not in found
    two = next(cell for cell in found if cell is not None and len(cell.checks) == 2)
    assert two.checks == (
        ("course.exercises.lesson04", "check_split_heads", "split_heads"),
        ("course.exercises.lesson04", "check_merge_heads", "merge_heads"),
    )
    kernel = [line for line in two.kernel_source.split("\n") if line.strip() and not line.startswith("#")]
    answers = [line for line in kernel if "answer_the_checker(" in line and not line.startswith("from ")]
    assert answers == ['answer_the_checker("split_heads")', 'answer_the_checker("merge_heads")']
    for cell in found:
        assert cell is not None and "graded(" not in cell.kernel_source and "assert" not in cell.kernel_source
        compile(cell.kernel_source, "test cell", "exec")  # the kernel can run it


def test_a_cell_that_is_not_a_course_test_cell_runs_in_the_kernel_as_it_is():
    test = _test_cells(hide_checks=False)[0]
    teachers = nbformat.v4.new_code_cell("assert split_heads(torch.ones(1, 2, 4), 2).shape == (1, 2, 2, 2)")
    teachers.metadata = test.metadata  # a test cell of the teacher's own: no course check in it
    answer = nbformat.v4.new_code_cell(test.source)  # the same lines in a cell that is not a test cell
    forged = nbformat.v4.new_code_cell(test.source.replace("from course.exercises.lesson04 import", "from m import"))
    forged.metadata = test.metadata  # a check_... that is not the course's: not sent to nbgrader's process
    magic = nbformat.v4.new_code_cell("%time " + test.source)
    magic.metadata = test.metadata
    assert [course_check_cell(cell) for cell in (teachers, answer, forged, magic)] == [None] * 4


CHECKS = (("course.exercises.lesson04", "check_split_heads", "split_heads"), ("m", "check_merge_heads", "merge_heads"))


def _scored(entries: list[dict], kernel_outputs: list) -> tuple[float, str]:
    """The score nbgrader gives a 2-point test cell with these verdicts' outputs, and the verdicts' text."""
    from nbgrader.utils import determine_grade

    cell = nbformat.v4.new_code_cell("")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "points": 2, "grade_id": "x", "schema_version": 3}
    cell.outputs = verdict_outputs(CHECKS, entries, kernel_outputs)
    text = "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")
    return determine_grade(cell)[0], text


def _entry(function: str, status: str, message: str = "because") -> dict:
    """A verdict's entry as remote.grade makes it: its line is the check's (the exercise's name, not the function's)."""
    mark = "PASS" if status == "pass" else "NOT YET"
    return {"function": function, "status": status, "message": message, "text": f"[{mark}] {function} ex: {message}"}


def test_nbgrader_scores_a_test_cell_by_its_verdicts_only():
    right = [_entry("split_heads", "pass", "right"), _entry("merge_heads", "pass", "right")]
    assert _scored(right, []) == (2, "[PASS] split_heads ex: right\n[PASS] merge_heads ex: right\n")
    score, text = _scored([right[0], _entry("merge_heads", "wrong", "the heads are swapped")], [])
    assert score == 0 and text.endswith("[NOT YET] merge_heads ex: the heads are swapped\n")
    score, text = _scored(right[:1], [])  # the cell ended before the second check had an answer
    assert score == 0 and "[ERROR] merge_heads: not graded" in text
    broken = {"function": "merge_heads", "status": "error", "message": "not graded: the kernel sent a Foo"}
    assert _scored([right[0], broken], []) == (
        0,
        "[PASS] split_heads ex: right\n[ERROR] merge_heads: " + broken["message"] + "\n",
    )
    assert _scored([_entry("split_heads", "not attempted"), right[1]], [])[0] == 0
    # What the kernel sent is not the verdict: a number nbgrader would read as partial credit, a printed [PASS] ...
    forged = [
        nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=1),
        nbformat.v4.new_output("stream", name="stdout", text="[PASS] merge_heads: forged\n"),
    ]
    score, text = _scored([right[0], _entry("merge_heads", "wrong")], forged)
    assert score == 0 and "forged" not in text
    # ... but an error it raised (a teacher's own assert in the cell, an interrupted cell) still costs the points.
    raised = nbformat.v4.new_output("error", ename="KeyboardInterrupt", evalue="", traceback=[])
    assert _scored(right, [raised])[0] == 0
    assert NOT_PASSED in str(verdict_outputs(CHECKS, [right[0]], []))
