"""The course's machinery imports in one direction: no module of ``course/`` imports one that imports it back.

A cycle hidden in function-level imports still ties two modules into one (neither can be read, tested or changed
alone), so imports inside functions count here as much as those at the top of a file.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

COURSE = Path(__file__).resolve().parents[2] / "course"


def module_name(path: Path) -> str:
    parts = path.relative_to(COURSE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(COURSE.rglob("*.py"))}


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The ``course`` modules a file imports anywhere in it (``from course import x`` names module course.x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found & known


@functools.cache  # every course module parsed once for the three tests that read the graph (none changes it)
def import_graph() -> dict[str, set[str]]:
    known = set(MODULES)
    return {name: imported_modules(path, known) - {name} for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each group of modules that reach one another (Tarjan's strongly connected components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_through_three_modules_and_none_in_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_a_function_level_import_is_an_edge(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from course import assignments\n    import course.grading.checker\n")
    assert imported_modules(module, set(MODULES)) >= {"course.assignments", "course.grading.checker"}


def test_the_graph_sees_the_course_modules_and_their_imports():
    graph = import_graph()
    assert {"course.assignments", "course.grading.checker", "course.solution_notebooks"} <= set(graph)
    assert "course.grading.checker" in graph["course.assignments"]  # the check command and its re-exports
    assert "course.solution_notebooks" in graph["course.grading.checker"]  # the lesson format it reads


@pytest.mark.parametrize("lower", ["course.solution_notebooks"])
def test_the_notebook_format_imports_none_of_the_commands_built_on_it(lower):
    assert not {name for name in import_graph()[lower] if name != "course"}


def test_no_module_of_the_course_imports_one_that_imports_it_back():
    assert cycles(import_graph()) == []
