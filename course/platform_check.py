"""Refuse, before anything is installed, a machine the course does not run on, and say what to use instead.

``make setup`` (and so ``make lab``) runs this file with the Python it is about to build ``.venv/`` from, as a
script (``python3 course/platform_check.py``), so it must run on an old Python too: no syntax newer than 3.7, and
nothing imported from the course. What is supported follows from PyPI's files for the pinned torch and from the
package's ``requires-python``:

* Linux on x86-64 or aarch64 (arm64): torch's CPU wheels;
* macOS on Apple Silicon (arm64): torch's macOS wheels;
* Windows through WSL 2 (which is Linux).

Refused, with what to use instead (a Linux machine, WSL 2, a container, Binder): a Python older than 3.11 (macOS's
own ``python3`` is 3.9), an Intel Mac (torch publishes no x86-64 macOS wheel since 2.3), native Windows (the
Makefile, the grading sandbox and the lessons' shell commands are POSIX), and any other processor.

``--python-version``, ``--system`` and ``--machine`` stand in for this machine's, so that a test can ask what an
Intel Mac or Python 3.9 would be told.
"""

from __future__ import annotations

import argparse
import platform
import sys

MINIMUM_PYTHON = (3, 11)
INSTEAD = (
    "Use instead: a Linux machine (x86-64 or aarch64), WSL 2 on Windows (https://learn.microsoft.com/windows/wsl/"
    "install), a container (docker run -it python:3.12 bash, then clone the course inside it), or Binder, which "
    "builds the course from environment.yml in the browser."
)
LINUX_MACHINES = {"x86_64", "amd64", "aarch64", "arm64"}


def problem(python_version: tuple[int, ...], system: str, machine: str) -> str | None:
    """Why the course cannot be set up on this Python and machine, or None where it can."""
    machine = machine.lower()
    if system == "Windows" or system.startswith(("MSYS", "MINGW", "CYGWIN")):
        return (
            f"native Windows ({system}) is not supported: the set-up, the grading sandbox and the lessons' shell "
            "commands assume Linux or macOS."
        )
    if system == "Darwin" and machine != "arm64":
        return (
            f"this is an Intel Mac ({machine}): the course's pinned torch has no wheel for macOS on x86-64 (PyTorch "
            "stopped making them after 2.2), so the lessons cannot be installed here."
        )
    if system == "Linux" and machine not in LINUX_MACHINES:
        return f"Linux on {machine} is not supported: torch publishes wheels for x86-64 and aarch64 only."
    if system not in ("Linux", "Darwin"):
        return f"{system} is not supported: the course runs on Linux (x86-64, aarch64) and on macOS on Apple Silicon."
    if tuple(python_version[:2]) < MINIMUM_PYTHON:
        shown = ".".join(str(part) for part in python_version[:3])
        wanted = ".".join(str(part) for part in MINIMUM_PYTHON)
        return (
            f"Python {shown} is too old: the course needs Python {wanted} or newer. Install one (python.org, "
            "your package manager, Homebrew on a Mac: brew install python@3.12) and run "
            f"make setup PYTHON=python3.12."
        )
    return None


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a version such as 3.11.4, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python-version", type=_version, default=tuple(sys.version_info[:3]))
    parser.add_argument("--system", default=platform.system())
    parser.add_argument("--machine", default=platform.machine())
    args = parser.parse_args(argv)
    found = problem(args.python_version, args.system, args.machine)
    if found is None:
        return 0
    print(f"error: {found}\n{INSTEAD}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
