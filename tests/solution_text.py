"""The lessons' reference solutions as text, for tests that hold that no solution leaks where a learner reads.

A solution is what lies between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in a lesson's code cells. What would
give it away is one of its statements (``scores = q @ k.transpose(-2, -1) / math.sqrt(d)``, ``return`` left off),
or an expression inside one that holds two operations or more (``x @ weight.T + bias``,
``~key_padding_mask[:, None, :]``), of at least ``MIN_CHARS`` characters once whitespace is removed. One call or
operator (``math.sqrt(d)``, ``float('-inf')``), names (``nn.Linear``) and the tuple an exercise returns are the
vocabulary a hint may speak in. Text is compared with all whitespace removed, so line breaks, indentation and
spacing around operators do not hide a copy.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
MIN_CHARS = 12
BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
# Names, attribute chains (nn.Linear, key_padding_mask.unsqueeze), constants (-1 too) and tuples of them (the
# `output, k_cache, v_cache` an exercise's signature states) are words, not answers. An expression gives a
# solution away when it holds at least two operations (a call, an operator, an index...), as in
# `x @ weight.T + bias`; `math.sqrt(d)` or `float('-inf')` alone name an idea.
_WORD_NODES = (ast.Name, ast.Attribute, ast.Constant, ast.Load, ast.Tuple, ast.USub, ast.UnaryOp)
MIN_OPERATIONS = 2


def _operations(node: ast.AST) -> int:
    """How many operations ``node`` holds: calls, operators, subscripts, comparisons... (a negative number: 0)."""
    count = 0
    for inner in ast.walk(node):
        if isinstance(inner, ast.UnaryOp) and isinstance(inner.operand, ast.Constant):
            continue
        if (isinstance(inner, ast.expr) and not isinstance(inner, _WORD_NODES)) or isinstance(inner, ast.UnaryOp):
            count += 1
    return count


def squeeze(text: str) -> str:
    """``text`` with all whitespace removed and ``torch.nn.functional.`` written ``F.`` (as the lessons import it):
    the form every comparison uses."""
    return re.sub(r"\s+", "", text).replace("torch.nn.functional.", "F.")


def solution_regions(notebook: Path) -> list[str]:
    """The text of every solution region of ``notebook``, dedented, in order."""
    regions = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        for region in re.findall(rf"^[ \t]*{BEGIN}[ \t]*\n(.*?)^[ \t]*{END}[ \t]*$", source, re.M | re.S):
            regions.append(textwrap.dedent(region))
    return regions


def _statements(code: str) -> list[str]:
    """Each simple statement of ``code`` that computes something, as written (``return`` left off)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a region that is part of a larger statement: it has no statements of its own
        return []
    found = []
    for node in ast.walk(tree):
        value = getattr(node, "value", None)
        statement = isinstance(node, ast.Return | ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Expr)
        if statement and value and _operations(value):
            text = ast.get_source_segment(code, node) or ""
            found += [re.sub(r"^return\s+", "", text), ast.unparse(value)]
    return found


def _expressions(code: str) -> list[str]:
    """Every expression in ``code`` of at least MIN_OPERATIONS operations, as written and as unparsed."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and _operations(node) >= MIN_OPERATIONS:
            found += [ast.get_source_segment(code, node) or "", ast.unparse(node)]
    return found


def giveaways(notebook: Path) -> set[str]:
    """The squeezed solution text of ``notebook`` that no hint may hold: statements and expressions of at least
    MIN_CHARS characters (a statement that only names things, like ``return output, k_cache, v_cache``, is none)."""
    found = set()
    for region in solution_regions(notebook):
        for text in _statements(region) + _expressions(region):
            if len(squeeze(text)) >= MIN_CHARS:
                found.add(squeeze(text))
    return found


def student_text(notebook: Path) -> str:
    """Everything the student copy of ``notebook`` shows (its cells' text), squeezed."""
    from course.assignments import _read, student_copy

    copy = student_copy(_read(notebook), str(notebook))
    return squeeze("\n".join(cell.source for cell in copy.cells))


def secrets(notebook: Path) -> set[str]:
    """The giveaways of ``notebook`` that its student copy does not show anyway (the prose may state a formula,
    ``x + sublayer(norm(x))``, that the exercise then asks to write)."""
    shown = student_text(notebook)
    return {text for text in giveaways(notebook) if text not in shown}


def lesson_notebook(number: str) -> Path:
    """notebooks/NN_*.ipynb for lesson ``number`` ("03")."""
    (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
    return path
