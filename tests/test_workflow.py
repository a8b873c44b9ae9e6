"""The GitHub workflow for forks (.github/workflows/ci.yml): what it runs, and that `make lint`'s linters would
catch a broken one (it cannot run here, so the linters are its only check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
BIN = Path(sys.executable).parent


def _steps() -> list[dict]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    return job["steps"]


def _runs() -> list[str]:
    return [step["run"] for step in _steps() if "run" in step]


def test_the_workflow_runs_ci_then_builds_and_uploads_the_site():
    runs = _runs()
    assert any("apt-get install" in run and "chromium" in run for run in runs), "chromium from the distribution"
    order = [run.strip() for run in runs]
    assert order.index("bash .ci/run") < order.index("make site")
    uploads = [step["with"] for step in _steps() if step.get("uses", "").startswith("actions/upload-artifact@")]
    assert {"name": "course-site", "path": "build/site"}.items() <= uploads[0].items()
    (cache,) = [step["with"] for step in _steps() if step.get("uses", "").startswith("actions/cache@")]
    assert "hashFiles('pyproject.toml')" in cache["key"]


def test_the_weekly_job_runs_the_student_copies_and_the_other_seeds_and_a_push_does_not():
    weekly = {step["run"].strip(): step.get("if", "") for step in _steps() if "run" in step}
    for target in ("make student-copies", "make other-seeds"):
        assert "schedule" in weekly[target] and "push" not in weekly[target], (target, weekly[target])
    makefile = (ROOT / "Makefile").read_text()
    assert "COURSE_OTHER_SEEDS=1" in makefile.split("\nother-seeds:")[1].split("\n\n")[0]
    assert "COURSE_OTHER_SEEDS" not in makefile.split("\ntest:")[1].split("\n\n")[0]


def _write(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ci.yml").write_text(text)
    return folder


def _schema(tmp_path: Path, text: str) -> int:
    """check-jsonschema's exit status on ``text`` against its offline copy of GitHub's workflow schema."""
    path = _write(tmp_path, text) / "ci.yml"
    command = [BIN / "check-jsonschema", "--builtin-schema", "vendor.github-workflows", path]
    return subprocess.run(command, capture_output=True).returncode


def _audit(tmp_path: Path, text: str) -> int:
    """zizmor's exit status on ``text`` (offline: it asks GitHub nothing)."""
    return subprocess.run(
        [BIN / "zizmor", "--offline", "--quiet", _write(tmp_path, text)], capture_output=True
    ).returncode


LINTERS = pytest.mark.skipif(
    not all((BIN / tool).exists() for tool in ("check-jsonschema", "zizmor")),
    reason="the workflow linters come with the test extra (pip install -e '.[test]')",
)


@LINTERS
@pytest.mark.integration  # runs the linters as processes (about 4 s): make test, not make unit
def test_the_schema_check_passes_the_workflow_and_catches_a_misspelt_key(tmp_path):
    text = WORKFLOW.read_text()
    assert _schema(tmp_path, text) == 0
    assert _schema(tmp_path, text.replace("runs-on:", "runs_on:")) != 0


@LINTERS
@pytest.mark.integration  # runs the linters as processes (about 4 s): make test, not make unit
def test_the_audit_passes_the_workflow_and_catches_an_unpinned_action_and_an_injection(tmp_path):
    text = WORKFLOW.read_text()
    assert _audit(tmp_path, text) == 0
    pinned = text.split("actions/checkout@")[1].split()[0]
    assert _audit(tmp_path, text.replace(f"actions/checkout@{pinned}", "actions/checkout@v7")) != 0
    injected = text.replace("run: make site", 'run: echo "${{ github.event.pull_request.title }}"')
    assert _audit(tmp_path, injected) != 0  # untrusted text in a shell command


def test_make_lint_runs_the_workflow_linters_of_the_environment():
    lint = (ROOT / "Makefile").read_text().split("\nlint:")[1].split("\n\n")[0]
    assert "$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows" in lint
    assert "$(BIN)/zizmor --offline" in lint
