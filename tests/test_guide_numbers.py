"""The teacher's guide's measured numbers are the ones benchmarks/guide_numbers.py last wrote (issue 38): its
blocks in docs/teaching.md are rendered from benchmarks/guide_numbers.json, and every lesson has a measurement that
says when it was taken and how busy the machine was."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("guide_numbers", ROOT / "benchmarks" / "guide_numbers.py")
guide_numbers = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(guide_numbers)


def test_the_guides_numbers_are_what_the_script_last_wrote():
    guide = guide_numbers.GUIDE.read_text(encoding="utf-8")
    names = [match.group(2) for match in guide_numbers.BLOCK.finditer(guide)]
    assert sorted(names) == sorted(guide_numbers.BLOCKS), names  # each block once
    results = json.loads(guide_numbers.RESULTS.read_text())
    assert guide_numbers.render(guide, results) == guide, (
        "docs/teaching.md's numbers differ from benchmarks/guide_numbers.json: run "
        "`.venv/bin/python benchmarks/guide_numbers.py --write-guide-only` (or measure again without it)"
    )


def test_every_lesson_and_the_site_are_measured_with_the_load_beside_them():
    results = json.loads(guide_numbers.RESULTS.read_text())
    lessons = sorted(path.stem for path in (ROOT / "notebooks").glob(guide_numbers.LESSON_GLOB))
    assert sorted(results["lessons"]) == lessons, "measure the new lesson: benchmarks/guide_numbers.py --lessons NN"
    for measured in [*results["lessons"].values(), results["site"]]:
        assert measured["load_1min"] >= 0 and measured["at"].endswith("UTC"), measured
    assert results["site"]["lessons"] == len(lessons)


def test_a_changed_measurement_changes_the_guide():
    guide = guide_numbers.GUIDE.read_text(encoding="utf-8")
    results = json.loads(guide_numbers.RESULTS.read_text())
    first = sorted(results["lessons"])[0]
    results["lessons"][first]["wall_s"] += 1000
    assert f"{results['lessons'][first]['wall_s']:.1f}" in guide_numbers.render(guide, results)
    assert guide_numbers.render(guide, results) != guide


def test_every_lesson_has_a_grading_time_and_a_class_of_30_is_scaled_from_it():
    results = json.loads(guide_numbers.RESULTS.read_text())
    lessons = sorted(path.stem for path in (ROOT / "notebooks").glob(guide_numbers.LESSON_GLOB))
    assert sorted(results["grading"]) == lessons, (
        "time the new lesson's grading: benchmarks/guide_numbers.py --no-lessons --no-site --grading NN"
    )
    results["grading"] = {"13_hybrid_attention": {"jobs1_s": 120.0, "jobs2_s": 64.0, "students": 2, "load": "0–1",
                                                  "at": "today"}}  # fmt: skip
    block = guide_numbers.grading_block(results)
    # 30 students: 30 notebooks of 60 s in turn with one job (30 min); with two, 15 turns of the 64 s two took (16 min).
    assert "| 13 | 120.0 s (60.0 s a notebook) | 64.0 s | 1.88× | 30 min / 16 min | today (0–1) |" in block, block
    assert "| 16 | not measured: `benchmarks/guide_numbers.py --no-lessons --no-site --grading 16` |" in block
