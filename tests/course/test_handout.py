"""The hand-out recipe of docs/teaching.md, run as written (issue 28): the folder it builds holds what every
student copy imports, and nothing is imported from anywhere else; and every released lesson's copy runs top to
bottom in that folder, as a student receives it (issue 63: lesson 14 read ``../benchmarks/*.jsonl``, which the
hand-out lacked, and every feedback page showed the tracebacks). Those runs are integration tests: about as long
as the lessons themselves (``make test``, not ``make unit``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.lessons import LESSONS, missing_needs

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "teaching.md"


def recipe() -> list[str]:
    """The command lines of the guide's hand-out block (the ```bash block after "Build a hand-out folder")."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("Build a hand-out folder")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.DOTALL)
    assert block, "the guide's hand-out recipe is missing"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def build_handout(folder: Path) -> Path:
    """Run the guide's recipe, line by line, to build ``folder / "handout"``; returns it."""
    lines = recipe()
    assert any(line.startswith("git archive HEAD") for line in lines) and "course" in " ".join(lines)
    for line in lines:  # run from a clean copy of the committed tree: `git archive HEAD` reads no work tree
        command = line.replace(".venv/bin/python", sys.executable).replace("handout", str(folder / "handout"))
        done = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stderr)
    return folder / "handout"


@pytest.fixture(scope="module")
def built_handout(tmp_path_factory) -> Path:
    return build_handout(tmp_path_factory.mktemp("class"))


def test_the_guides_handout_folder_holds_everything_a_student_copy_imports(built_handout):
    handout = built_handout
    copies = sorted((handout / "notebooks").glob("*.ipynb"))
    assert copies, "the recipe wrote no student copies"
    modules = set()
    for copy in copies:
        for cell in json.loads(copy.read_text())["cells"]:
            if cell["cell_type"] == "code":
                for line in "".join(cell["source"]).splitlines():
                    match = re.match(r"\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", line)
                    if match and (match.group(1) or match.group(2)).split(".")[0] in ("course", "helpers"):
                        modules.add(match.group(1) or match.group(2))
    assert any(module.startswith("course.exercises") for module in modules)
    # Import each from the hand-out folder first on the path, and say where it came from.
    probe = (
        "import importlib, json, sys; sys.path.insert(0, sys.argv[1]); "
        "print(json.dumps({m: importlib.import_module(m).__file__ for m in sys.argv[2:]}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(handout), *sorted(modules)],
        cwd=handout / "notebooks",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    for module, path in json.loads(done.stdout).items():
        assert Path(path).resolve().is_relative_to(handout.resolve()), (module, path)
    assert (handout / "data").is_dir() and (handout / "pyproject.toml").is_file()
    assert_the_readme_is_the_students(handout)


def assert_the_readme_is_the_students(handout: Path) -> None:
    """The hand-out's README speaks to students (issue 38): how to start, check and hand in, and what to keep.
    The course's README sent them to `make test` (the hand-out has no tests/), the guide and folded solutions."""
    from course.exercises.feedback import Verdict

    readme = (handout / "README.md").read_text(encoding="utf-8")
    assert readme == (ROOT / "docs" / "student_readme.md").read_text(encoding="utf-8")
    for course_only in ("make test", "teaching.md", "tests/", "folded", "solution", "make release"):
        assert course_only not in readme, course_only
    assert "make lab" in readme and re.search(r"^lab:", (handout / "Makefile").read_text(), re.MULTILINE)
    for status in ("pass", "wrong", "not attempted"):  # the verdict lines it shows are the checks' own
        mark = str(Verdict("x", status, "")).split("]")[0] + "]"
        assert f"`{mark} …`" in readme, mark
    for folder in re.findall(r"`(\w+)/`", readme):  # every folder it names is in the hand-out
        assert (handout / folder).is_dir(), folder


@pytest.mark.integration
@pytest.mark.parametrize("lesson", LESSONS, ids=[lesson.number for lesson in LESSONS])
def test_every_released_lesson_runs_top_to_bottom_in_the_handout(built_handout, lesson, monkeypatch):
    """The copy as a student receives it (exercises unanswered), run in a fresh kernel from the hand-out's
    notebooks/ with the hand-out's course and helpers first on the path: no cell may raise, or Run All stops and
    every nbgrader feedback page, the right student's too, shows the traceback."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    missing = missing_needs(lesson)
    if missing:
        pytest.skip(f"lesson {lesson.number} needs {', '.join(missing)}")
    copy = built_handout / "notebooks" / lesson.file
    notebook = nbformat.read(copy, as_version=4)
    monkeypatch.setenv("PYTHONPATH", str(built_handout))  # the kernel imports the hand-out's course and helpers
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    client = NotebookClient(
        notebook,
        timeout=lesson.grading_timeout_s * 4,
        kernel_name="python3",
        resources={"metadata": {"path": str(copy.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{lesson.file} stops in the hand-out: {str(error)[-1500:]}")
    unrun = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code" and not cell.execution_count]
    assert unrun == [], f"{lesson.file}: cells {unrun} did not run"
