"""Lesson 09 quotes lesson 06's translator from ``benchmarks/lesson09_translation.py``: the range of BLEU it states
(prose and ``SPECIALIST_BLEU``), the parameter count and the sentences must be the ones the benchmark measured."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "09_language_model.ipynb"
LOG = ROOT / "benchmarks" / "lesson09_translation.jsonl"


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "lesson09_translation", ROOT / "benchmarks" / "lesson09_translation.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lesson_cells() -> list[str]:
    return ["".join(cell["source"]) for cell in json.loads(LESSON.read_text(encoding="utf-8"))["cells"]]


def _assigned(name: str):
    """The literal value the lesson assigns to ``name`` (one assignment in all its code)."""
    values = []
    for source in _lesson_cells():
        try:
            tree = ast.parse("\n".join(line for line in source.split("\n") if not line.startswith("%")))
        except SyntaxError:
            continue  # a markdown cell
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                values.append(ast.literal_eval(node.value))
    assert len(values) == 1, f"lesson 09 should assign {name} once, found {values}"
    return values[0]


def _runs() -> list[dict]:
    runs = [json.loads(line) for line in LOG.read_text(encoding="utf-8").splitlines() if line.strip()]
    latest = runs[-1]["fingerprint"]
    return [r for r in runs if r["fingerprint"] == latest]


def test_the_lesson_translates_the_benchmarks_sentences():
    assert tuple(_assigned("LESSON_LINES")) == tuple(_benchmark().LESSON_LINES)
    assert all(r["lesson"]["sentences"] == len(_benchmark().LESSON_LINES) for r in _runs())


def test_the_quoted_range_is_the_measured_one():
    translators = [r for r in _runs() if r["model"] == "translator"]
    assert len(translators) >= 2, "the range should come from several seeds"
    bleu = [r["lesson"]["bleu"] for r in translators]
    low, high = _assigned("SPECIALIST_BLEU")
    assert (low, high) == (min(bleu), max(bleu)), (low, high, bleu)
    assert _assigned("SPECIALIST_PARAMETERS") == translators[0]["parameters"]
    prose = " ".join(_lesson_cells())
    seeds = len(translators)
    assert f"{low:.1f} – {high:.1f} over {seeds} seeds" in prose, "the prose should state the measured range"


def test_the_lessons_claim_holds_in_the_benchmark():
    runs = _runs()
    low, _ = _assigned("SPECIALIST_BLEU")
    smol = [r for r in runs if r["model"] == "smollm2"]
    assert smol, "the benchmark should have scored SmolLM2 too"
    assert all(r["lesson"]["bleu"] < low - 30 for r in smol)  # what the lesson asserts on its own run
