"""Which cells of a notebook a cell needs, from the names each cell binds and uses.

A lesson's student copy must run top to bottom with the learner's functions still unwritten: only the exercises
fail, their checks say "not attempted", and every other cell runs because it uses the reference code in helpers/,
never the learner's. Executing every student copy in full checks that, at the price of a second run of every lesson
(the lessons that train a model dominate). The same guarantee splits into two cheaper parts, and this module gives
both:

* ``learner_name_uses``: no cell after an exercise (other than its checks) uses a name whose value comes from the
  learner's code, and no kept cell uses a name that only a removed ``solution-only`` cell bound. Found statically,
  by Python's own scope analysis (``symtable``), including names used inside functions a cell defines. A use inside
  ``try: ... except NotImplementedError:`` is allowed: that cell is written to run before the exercise is done.
* ``needed_cells``: the cells an exercise and its check need (those that bind the names they use, transitively, plus
  the set-up cell), so the exercises and checks run for real in a fresh kernel without the lesson's training cells.

A cell is read as Python after IPython translates its magics; a cell that still does not parse, or that reaches
names in ways scope analysis cannot follow (``globals()``, ``eval``, ``exec``, ``locals()``), raises
``UnfollowableCell``: a caller then has to run that notebook in full instead.
"""

from __future__ import annotations

import ast
import symtable
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "CellNames",
    "UnfollowableCell",
    "cell_names",
    "learner_name_uses",
    "learner_names",
    "needed_cells",
    "unguarded_names",
]

# Calls that read or write names behind scope analysis' back.
_DYNAMIC = frozenset({"globals", "locals", "vars", "eval", "exec", "__import__"})


class UnfollowableCell(ValueError):
    """A cell whose names cannot be found statically (it does not parse, or it uses globals()/eval/exec)."""


@dataclass(frozen=True)
class CellNames:
    """The global names one cell binds (assigns, defines, imports) and the global names it uses."""

    binds: frozenset[str]
    needs: frozenset[str]


def _python(source: str) -> str:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # without IPython a cell with magics cannot be read; plain Python still can
        return source
    return TransformerManager().transform_cell(source)


def _global_uses(table: symtable.SymbolTable) -> set[str]:
    """Global names used anywhere below ``table``: in nested functions, classes and comprehensions too."""
    used = set()
    for child in table.get_children():
        used |= {s.get_name() for s in child.get_symbols() if s.is_referenced() and s.is_global()}
        used |= _global_uses(child)
    return used


def _names_of_python(python: str, where: str) -> CellNames:
    try:
        tree = ast.parse(python)
        table = symtable.symtable(python, where, "exec")
    except SyntaxError as error:
        raise UnfollowableCell(f"{where} is not valid Python ({error.msg}, line {error.lineno})") from None
    dynamic = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC
    }
    if dynamic:
        raise UnfollowableCell(f"{where} calls {', '.join(sorted(dynamic))}: its names cannot be followed statically")
    symbols = table.get_symbols()
    binds = {s.get_name() for s in symbols if s.is_assigned() or s.is_imported()}
    needs = {s.get_name() for s in symbols if s.is_referenced()} | _global_uses(table)
    return CellNames(frozenset(binds), frozenset(needs))


def cell_names(source: str, where: str = "<cell>") -> CellNames:
    """What one code cell binds and needs at the notebook's top level (magics translated first)."""
    return _names_of_python(_python(source), where)


class _WithoutGuardedTries(ast.NodeTransformer):
    """Drops the body of every ``try`` that catches NotImplementedError (what runs there may be unwritten)."""

    def visit_Try(self, node: ast.Try) -> ast.AST:
        self.generic_visit(node)
        if any(_catches_not_implemented(handler.type) for handler in node.handlers):
            node.body = [ast.Pass()]
        return node


def _catches_not_implemented(kind: ast.expr | None) -> bool:
    if kind is None:
        return False  # a bare except hides every error, not just an unwritten exercise: not a guard
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(isinstance(name, ast.Name) and name.id == "NotImplementedError" for name in names)


def unguarded_names(source: str, where: str = "<cell>") -> CellNames:
    """Like ``cell_names``, but names used only inside ``try`` bodies that catch NotImplementedError do not count."""
    python = _python(source)
    try:
        tree = _WithoutGuardedTries().visit(ast.parse(python))
    except SyntaxError:
        return cell_names(source, where)  # raises the clear error
    return _names_of_python(ast.unparse(ast.fix_missing_locations(tree)), where)


