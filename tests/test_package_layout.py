"""The package's layers: which modules may import which, and what a light import loads."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parents[1] / "helpers"

# Lower layers never import higher ones. The ideas are helpers' top-level modules.
LAYERS = {"tools": 0, "ideas": 1, "data": 2, "models": 3, "analysis": 4, "viewing": 5}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "ideas"  # the package itself, whose names are lazy
    return parts[1] if parts[1] in LAYERS else "ideas"


def helpers_imports(path: Path) -> set[str]:
    """Every ``helpers…`` module a file imports, at top level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "helpers" or name.startswith("helpers.")}


MODULES = sorted(p for p in HELPERS.rglob("*.py") if p.name != "__init__.py" or p.parent != HELPERS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(HELPERS)))
def test_no_module_imports_a_higher_layer(path):
    module = ".".join(("helpers", *path.relative_to(HELPERS).with_suffix("").parts))
    mine = LAYERS[layer_of(module)]
    upward = sorted(m for m in helpers_imports(path) if LAYERS[layer_of(m)] > mine)
    assert not upward, f"{module} ({layer_of(module)}) imports the higher layer(s) {upward}"


def test_no_module_imports_the_lazy_package_root():
    """Importing names from ``helpers`` itself would hide the real dependency (and can cycle)."""
    offenders = [str(p.relative_to(HELPERS)) for p in MODULES if "helpers" in helpers_imports(p)]
    assert not offenders


@pytest.mark.integration  # a fresh interpreter: make test, not make unit
def test_importing_attention_loads_no_plotting_widgets_or_evaluation():
    code = (
        "import sys, helpers.attention\n"
        "heavy = ['matplotlib', 'seaborn', 'anywidget', 'ipywidgets', 'sacrebleu', 'transformers', 'tokenizers',\n"
        "         'helpers.models.translation.distributed', 'helpers.viewing.plotting']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "", f"import helpers.attention also loaded {loaded}"


@pytest.mark.integration  # fresh interpreters: make test, not make unit
def test_the_courses_processes_read_notebooks_without_compiling_the_iri_grammar():
    """course/__init__.py keeps jsonschema from importing rfc3987_syntax (1.9 s of lark in every supervisor), and
    nbformat still validates: a notebook with a wrong field is refused, a right one passes."""
    code = (
        "import sys, course, nbformat\n"
        "from nbformat import v4\n"
        "nbformat.validate(v4.new_notebook(cells=[v4.new_code_cell('1')]))\n"
        "broken = v4.new_notebook(cells=[v4.new_code_cell('1')]); broken.cells[0]['execution_count'] = 'one'\n"
        "try:\n"
        "    nbformat.validate(broken)\n"
        "except nbformat.ValidationError:\n"
        "    print('refused')\n"
        "print('lark' in sys.modules)\n"
    )
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert said == ["refused", "False"], said
    # the test can fail: without the course's import first, the grammar is compiled (when the package is there)
    plain = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, nbformat; print(any(m in sys.modules for m in ('lark', 'rfc3987_syntax')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    import importlib.util

    assert plain == [str(importlib.util.find_spec("rfc3987_syntax") is not None)]


@pytest.mark.integration  # a fresh interpreter: make test, not make unit
def test_every_lazy_name_resolves():
    # In a fresh interpreter, as a lesson's kernel starts: in this worker another test may have loaded transformers'
    # reference model, which imports Triton for a GPU, after which helpers.kernels rightly refuses to load (its
    # error says to start a fresh Python).
    script = (
        "import helpers\n"
        "missing = [name for name in helpers.__all__ if getattr(helpers, name, None) is None]\n"
        "assert not missing, missing\n"
        "try:\n    helpers.nonexistent\nexcept AttributeError as error:\n    print(error)\n"
    )
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, capture_output=True, text=True, cwd=HELPERS.parent, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no attribute 'nonexistent'" in result.stdout, result.stdout
