"""The lessons' reference solutions as text, for tests that hold that no solution leaks where a learner reads.

A solution is what lies between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in a lesson's code cells. What would
give it away is any of its lines, or any expression inside them that is more than a name (``x @ weight.T + bias``,
``~key_padding_mask[:, None, :]``), of at least ``MIN_CHARS`` characters once whitespace is removed: shorter ones
(``q @ k``, ``x.T``) are the vocabulary a hint may speak in. Text is compared with all whitespace removed, so
line breaks, indentation and spacing around operators do not hide a copy.
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
# Names and attribute chains (nn.Linear, key_padding_mask.unsqueeze) are words, not answers; so are constants.
_WORDS = (ast.Name, ast.Attribute, ast.Constant)


def squeeze(text: str) -> str:
    """``text`` with all whitespace removed: the form every comparison uses."""
    return re.sub(r"\s+", "", text)


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


def _expressions(code: str) -> list[str]:
    """Every expression in ``code`` that is more than a word, as written and as ``ast.unparse`` writes it."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a region that is part of a larger statement: its lines still count
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and not isinstance(node, _WORDS):
            found += [ast.get_source_segment(code, node) or "", ast.unparse(node)]
    return found


def giveaways(notebook: Path) -> set[str]:
    """The squeezed solution text of ``notebook`` that no hint may hold: lines and expressions, ≥ MIN_CHARS."""
    found = set()
    for region in solution_regions(notebook):
        lines = [line.strip() for line in region.splitlines()]
        candidates = [line for line in lines if line and not line.startswith("#")] + _expressions(region)
        for text in candidates:
            text = re.sub(r"^return\s+", "", text.split("  #")[0].strip())
            if len(squeeze(text)) >= MIN_CHARS:
                found.add(squeeze(text))
    return found


def lesson_notebook(number: str) -> Path:
    """notebooks/NN_*.ipynb for lesson ``number`` ("03")."""
    (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
    return path