def _statements(source: str, where: str) -> list[CellNames]:
    """Each top-level statement's names, in order (uses inside NotImplementedError guards not counted)."""
    cell_names(source, where)  # the clear error for a cell that cannot be followed
    tree = _WithoutGuardedTries().visit(ast.parse(_python(source)))
    full = ast.parse(_python(source)).body
    return [
        CellNames(_names_of_python(ast.unparse(whole), where).binds, _names_of_python(ast.unparse(part), where).needs)
        for whole, part in zip(full, tree.body, strict=True)
    ]


def learner_names(source: str, functions: Iterable[str | None], where: str = "<cell>") -> frozenset[str]:
    """The names an exercise cell binds whose value depends on what the learner writes.

    ``functions`` names the functions whose bodies hold a solution region (None: a region at the cell's top
    level, so everything the cell binds depends on it). A later statement of the same cell that uses one of
    those names (``out = f(x)``) makes what it binds depend on the learner too.
    """
    functions = set(functions)
    if None in functions:
        return cell_names(source, where).binds
    tainted = {name for name in functions if name is not None}
    for statement in ast.parse(_python(source)).body:
        names = _names_of_python(ast.unparse(statement), where)
        if names.needs & tainted:
            tainted |= names.binds
    return frozenset(tainted)


def learner_name_uses(
    cells: Sequence[str | None],
    exercises: dict[int, Iterable[str | None]],
    checks: set[int],
    dropped: dict[int, str] | None = None,
) -> list[str]:
    """Every use of a name the learner's code would define, by a cell that is neither an exercise nor a check.

    ``cells``: the kept cells' sources in order (None for markdown and raw cells). ``exercises``: cell index →
    the functions whose bodies hold its solution regions (see ``learner_names``). ``checks``: indices of check
    cells, which are meant to call the learner's code. ``dropped``: the removed solution-only code cells,
    {index of the kept cell they came before: source}, whose names exist only in the solution notebook.
    Returns one sentence per problem (an empty list when the copy is safe).
    """
    dropped = dropped or {}
    tainted: dict[str, int] = {}  # name -> the exercise cell it comes from
    solution_only: set[str] = set()
    problems = []
    for index, source in enumerate(cells):
        if index in dropped:
            solution_only |= cell_names(dropped[index], f"the solution-only cell before cell {index}").binds
        if source is None:
            continue
        names = cell_names(source, f"cell {index}")
        if index in exercises:
            from_learner = learner_names(source, exercises[index], f"cell {index}")
            tainted.update(dict.fromkeys(from_learner, index))
            solution_only -= names.binds
            continue
        for name in sorted(names.needs & solution_only):
            problems.append(f"cell {index} uses `{name}`, which only a solution-only cell defines (gone in copies)")
        solution_only -= names.binds
        if index in checks:
            tainted = {name: cell for name, cell in tainted.items() if name not in names.binds}
            continue
        for statement in _statements(source, f"cell {index}"):  # in order: a rebinding ends the learner's name
            for name in sorted(statement.needs & tainted.keys()):
                problems.append(
                    f"cell {index} uses `{name}`, which the learner writes in cell {tainted[name]}: "
                    "a later cell must use the reference code in helpers/, not the exercise's function"
                )
            tainted = {name: cell for name, cell in tainted.items() if name not in statement.binds}
    return problems


def needed_cells(cells: Sequence[str | None], targets: Iterable[int], always: Iterable[int] = ()) -> list[int]:
    """The code cells to run, in order, so that every target cell finds the names it uses.

    Walks back from the last target: a cell is needed if it is a target, is in ``always`` (the lesson's set-up
    cell), or binds a name that a needed cell after it uses. A cell that only changes an object in place
    (``model.eval()``) is not found this way: targets should not depend on such cells.
    """
    targets, always = set(targets), set(always)
    wanted: set[str] = set()
    needed = []
    for index in range(len(cells) - 1, -1, -1):
        source = cells[index]
        if source is None:
            continue
        names = cell_names(source, f"cell {index}")
        if index in targets or index in always or (names.binds & wanted):
            needed.append(index)
            wanted |= names.needs
    return sorted(needed)
