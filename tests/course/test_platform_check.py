"""The platform check ``make setup`` runs first (course/platform_check.py, issue 63, item 3).

Each unsupported machine is asked about with stand-in values (the check's ``--python-version``, ``--system`` and
``--machine``) and must be refused with what to use instead; the supported ones must pass. The last test runs
``make setup`` in a folder with only the Makefile and the check, with a ``python3`` that says it is 3.9: make must
stop at the check, before any virtual environment is made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "course" / "platform_check.py"
INSTEAD = ("a Linux machine", "WSL 2", "a container", "Binder")


def ask(python_version: str, system: str, machine: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), "--python-version", python_version, "--system", system]
    return subprocess.run([*command, "--machine", machine], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("python_version", "system", "machine", "said"),
    [
        ("3.9.6", "Darwin", "arm64", "Python 3.9.6 is too old"),  # a Mac's own python3
        ("3.10.12", "Linux", "x86_64", "Python 3.10.12 is too old"),
        ("3.12.1", "Darwin", "x86_64", "Intel Mac"),
        ("3.12.1", "Windows", "AMD64", "native Windows"),
        ("3.12.1", "MINGW64_NT-10.0", "x86_64", "native Windows"),  # Git Bash's make and python
        ("3.12.1", "Linux", "ppc64le", "Linux on ppc64le"),
    ],
)
def test_an_unsupported_machine_is_refused_saying_what_to_use_instead(python_version, system, machine, said):
    result = ask(python_version, system, machine)
    assert result.returncode == 1 and said in result.stderr, result.stderr
    assert all(way in result.stderr for way in INSTEAD), result.stderr


@pytest.mark.parametrize(
    ("python_version", "system", "machine"),
    [("3.11.0", "Linux", "x86_64"), ("3.13.2", "Linux", "aarch64"), ("3.12.1", "Darwin", "arm64")],
)
def test_a_supported_machine_passes_silently(python_version, system, machine):
    result = ask(python_version, system, machine)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_a_version_that_is_not_one_is_refused_by_the_option():
    result = ask("three", "Linux", "x86_64")
    assert result.returncode == 2 and "expected a version such as 3.11.4" in result.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_make_setup_with_python_3_9_stops_at_the_check_before_anything_is_installed(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "course").mkdir()
    shutil.copy(SCRIPT, tmp_path / "course" / "platform_check.py")
    old_python = tmp_path / "python3.9"  # a python that says it is 3.9, as macOS's own python3 is
    old_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@" --python-version 3.9.6\n')
    old_python.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MAKE", "MFLAGS"))}
    result = subprocess.run(
        ["make", "setup", f"PYTHON={old_python}"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode != 0 and "Python 3.9.6 is too old" in result.stderr, result.stdout + result.stderr
    assert "WSL 2" in result.stderr and not (tmp_path / ".venv").exists()
