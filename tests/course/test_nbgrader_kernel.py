"""nbgrader's kernels in the course's sandbox (course/grading/nbgrader_kernel.py), without starting one.

The term test (test_nbgrader_term.py) grades a student who reads the solutions through the real nbgrader; these
check what it rests on, quickly: the template's autograde chain, the kernel manager nbgrader really gets, the
command and environment its kernel would start with, the refusal where no sandbox can be made, and the opt-out.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute
from traitlets.config import Config

from course.grading import GRADING_ENV, nbgrader_kernel, sandbox
from course.grading.nbgrader import CONFIG_TEMPLATE
from course.grading.nbgrader_kernel import NOT_SANDBOXED, SandboxedExecute, SandboxedKernelManager

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
def scratch_root(tmp_path, monkeypatch):
    """Where the manager's scratch folders go (tempfile's folder), to see what it leaves behind."""
    root = tmp_path / "scratch"
    root.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(root))
    return root


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
