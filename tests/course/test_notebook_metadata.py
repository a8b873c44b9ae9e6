"""course.notebook_metadata: a lesson as committed holds no widget state, no widget views, and the course's kernelspec;
a head view's data survives in its output's metadata, and the offline export draws the live view from it."""

from __future__ import annotations

import json

import nbformat
import pytest
import torch

from course import notebook_metadata
from course.notebook_metadata import KERNELSPEC, NOT_RUN_YET, WIDGET_STATE, WIDGET_VIEW, normalise, problems
from course.site import head_view_count
from helpers.viewing.head_view import HEAD_VIEW_ID, SAVED_HEAD_VIEW, export_html, head_view_data


def _view(model_id: str, text: str, png: bool = False) -> dict:
    data = {WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0}, "text/plain": text}
    if png:
        data["image/png"] = "iVBORw0KGgo="
    return {"output_type": "display_data", "data": data, "metadata": {}}


def _executed() -> dict:
    """A lesson as nbclient leaves it: a head view, a slider explorer (output ignored) and their saved state."""
    weights = torch.softmax(torch.randn(1, 2, 3, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    head_view = head_view_data(weights, ["Eine", "Mutter", "."]) | {
        "_anywidget_id": HEAD_VIEW_ID,
        "_esm": "// 17 KB of script",
        "layer": 0,
        "head": -1,
        "view": "lines",
    }
    state = {
        "hv": {"model_name": "AnyModel", "state": head_view},
        "box": {"model_name": "VBoxModel", "state": {"_model_name": "VBoxModel", "children": []}},
    }
    cells = [
        {"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# Lesson 99: a test"},
        {
            "cell_type": "code",
            "id": "b",
            "execution_count": 1,
            "metadata": {},
            "source": "head_view(weights, tokens)",
            "outputs": [_view("hv", "HeadView(kind='self', layers=1, heads=2, queries=3, keys=3)", png=True)],
        },
        {
            "cell_type": "code",
            "id": "c",
            "execution_count": 2,
            "metadata": {},
            "source": "# NBVAL_IGNORE_OUTPUT\nexplorer()",
            "outputs": [_view("box", "interactive(children=(IntSlider(value=0),))")],
        },
    ]
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "widgets": {WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_normalise_drops_widget_state_and_views_and_writes_the_kernels_kernelspec():
    notebook = _executed()
    assert len(problems(notebook)) == 3
    normalise(notebook)
    assert problems(notebook) == []
    assert "widgets" not in notebook["metadata"] and notebook["metadata"]["kernelspec"] == KERNELSPEC
    head_view, explorer = (cell["outputs"][0] for cell in notebook["cells"][1:])
    # The head view keeps its static picture and the text nbval compares; its data, not its script, is kept.
    assert set(head_view["data"]) == {"image/png", "text/plain"}
    saved = head_view["metadata"][SAVED_HEAD_VIEW]
    assert saved["query_tokens"] == ["Eine", "Mutter", "."] and "_esm" not in saved
    # The explorer, whose output nbval ignores, says what the cell does instead of a stale repr.
    assert explorer["data"] == {"text/plain": NOT_RUN_YET}
    nbformat.validate(nbformat.from_dict(notebook))


def test_normalise_keeps_the_text_of_a_widget_whose_output_nbval_compares():
    notebook = _executed()
    notebook["cells"][2]["source"] = "explorer()"
    normalise(notebook)
    assert notebook["cells"][2]["outputs"][0]["data"] == {"text/plain": "interactive(children=(IntSlider(value=0),))"}


def test_normalise_is_idempotent():
    once = normalise(_executed())
    twice = normalise(json.loads(json.dumps(once)))
    assert twice == once


def test_the_export_and_the_site_draw_the_head_view_from_the_saved_data(tmp_path):
    path = tmp_path / "99_test.ipynb"
    path.write_text(json.dumps(normalise(_executed())), encoding="utf-8")
    assert head_view_count(json.loads(path.read_text(encoding="utf-8"))) == 1
    page = export_html(path).read_text(encoding="utf-8")
    assert page.count('class="hv-standalone"') == 1 and '"Mutter"' in page
    assert "iVBORw0KGgo=" not in page  # the live view replaces the static picture


def test_the_command_normalises_in_place_and_check_fails_until_it_has(tmp_path, capsys):
    path = tmp_path / "99_test.ipynb"
    path.write_text(json.dumps(_executed()), encoding="utf-8")
    assert notebook_metadata.main(["--check", str(path)]) == 1
    assert "saved widget state" in capsys.readouterr().err
    assert notebook_metadata.main([str(path)]) == 0
    assert notebook_metadata.main(["--check", str(path)]) == 0
    written = path.read_text(encoding="utf-8")
    assert notebook_metadata.main([str(path)]) == 0 and path.read_text(encoding="utf-8") == written


@pytest.mark.parametrize("marker", ["# NBVAL_IGNORE_OUTPUT", "#NBVAL_SKIP"])
def test_nbvals_markers_are_read_as_nbval_reads_them(marker):
    assert notebook_metadata._output_ignored({"source": f"x = 1\n{marker}\nexplorer()", "metadata": {}})
    assert not notebook_metadata._output_ignored({"source": "explorer()  # NBVAL_IGNORE_OUTPUT", "metadata": {}})
