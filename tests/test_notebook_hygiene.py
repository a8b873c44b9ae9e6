"""Committed lessons are executed top to bottom, carry no per-cell timing metadata, and stay light.

Timing metadata (``metadata.execution``) changes on every run, so a re-executed but unchanged lesson would
rewrite hundreds of JSON lines; ``make notebooks`` executes with ``record_timing=False``. A lesson of more
than ``MAX_LESSON_BYTES`` is slow to open, to diff and to review.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

LESSONS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
MAX_LESSON_BYTES = 600_000


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_is_executed_in_order_without_timing_metadata(path):
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    timed = [i for i, c in enumerate(cells) if "execution" in c.get("metadata", {})]
    assert not timed, f"{path.name}: code cells {timed} carry timing metadata; re-execute with `make notebooks`"
    counts = [c["execution_count"] for c in cells if c["source"]]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: not executed top to bottom once: {counts}"
    errors = [i for i, c in enumerate(cells) for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: code cells {errors} hold an error output"


def test_there_are_lessons():
    assert len(LESSONS) >= 6


def _heaviest_parts(nb: dict, count: int = 3) -> str:
    """The largest outputs (cell, MIME type) and saved widget models of a notebook, for the error message."""
    parts = [
        (len(json.dumps(value, indent=1)), f"cell {i} {mime}")
        for i, cell in enumerate(nb["cells"])
        for output in cell.get("outputs", [])
        for mime, value in output.get("data", {"stream": output.get("text", "")}).items()
    ]
    models = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    for model in models.get("state", {}).values():
        state = model.get("state", {})
        parts.append((len(json.dumps(state, indent=1)), f"widget state {state.get('_model_name', '?')}"))
    return ", ".join(f"{where} {size / 1000:.0f} KB" for size, where in sorted(parts, reverse=True)[:count])


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_is_at_most_600_kb(path):
    size = path.stat().st_size
    if size > MAX_LESSON_BYTES:
        heaviest = _heaviest_parts(json.loads(path.read_text(encoding="utf-8")))
        pytest.fail(f"{path.name} is {size / 1000:.0f} KB, over {MAX_LESSON_BYTES / 1000:.0f} KB; heaviest: {heaviest}")
