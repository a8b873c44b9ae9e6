"""nbgrader's kernels in the course's sandbox: ``nbgrader autograde`` runs and grades students' code as ``check`` does.

nbgrader runs a submission in a kernel of the teacher's user, which can open anything the teacher can: the
solution notebooks by absolute path, other students' submissions, the network. The course's nbgrader config
(``nbgrader_config.template``) puts :class:`SandboxedExecute` where autograde's chain has nbgrader's
``Execute``, and its kernel manager starts each kernel the way ``check``'s supervisor does: inside the sandbox of
:mod:`course.grading.sandbox` (the course read-only without ``notebooks/``, ``course/exercises`` seen as its
stand-in without any check or reference answer, no network, its own processes, as nobody when the teacher is
root), talking to nbgrader over Unix sockets, in a fresh folder holding a copy of the notebook's folder, with
``check``'s minimal environment (none of the teacher's secrets).

nbgrader scores a test cell by its outputs (0 for an error among them). So the verdicts are computed outside the
kernel, as ``check``'s are: in each test cell that calls a course check (:mod:`course.grading.nbgrader_tests`),
the kernel only answers the check (``answer_the_checker``), which runs in nbgrader's process
(:class:`course.grading.remote_cells.RemoteChecks`, the supervisor's own code), and :class:`SandboxedExecute`
writes the cell's outputs itself from the verdicts: an error output unless every check passed. A teacher's own
test cells (their asserts) run in the kernel as before.

Where no sandbox can be made (bubblewrap missing), the kernel is not started: autograde fails for every
submission, saying why, as ``check`` refuses to start. ``c.SandboxedKernelManager.sandboxed = False`` in
``nbgrader_config.py`` is the opt-out that ``check --no-sandbox`` is: the kernel then runs as the teacher's user
and sees the real ``course/exercises`` (the reference answers too), and each start says so in nbgrader's log; the
verdicts are still computed in nbgrader's process.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer

from course.grading import GRADING_ENV, sandbox
from course.grading.checker import sandbox_job, sandbox_unavailable, submission_environment
from course.grading.exam import is_exam_cell
from course.grading.nbgrader_tests import CheckCell, course_check_cell, verdict_outputs
from course.grading.remote_cells import RemoteChecks

__all__ = ["NOT_SANDBOXED", "SandboxedExecute", "SandboxedKernelManager"]

NOT_SANDBOXED = (
    "nbgrader is running this student's code WITHOUT the course's sandbox (c.SandboxedKernelManager.sandboxed = "
    "False): as your user, it can read the solutions, other students' files and anything else you can, and use the "
    "network. Only for students you trust."
)


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in :func:`course.grading.sandbox.kernel_prefix`'s sandbox.

    Each start makes a scratch folder: ``work/`` (a copy of the folder nbgrader runs the notebook in, where the
    kernel starts, writable by the sandbox's user), ``sockets/`` (the kernel's Unix sockets and connection file:
    the sandbox has no network, so no TCP) and ``home/``; it is removed when nbgrader cleans the kernel up.
    """

    sandboxed = Bool(
        True,
        help="Run each kernel in the course's bubblewrap sandbox; False runs students' code as your user "
        "(as `check --no-sandbox` does: only for students you trust).",
    ).tag(config=True)
    memory_mib = Integer(
        sandbox.Limits.memory_bytes // 2**20,
        help="MiB of address space each process of a kernel may use (as `check --memory`).",
    ).tag(config=True)

    _scratch: Path | None = None  # the running kernel's scratch folder (None: not in a sandbox)
    _prefix: list[str] | None = None  # the sandbox's words before the kernel's command
    _env: dict[str, str] | None = None  # the kernel's whole environment
    _uid: int = sandbox.SANDBOX_UID  # who owns the connection file when the teacher is root

    async def _async_pre_start_kernel(self, **kw):
        if not self.sandboxed:
            self.log.warning(NOT_SANDBOXED)
            return await super()._async_pre_start_kernel(**kw)
        if self._scratch is None:  # a restart keeps its folder and sandbox
            reason = sandbox_unavailable()
            if reason:
                raise sandbox.SandboxUnavailable(
                    f"cannot sandbox the notebook: {reason}. Install bubblewrap, or set "
                    "c.SandboxedKernelManager.sandboxed = False in nbgrader_config.py to run students' code as your "
                    "user (only for students you trust: see the teaching guide, section 5)."
                )
            self._enter_sandbox(Path(kw.get("cwd") or os.getcwd()))
        assert self._scratch is not None and self._env is not None, "_enter_sandbox sets both, a restart keeps them"
        kw["env"], kw["cwd"] = dict(self._env), str(self._scratch / "work")
        try:
            return await super()._async_pre_start_kernel(**kw)
        except BaseException:
            self._leave_sandbox()
            raise

    def _enter_sandbox(self, folder: Path) -> None:
        """Make the scratch folder and the sandbox's command prefix; point the connection at Unix sockets."""
        prefix = "nbgrader-sandbox-"
        self._scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=sandbox.scratch_parent(prefix)))
        try:
            # symlinks=True: a link the submission holds is copied as a link, resolved inside the sandbox (where
            # the teacher's files are not), never followed here with the teacher's rights.
            shutil.copytree(folder, self._scratch / "work", symlinks=True)
            env = submission_environment(self._scratch / "home", secrets.token_hex(16))
            # No verdict is read from this kernel (SandboxedExecute computes them): no verdict displays either.
            env.pop(GRADING_ENV, None)
            if os.environ.get("NBGRADER_EXECUTION"):  # what nbgrader tells a notebook it is doing
                env["NBGRADER_EXECUTION"] = os.environ["NBGRADER_EXECUTION"]
            # CPU seconds per process: a backstop behind nbgrader's cell timeout (every core busy for an hour).
            limits = sandbox.Limits(memory_bytes=self.memory_mib * 2**20, cpu_s=3600 * max(1, os.cpu_count() or 1))
            # No check and no reference answer within the kernel's reach: they run in nbgrader's process.
            box = sandbox_job(self._scratch, env, limits, hide_checks=True)
        except BaseException:
            self._leave_sandbox()
            raise
        self._env, self._prefix, self._uid = env, box["prefix"], box["uid"]
        self.transport, self.ip = "ipc", str(Path(box["sockets"]) / "kernel")
        self.connection_file = str(Path(box["sockets"]) / "kernel.json")
        # The kernel sits in a session of its own inside the sandbox: it interrupts itself when asked by message.
        spec = self.kernel_spec
        assert spec is not None, "the kernel nbgrader starts is a named, installed one (its spec was found)"
        spec.interrupt_mode = "message"

    def _leave_sandbox(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        self._scratch = self._prefix = None

    def format_kernel_cmd(self, extra_arguments=None):
        if self._prefix is None:
            return super().format_kernel_cmd(extra_arguments)
        if os.geteuid() == 0:  # the connection file (written just before this) is read by the sandbox's user
            os.chown(self.connection_file, self._uid, self._uid)
        kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]
        return [*self._prefix, *kernel, *(extra_arguments or [])]

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        try:
            await super()._async_cleanup_resources(restart=restart)
        finally:
            if not restart:
                self._leave_sandbox()


