"""Stable widget ids in executed lessons, so that re-running an unchanged lesson leaves git clean.

Each widget a lesson displays gets a random 32-hex model id when it is created; nbclient saves the widgets'
state under those ids (``metadata.widgets``) and each output names its widget by id. Re-executing a lesson
therefore rewrites every id although nothing changed. This module renames the ids by their place in the
notebook: widgets in the order the outputs show them, then the widgets those refer to (children, layouts,
styles) breadth first, then any left over in the order of their content. The same lesson gives the same ids
on every run.

    python -m course.notebook_ids notebooks/*.ipynb          # what ``make notebooks`` runs after executing
    python -m course.notebook_ids --check notebooks/*.ipynb  # exit 1 if a lesson's ids are not the stable ones
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from helpers.tools.files import write_atomically

STATE_KEY = "application/vnd.jupyter.widget-state+json"
VIEW_KEY = "application/vnd.jupyter.widget-view+json"
REFERENCE = re.compile(r"IPY_MODEL_([0-9a-f]{32})")
NAMESPACE = uuid.UUID("6f1d9b1e-8a53-4c3e-9d0a-0c6f3a1b2e47")  # this course's own namespace for uuid5


def _widget_state(notebook: dict) -> dict[str, dict]:
    return notebook.get("metadata", {}).get("widgets", {}).get(STATE_KEY, {}).get("state", {})


def _shown_ids(notebook: dict) -> list[str]:
    """Model ids of the widget views in the outputs, in cell order."""
    ids = []
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(VIEW_KEY)
            if view and view.get("model_id"):
                ids.append(view["model_id"])
    return ids


def stable_order(notebook: dict) -> list[str]:
    """Every widget id of ``notebook`` in an order that does not depend on the random ids themselves."""
    state = _widget_state(notebook)
    order: list[str] = []
    queue = [i for i in _shown_ids(notebook) if i in state]
    while queue:  # breadth first from the widgets the outputs show, through the references in their state
        model_id = queue.pop(0)
        if model_id in order:
            continue
        order.append(model_id)
        queue.extend(REFERENCE.findall(json.dumps(state[model_id], sort_keys=True)))
    leftovers = [i for i in state if i not in order]

    def content(model_id: str) -> str:  # a widget's state with every id masked: the same on every run
        return REFERENCE.sub("IPY_MODEL_", json.dumps(state[model_id], sort_keys=True))

    return order + sorted(leftovers, key=content)


def stabilize(notebook: dict, name: str) -> dict:
    """``notebook`` with each widget id replaced by one derived from ``name`` and the widget's place."""
    order = stable_order(notebook)
    if not order:
        return notebook
    new = {old: uuid.uuid5(NAMESPACE, f"{name}:{index}").hex for index, old in enumerate(order)}
    pattern = re.compile("|".join(map(re.escape, new)))
    text = pattern.sub(lambda match: new[match.group(0)], json.dumps(notebook, ensure_ascii=False))
    stable = json.loads(text)
    state = _widget_state(stable)
    ordered = {new[old]: state[new[old]] for old in order}  # saved in the stable order, not the random one
    state.clear()
    state.update(ordered)
    return stable


def _serialise(notebook: dict) -> str:
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"  # nbformat's own layout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.notebook_ids", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any ids are not stable")
    args = parser.parse_args(argv)
    unstable = []
    for path in args.notebooks:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        stable = stabilize(notebook, path.name)
        if _serialise(stable) == _serialise(notebook):  # key order counts: it is what git sees
            continue
        if args.check:
            unstable.append(path.name)
        else:
            write_atomically(path, _serialise(stable).encode("utf-8"))
            print(f"{path.name}: widget ids made stable")
    if unstable:
        print(f"widget ids not stable in {', '.join(unstable)}: run `make notebooks`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
