"""The README's promise: every name a lesson imports from a module of ``helpers`` is importable from ``helpers``
itself (``from helpers import head_grid``), as the same object, except the few whose plain name only makes sense
beside its module (lesson 06's ``train`` and ``evaluate`` steps, lesson 08's ``encode``). Found by reading every
lesson's ``from helpers.x import y`` lines, so a new lesson's imports are held to it too."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import helpers

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Names a lesson imports from their own module on purpose: at the top level they would say nothing.
KEPT_IN_THEIR_MODULE = {
    "train", "evaluate", "fit", "train_step", "epoch_batches", "make_optimizer", "learning_rate_factor",  # 06
    "LESSON_CONFIG", "CAPTIONS_DIR", "attention_maps", "ablated_heads",  # 06
    "encode", "model_path", "ROLES", "spearman", "PARAPHRASE_PAIRS",  # 08
    "gguf_path",  # 09
    "TEMPLATES",  # 12
    "CMAP",  # 03
}  # fmt: skip


def lesson_imports() -> dict[tuple[str, str], set[str]]:
    """(module, name) -> the lessons that write ``from module import name``, for every helpers submodule."""
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            lines = "".join(cell["source"]).split("\n")
            source = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers."):
                    for alias in node.names:
                        found.setdefault((node.module, alias.name), set()).add(path.name[:2])
    return found


def test_the_lessons_import_names_from_helpers_submodules():
    assert len(lesson_imports()) > 50  # the scan finds what the lessons import (it cannot pass by finding nothing)


def test_every_name_a_lesson_imports_is_importable_from_helpers_itself():
    missing = []
    for (module, name), lessons in sorted(lesson_imports().items()):
        if name in KEPT_IN_THEIR_MODULE:
            continue
        if name not in helpers.__all__ or getattr(helpers, name) is not getattr(importlib.import_module(module), name):
            missing.append(f"{name} (from {module}, lessons {', '.join(sorted(lessons))})")
    assert not missing, f"add these to helpers/__init__.py's _EXPORTS: {missing}"


def test_the_exceptions_are_still_used_and_the_readme_names_them():
    used = {name for _, name in lesson_imports()}
    assert used >= KEPT_IN_THEIR_MODULE, f"no lesson imports {KEPT_IN_THEIR_MODULE - used} any more: drop them"
    assert "Every name a lesson imports" in README and "`train`, `evaluate`" in README
