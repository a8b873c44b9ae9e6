"""Committed lessons are executed top to bottom, carry no per-cell timing metadata, and stay light.

Timing metadata (``metadata.execution``) changes on every run, so a re-executed but unchanged lesson would
rewrite hundreds of JSON lines; ``make notebooks`` executes with ``record_timing=False``. A lesson of more
than ``MAX_LESSON_BYTES`` is slow to open, to diff and to review.
"""

from __future__ import annotations

import json
import re
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


# A measured number printed at 1e-10 or below (a mantissa with digits: "2.2e-16", not a constant such as
# eps=1e-12) is round-off: its digits change with the CPU, the BLAS and the thread count, so a cell that prints
# one must not have its output compared by nbval. Lesson 11 printed "2.2e-16" on one CPU and "4.4e-16" on another.
ROUND_OFF = re.compile(r"\b\d\.\d+e-(?:1\d|[2-9]\d|\d{3})\b")


def _output_ignored(cell: dict) -> bool:
    """nbval's rule: a comment line that is exactly the marker (text after it on the line is not a marker)."""
    lines = ("".join(cell["source"])).splitlines()
    return any(
        line.strip().lstrip("#").strip() in ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")
        for line in lines
        if line.strip().startswith("#")
    )


def _printed_text(cell: dict) -> str:
    return "".join(
        "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
        for output in cell.get("outputs", [])
    )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_compared_output_prints_round_off(path):
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    compared = [(i, c) for i, c in enumerate(cells) if not _output_ignored(c)]
    printing = {i: ROUND_OFF.findall(_printed_text(c)) for i, c in compared}
    printing = {i: found for i, found in printing.items() if found}
    assert not printing, (
        f"{path.name}: code cells {sorted(printing)} print round-off-sized numbers {printing} that differ between "
        "machines; mark the cell # NBVAL_IGNORE_OUTPUT and assert the bound instead (allclose / < 1e-12)"
    )


# A warning's first line names the file that raised it, an absolute path on the machine that executed the lesson
# (/work/…/site-packages/…): nbval compares it and fails on every other machine, and a learner reads a warning the
# lesson never explains. Silence the warning where it is expected, or mend its cause.
MACHINE_PATH = re.compile(r"(?:/site-packages/|/dist-packages/|/home/|/work/|/tmp/)\S*|\w+Warning: ")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_output_names_the_machine_it_ran_on_or_a_warning(path):
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    found = {i: MACHINE_PATH.findall(_printed_text(c)) for i, c in enumerate(cells)}
    found = {i: hits[:2] for i, hits in found.items() if hits}
    assert not found, f"{path.name}: code cells {sorted(found)} print a path of this machine or a warning: {found}"


# `import helpers` installs nothing (issue 58): a lesson asks for torch's threads to follow the machine's load with a
# call in its first cell, or fixes its thread count there (lessons 06-08), which the follower would obey anyway.
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_the_first_cell_chooses_how_torch_picks_its_threads(path):
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    first = "".join(cells[0]["source"])
    assert "follow_load_in_notebook()" in first or "torch.set_num_threads(" in first, (
        f"{path.name}: its first code cell neither calls follow_load_in_notebook() nor sets torch's thread count"
    )


# A widget drawn from saved state looks live in JupyterLab but its Python callbacks are gone until its cell runs
# again (a slider that redraws nothing), and JupyterLab rewrites any other kernelspec as it opens a lesson (a
# lesson opened is a lesson modified): `make notebooks` ends with course.notebook_metadata, which removes both.
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_has_no_widget_state_and_the_course_kernelspec(path):
    from course.notebook_metadata import KERNELSPEC, WIDGET_VIEW, problems

    nb = json.loads(path.read_text(encoding="utf-8"))
    assert not problems(nb), f"{path.name}: {'; '.join(problems(nb))}; run `make notebooks NB={path}`"
    # The same facts read directly, so that this test does not rest on problems() alone.
    assert "widgets" not in nb["metadata"]
    assert nb["metadata"]["kernelspec"] == KERNELSPEC
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]


def test_the_kernelspec_is_the_one_the_course_kernel_writes():
    """KERNELSPEC is what JupyterLab writes on opening a lesson: the installed ipykernel's own kernelspec."""
    from jupyter_client.kernelspec import KernelSpecManager

    from course.notebook_metadata import KERNELSPEC

    spec = KernelSpecManager().get_kernel_spec(KERNELSPEC["name"])
    assert (spec.display_name, spec.language) == (KERNELSPEC["display_name"], KERNELSPEC["language"])
