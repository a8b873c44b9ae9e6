"""Committed lessons are executed top to bottom and carry no per-cell timing metadata.

Timing metadata (``metadata.execution``) changes on every run, so a re-executed but unchanged lesson would
rewrite hundreds of JSON lines; ``make notebooks`` executes with ``record_timing=False``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

LESSONS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


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
