"""`make lint` lints the course, not a teacher's own folders inside the checkout (issue 38): the hand-out, the
handed-in copies, the gradebook and nbgrader's course folder hold students' code, which may well fail ruff."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
TEACHERS_FOLDERS = ["handout", "submissions", "grades", "classroom"]
UNUSED_IMPORT = "import os\n"  # F401: a student's leftover


@pytest.mark.skipif(RUFF is None, reason="needs ruff (the test extra)")
def test_ruff_skips_a_teachers_folders_and_still_lints_the_rest(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for folder in TEACHERS_FOLDERS:
        (tmp_path / folder / "alice").mkdir(parents=True)
        (tmp_path / folder / "alice" / "answer.py").write_text(UNUSED_IMPORT)
    done = subprocess.run([RUFF, "check", "."], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout
    (tmp_path / "course.py").write_text(UNUSED_IMPORT)  # the same mistake in the course itself is still caught
    done = subprocess.run([RUFF, "check", "."], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "course.py" in done.stdout and "alice" not in done.stdout, done.stdout


def test_make_lint_type_checks_both_packages_and_allows_no_error():
    import re
    import tomllib

    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["files"] == ["helpers", "course"] and mypy["check_untyped_defs"] is True
    makefile = (ROOT / "Makefile").read_text()
    lint = makefile.split("\nlint:")[1].split("\n\n")[0]
    assert "$(MAKE) --no-print-directory typecheck" in lint
    allowed = re.search(r"^MYPY_ERRORS \?= (\d+)$", makefile, re.MULTILINE)
    assert allowed and int(allowed.group(1)) == 0, "mypy is clean (issue 47): the count of errors allowed stays 0"
    recipe = makefile.split("\ntypecheck:")[1].split("\n\n")[0]
    assert "$(BIN)/mypy" in recipe and "-gt $(MYPY_ERRORS) ]; then" in recipe and "exit 1" in recipe
