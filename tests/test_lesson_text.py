"""Lessons 01-05: 'why' questions with model answers in the teacher's guide, check cells without `_ =`,
and (lessons 04 and 05) no name that changes meaning from one section to the next (issues #11, #13)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb"))
GUIDE = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _numbered_items(text: str) -> list[int]:
    return [int(number) for number in re.findall(r"^(\d+)\. ", text, flags=re.MULTILINE)]


@pytest.mark.parametrize("lesson", LESSONS, ids=[path.stem for path in LESSONS])
def test_lesson_ends_with_why_questions_answered_in_the_guide(lesson):
    last = _cells(lesson)[-1]
    assert last["cell_type"] == "markdown" and _source(last).startswith("## Questions to think about")
    questions = _numbered_items(_source(last))
    assert len(questions) >= 3 and questions == list(range(1, len(questions) + 1))
    number = lesson.name[:2]
    answers = GUIDE.split(f"**Lesson {number}**", 1)[1].split("**Lesson ", 1)[0].split("\n## ", 1)[0]
    assert _numbered_items(answers) == questions, f"the guide should answer each of lesson {number}'s questions"


@pytest.mark.parametrize("lesson", LESSONS, ids=[path.stem for path in LESSONS])
def test_check_cells_need_no_underscore(lesson):
    for cell in _cells(lesson):
        if cell["cell_type"] == "code":
            assert not re.search(r"^_ = check_", _source(cell), flags=re.MULTILINE), _source(cell)


def _bound_names(source: str) -> set[str]:
    """Names a cell binds outside functions and classes, other than loop variables and comprehension targets."""
    tree = ast.parse("\n".join(line for line in source.split("\n") if not line.startswith("%")))
    loop_targets = {
        name.id
        for node in ast.walk(tree)
        if isinstance(node, ast.For)
        for name in ast.walk(node.target)
        if isinstance(name, ast.Name)
    }
    bound: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
                bound.add(child.name)
            elif isinstance(child, (ast.Lambda, ast.comprehension)):
                continue
            else:
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                    bound.add(child.id)
                visit(child)

    visit(tree)
    return bound - loop_targets - {"_", "fig", "same"}  # figures and yes/no results are meant to be reused


@pytest.mark.parametrize("stem", ["04_multi_head_attention", "05_transformer_blocks"])
def test_no_name_is_rebound_in_another_section(stem):
    """#13.3: e.g. `W_q` went from an nn.Linear in section 2 to a tensor in section 8."""
    first_cell: dict[str, int] = {}
    rebound = []
    for index, cell in enumerate(_cells(ROOT / "notebooks" / f"{stem}.ipynb")):
        if cell["cell_type"] != "code":
            continue
        for name in _bound_names(_source(cell)):
            if name in first_cell:
                rebound.append(f"{name} (cells {first_cell[name]} and {index})")
            first_cell.setdefault(name, index)
    assert not rebound, rebound
