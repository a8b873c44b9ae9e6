"""What a graded kernel finds at ``course.exercises`` (``course/grading/stand_in_exercises``): stand-in checks, and
for a reference answer, however it is imported, an error that says none is there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # each case starts an interpreter of its own

STAND_IN = Path(__file__).parents[2] / "course" / "grading" / "stand_in_exercises" / "__init__.py"

# The stand-in package loaded as course.exercises in a fresh interpreter, as the sandbox mounts it.
PRELUDE = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("course.exercises", {str(STAND_IN)!r}, submodule_search_locations=[])
module = importlib.util.module_from_spec(spec)
sys.modules["course.exercises"] = module
spec.loader.exec_module(module)
"""


def run(statement: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + statement], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "statement",
    [
        "from course.exercises.lesson11 import reference_absorb",
        "import course.exercises.lesson02 as lesson; lesson.reference_linear_projection",
        "from course.exercises import reference_window_mask",
        "import course.exercises.lesson12.reference_logit_lens",
    ],
)
def test_a_reference_answer_is_refused_by_an_error_that_says_it_is_not_there(statement):
    result = run(statement)
    assert result.returncode != 0
    assert "is not in a graded kernel" in result.stderr, result.stderr
    assert "not callable" not in result.stderr


def test_a_check_is_a_stand_in_that_says_the_checker_grades():
    result = run("from course.exercises.lesson11 import check_absorb\ncheck_absorb(None)")
    assert result.returncode == 0, result.stderr
    assert "check_absorb: (graded by the course's checker, outside this kernel" in result.stdout