class SandboxedExecute(RemoteChecks, Execute):
    """nbgrader's ``Execute`` preprocessor with :class:`SandboxedKernelManager` as its kernel manager, grading
    each test cell that calls a course check in nbgrader's process.

    Such a cell (:func:`course.grading.nbgrader_tests.course_check_cell`) runs its ``kernel_source`` in the
    kernel, which only answers the checks; :class:`~course.grading.remote_cells.RemoteChecks` runs them here, and
    the cell keeps its own source and gets :func:`~course.grading.nbgrader_tests.verdict_outputs` as outputs, so
    nbgrader's score is the verdicts': the cell's points when every check passed, else 0 (as when the check
    raised in the kernel). Every other cell runs in the kernel as nbgrader runs it.

    ``c.Execute.kernel_manager_class`` cannot say which kernel manager: ``Execute`` passes its own class as an
    argument, which outranks configuration. Everything else (timeout, interrupts, retries) is ``Execute``'s,
    configured as ``c.ExecutePreprocessor.*`` or ``c.Execute.*``.
    """

    _check_cells: dict[int, CheckCell]  # cell index -> the course checks it calls (set per notebook)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)
        self._check_cells = {}

    def preprocess(self, nb, resources=None, km=None):
        found = {index: course_check_cell(cell) for index, cell in enumerate(nb.get("cells", ()))}
        self._check_cells = {index: cell for index, cell in found.items() if cell is not None}
        self.remote_checks = {index: list(cell.checks) for index, cell in self._check_cells.items()}
        self.verdicts = {}
        return super().preprocess(nb, resources, km)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        found = self._check_cells.get(cell_index)
        if found is None:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        source, cell.source = cell.source, found.kernel_source
        try:
            executed = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            cell.source = source  # the teacher's test, as nbgrader stored it (its feedback shows it)
        exam = is_exam_cell(source)  # written by `nbgrader --hide-checks`: the feedback shows verdicts only
        executed.outputs = verdict_outputs(found.checks, self.verdicts.get(cell_index, []), executed.outputs, exam)
        return executed
