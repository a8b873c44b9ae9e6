"""The Makefile notices a .venv that belongs to another folder (a copied or moved checkout) and rebuilds it.

Each test runs ``make -n setup`` (print the commands, run nothing) in a tiny fake checkout whose
``.venv/bin/python`` is a shell script saying where it finds ``helpers``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def fake_checkout(folder: Path, python_script: str) -> Path:
    folder = folder.resolve()
    (folder / "helpers").mkdir(parents=True)
    (folder / "helpers" / "__init__.py").write_text("")
    shutil.copy(ROOT / "Makefile", folder / "Makefile")
    (folder / "pyproject.toml").write_text("[project]\nname = 'fake'\n")
    python = folder / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n" + python_script)
    python.chmod(0o755)
    stamp = folder / ".venv" / ".installed"
    stamp.write_text("")
    os.utime(folder / "pyproject.toml", (1_000_000, 1_000_000))  # older than the stamp: nothing to do
    return folder


def dry_run(folder: Path) -> str:
    result = subprocess.run(["make", "-n", "setup"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def test_a_venv_built_here_is_left_alone(tmp_path):
    folder = fake_checkout(tmp_path / "course", f"echo {tmp_path.resolve()}/course/helpers/__init__.py\n")
    output = dry_run(folder)
    assert "Nothing to be done" in output and "rm -rf" not in output


def test_a_venv_copied_from_another_folder_is_rebuilt_with_a_message(tmp_path):
    folder = fake_checkout(tmp_path / "copy", "echo /home/someone/course/helpers/__init__.py\n")
    output = dry_run(folder)
    assert ".venv belongs to another folder: its python finds helpers at /home/someone/course/helpers" in output
    assert "rm -rf .venv" in output and "-m venv .venv" in output and "pip install" in output


def test_a_venv_whose_python_no_longer_runs_is_rebuilt(tmp_path):
    folder = fake_checkout(tmp_path / "moved", "exit 1\n")
    output = dry_run(folder)
    assert "its python does not run" in output and "rm -rf .venv" in output


def test_this_checkouts_own_venv_is_recognised():
    if not (ROOT / ".venv" / ".installed").is_file():
        pytest.skip("no .venv built in this checkout")
    output = subprocess.run(["make", "-n", "setup"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "belongs to another folder" not in output.stdout + output.stderr
