"""What a committed lesson holds beyond its cells: no saved widget state, and the kernel's own metadata.

Two things made a committed lesson mislead or change under a learner, and this module removes both:

* **Widgets drawn from saved state.** nbclient saves every widget's state in the notebook (``metadata.widgets``)
  and each output names its widget (``application/vnd.jupyter.widget-view+json``). JupyterLab then draws those
  widgets before their cell has run, or after a reload: a slider that moves and redraws nothing, since its Python
  callback is gone. So the state goes, and so does each output's widget view: an output keeps its static
  formats (the head view's PNG, a figure, its text), and a widget appears only when its cell runs. The text of
  a widget in a cell whose output nbval ignores (``NBVAL_IGNORE_OUTPUT``: the explorers, progress bars) becomes
  :data:`NOT_RUN_YET`, instead of a repr such as ``interactive(children=(...))`` or a progress bar frozen at 0 %.
  A head view's data (tokens and weights, a few KB) moves into its output's metadata under
  :data:`helpers.viewing.head_view.SAVED_HEAD_VIEW`, which nbval never compares and JupyterLab never draws: the
  offline site (``make site``, ``helpers.export_html``) draws its live head views from it.
* **The kernelspec.** JupyterLab writes the running kernel's display name into the notebook as it connects
  ("Python 3" becomes "Python 3 (ipykernel)"), so a lesson committed with another name opens marked modified and
  any save leaves a diff. Lessons are committed with :data:`KERNELSPEC`, what the course's kernel writes.

``make notebooks`` runs this after executing (and ``tests/test_notebook_hygiene.py`` holds every lesson to it)::

    python -m course.notebook_metadata notebooks/*.ipynb          # normalise in place
    python -m course.notebook_metadata --check notebooks/*.ipynb  # exit 1 naming the lessons that are not
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from helpers.tools.files import write_atomically
from helpers.viewing.head_view import HEAD_VIEW_IDS, SAVED_HEAD_VIEW

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# What ipykernel's own kernelspec says (.venv/share/jupyter/kernels/python3/kernel.json): JupyterLab writes it.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# The text an ignored widget output is left with: what a learner sees there before running the cell.
NOT_RUN_YET = "(a widget: it appears here when you run this cell)"
# The parts of a head view's saved state that draw it (helpers.viewing.head_view.standalone_html reads them).
HEAD_VIEW_KEYS = (
    "kind",
    "title",
    "query_tokens",
    "key_tokens",
    "layer_names",
    "weights",
    "weights_shape",
    "weights_uint8",
    "layer",
    "head",
    "view",
)


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _output_ignored(cell: dict) -> bool:
    """Whether nbval leaves this cell's output uncompared (its marker as a comment line, or as a tag)."""
    markers = {"NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP"}
    comments = {line.strip().lstrip("#").strip() for line in _source(cell).split("\n") if line.strip().startswith("#")}
    return bool(markers & (comments | set(cell.get("metadata", {}).get("tags", []))))


def _without_widget_view(output: dict, models: dict, ignored: bool) -> None:
    """Drop ``output``'s widget view in place; a head view's data goes to the output's metadata."""
    data = output["data"]
    model_id = data.pop(WIDGET_VIEW).get("model_id", "")
    state = models.get(model_id, {}).get("state", {})
    if state.get("_anywidget_id") in HEAD_VIEW_IDS:
        saved = {key: state[key] for key in HEAD_VIEW_KEYS if key in state}
        output.setdefault("metadata", {})[SAVED_HEAD_VIEW] = saved
    elif ignored:  # nbval compares no text here: say what the cell does, not what the widget's repr was
        data.clear()
        data["text/plain"] = NOT_RUN_YET
    if not data:
        data["text/plain"] = NOT_RUN_YET  # an output needs a format; a view alone had none


def normalise(notebook: dict) -> dict:
    """``notebook`` (as stored: a JSON dict) without widget state or views, with the course's kernelspec; in place."""
    metadata = notebook.setdefault("metadata", {})
    models = metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    metadata["kernelspec"] = dict(KERNELSPEC)
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            if WIDGET_VIEW in output.get("data", {}):
                _without_widget_view(output, models, _output_ignored(cell))
    return notebook


def problems(notebook: dict) -> list[str]:
    """What in ``notebook`` :func:`normalise` would change, in words (empty when nothing)."""
    found = []
    metadata = notebook.get("metadata", {})
    if "widgets" in metadata:
        found.append("saved widget state (metadata.widgets)")
    if metadata.get("kernelspec") != KERNELSPEC:
        found.append(f"kernelspec {metadata.get('kernelspec')!r}, not the course kernel's {KERNELSPEC!r}")
    views = sum(
        WIDGET_VIEW in output.get("data", {})
        for cell in notebook.get("cells", [])
        for output in cell.get("outputs", [])
    )
    if views:
        found.append(f"{views} output(s) naming a widget view")
    return found


def _serialise(notebook: dict) -> str:
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"  # nbformat's own layout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.notebook_metadata", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a lesson is not normalised")
    args = parser.parse_args(argv)
    failing = []
    for path in args.notebooks:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        found = problems(notebook)
        if not found:
            continue
        if args.check:
            failing.append(f"{path.name}: {'; '.join(found)}")
        else:
            write_atomically(path, _serialise(normalise(notebook)).encode("utf-8"))
            print(f"{path.name}: normalised ({'; '.join(found)})")
    if failing:
        print("\n".join(failing) + "\nrun `python -m course.notebook_metadata` on them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
