"""Widget ids in executed lessons are stable: the same lesson gives the same ids on every run."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest

from course.notebook_ids import NAMESPACE, STATE_KEY, VIEW_KEY, main, stabilize, stable_order

LESSONS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def _executed(ids: list[str]) -> dict:
    """A notebook as nbclient saves it: a box (ids[0]) shown in a cell, holding a slider (ids[1]) whose layout
    is ids[2]; an orphan layout ids[3] that nothing refers to."""
    box, slider, layout, orphan = ids

    def model(name: str, **state) -> dict:
        return {"model_name": name, "state": state}

    return {
        "cells": [
            {"cell_type": "code", "outputs": [{"data": {VIEW_KEY: {"model_id": box, "version_major": 2}}}]},
        ],
        "metadata": {
            "widgets": {
                STATE_KEY: {
                    "state": {
                        orphan: model("LayoutModel", width="10px"),
                        layout: model("LayoutModel", width=None),
                        slider: model("IntSliderModel", layout=f"IPY_MODEL_{layout}", value=3),
                        box: model("VBoxModel", children=[f"IPY_MODEL_{slider}"]),
                    }
                }
            }
        },
    }


def _random_ids() -> list[str]:
    return [uuid.uuid4().hex for _ in range(4)]


def test_the_same_notebook_with_other_random_ids_gets_the_same_stable_ids():
    first, second = stabilize(_executed(_random_ids()), "03.ipynb"), stabilize(_executed(_random_ids()), "03.ipynb")
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_references_follow_the_renaming_and_the_order_starts_from_what_is_shown():
    ids = _random_ids()
    notebook = _executed(ids)
    assert stable_order(notebook) == ids  # shown box, its slider, the slider's layout, then the orphan
    stable = stabilize(notebook, "03.ipynb")
    state = stable["metadata"]["widgets"][STATE_KEY]["state"]
    shown = stable["cells"][0]["outputs"][0]["data"][VIEW_KEY]["model_id"]
    (child,) = state[shown]["state"]["children"]
    assert child.removeprefix("IPY_MODEL_") in state
    assert not set(ids) & set(state)  # no old id survives
    assert stabilize(stable, "03.ipynb") == stable  # idempotent
    assert list(state) == [uuid.uuid5(NAMESPACE, f"03.ipynb:{i}").hex for i in range(4)]  # saved in that order


def test_check_mode_reports_unstable_ids_and_changes_nothing(tmp_path, capsys):
    path = tmp_path / "03.ipynb"
    path.write_text(json.dumps(_executed(_random_ids())))
    before = path.read_text()
    assert main(["--check", str(path)]) == 1
    assert path.read_text() == before and "make notebooks" in capsys.readouterr().err
    assert main([str(path)]) == 0
    assert main(["--check", str(path)]) == 0


def test_a_notebook_without_widgets_is_left_alone():
    notebook = {"cells": [{"cell_type": "code", "outputs": []}], "metadata": {}}
    assert stabilize(copy.deepcopy(notebook), "01.ipynb") == notebook


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_committed_lessons_carry_stable_widget_ids(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    stable = stabilize(notebook, path.name)
    assert json.dumps(stable) == json.dumps(notebook), f"{path.name}: run `make notebooks NB={path.as_posix()}`"
