"""`make lab`, the learner's path: their own copies of the lessons, served by a JupyterLab without nbgrader.

`make lab` (with MINE, the learner's folder, in a temporary folder here) makes the student copies and serves them.
Over HTTP: the copies are the root, nbgrader's server extensions answer nothing, its lab extension is disabled.
In headless Chromium (Debian's `chromium`, driven by Playwright; skipped, loudly, without it), what a learner does
in the first minutes: open lesson 02, which opening leaves unmodified; see no nbgrader menu, button or panel; run
it and find the empty exercise whose check says NOT YET; write a right answer, run again, get PASS; save, and find
the work in the learner's folder while the lesson in notebooks/ is as it was. Screenshots: test-artifacts/browser/.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from chromium import CHROMIUM, CHROMIUM_FLAGS, skip_without_browser, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
LESSON_02 = next((ROOT / "notebooks").glob("02_*.ipynb"))
ANSWER = "def linear_projection(x, weight, bias):\n    return x @ weight.T + bias  # (N, L, E_in) -> (N, L, E_out)\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` on a free port, the learner's folder and Jupyter's own state in a temporary folder."""
    base = tmp_path_factory.mktemp("lab")
    mine, home = base / "my-lessons", base / "jupyter"
    port, token = _free_port(), "course-test-token"
    env = {
        **os.environ,
        "JUPYTER_TOKEN": token,
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "lab-workspaces"),
    }
    # Render every cell (JupyterLab 4 otherwise renders only the cells in view) and fetch no news.
    settings = home / "lab-settings" / "@jupyterlab"
    for extension, name, values in [
        ("notebook-extension", "tracker", {"windowingMode": "none"}),
        ("apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False}),
    ]:
        (settings / extension).mkdir(parents=True, exist_ok=True)
        (settings / extension / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    server = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"PORT={port}", f"MINE={mine}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, f"make lab exited early: {server.stderr.read().decode()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "JupyterLab did not answer within 90 s"
                time.sleep(0.5)
        yield {"url": url, "token": token, "mine": mine}
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        server.wait(timeout=60)


def test_make_lab_serves_the_learners_copies_and_no_nbgrader(lab):
    status, body = _get(f"{lab['url']}/api/contents?token={lab['token']}")
    served = {item["name"] for item in json.loads(body)["content"]}
    lessons = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert status == 200 and lessons and served == lessons, f"expected the copies of {sorted(lessons)}, got {served}"
    copy = (lab["mine"] / LESSON_02.name).read_text(encoding="utf-8")
    assert "# BEGIN SOLUTION" not in copy and "raise NotImplementedError()" in copy
    # nbgrader's server extensions are off (its formgrader page is not there) and so is its lab extension.
    assert _get(f"{lab['url']}/formgrader?token={lab['token']}")[0] == 404
    page = _get(f"{lab['url']}/lab?token={lab['token']}")[1].decode()
    assert '"disabledExtensions": ["@jupyter/nbgrader"]' in page


def test_a_teachers_lab_serves_the_lessons_with_nbgrader():
    """TEACHER=1 is the lessons themselves with nbgrader on (what the learner's lab leaves out), as make prints it."""
    teacher = subprocess.run(["make", "-n", "lab", "TEACHER=1"], cwd=ROOT, capture_output=True, text=True, check=True)
    learner = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "--ServerApp.root_dir=notebooks" in teacher.stdout and "learner_lab" not in teacher.stdout
    assert "course.learner copy --into my-lessons" in learner.stdout and "course/learner_lab" in learner.stdout


# ---------------------------------------------------------------------------------------------
# In a real browser
# ---------------------------------------------------------------------------------------------
def _kernel_ready(lab, name: str, timeout_s: float = 120) -> None:
    """Until the notebook's kernel is idle with the page connected to it (asked of the server: JupyterLab's own
    indicator reads "idle" for a moment before the kernel has even started)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sessions = json.loads(_get(f"{lab['url']}/api/sessions?token={lab['token']}")[1])
        kernels = [s["kernel"] for s in sessions if s["path"] == name]
        if kernels and kernels[0]["execution_state"] == "idle" and kernels[0]["connections"] > 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"the kernel of {name} was not ready within {timeout_s:.0f} s")


def _run_all_cells(page, timeout_ms: int = 300_000) -> None:
    """Run > Run All Cells, then wait until every code cell shows an execution count and none is queued."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    page.wait_for_function(
        r"""() => {
            const panel = [...document.querySelectorAll('.jp-NotebookPanel')].find(p => p.offsetParent !== null);
            const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent);
            return prompts.length > 0 && prompts.every(p => /\[\d+\]/.test(p));
        }""",
        timeout=timeout_ms,
    )


def _check_output(page) -> str:
    """The text of the output that holds linear_projection's verdict (the check cell after the exercise)."""
    verdicts = page.locator(".jp-OutputArea-output", has_text="linear projection")
    verdicts.first.wait_for(timeout=60_000)
    return verdicts.first.inner_text()


@skip_without_browser
def test_a_learner_solves_an_exercise_of_lesson_02_in_their_own_copy(lab):
    name, copy = LESSON_02.name, lab["mine"] / LESSON_02.name
    lesson_before, copy_before = LESSON_02.read_bytes(), copy.read_bytes()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        page.set_default_timeout(60_000)
        try:
            page.goto(f"{lab['url']}/lab/tree/{name}?reset&token={lab['token']}")
            page.wait_for_selector(".jp-Notebook >> visible=true")
            _kernel_ready(lab, name)
            page.wait_for_timeout(2000)  # what JupyterLab writes into a notebook it writes as the kernel connects
            # Opening the lesson changed nothing: no unsaved-changes mark, the file as it was.
            assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0, "opening the lesson modified it"
            assert copy.read_bytes() == copy_before
            # No teacher's tools: nbgrader's menu, its Validate button and its Create Assignment panel.
            menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
            assert "File" in menus and "Nbgrader" not in menus, menus
            titles = page.locator(".jp-NotebookPanel-toolbar [title], .lm-TabBar-tab[title]").evaluate_all(
                "els => els.map(e => e.title)"
            )
            assert any("Save" in t for t in titles) and not [t for t in titles if "Validate" in t or "Assignment" in t]

            _run_all_cells(page)
            verdict = _check_output(page)
            assert verdict.startswith("[NOT YET] linear projection: not attempted yet: write your code"), verdict
            page.screenshot(path=ARTIFACTS / "learner-lesson-02-not-yet.png")

            # The learner writes a right answer in place of the stub, runs the lesson again, and passes.
            exercise = page.locator(".jp-CodeCell", has_text="def linear_projection").first
            exercise.locator(".cm-content").click()
            page.keyboard.press("ControlOrMeta+a")
            page.keyboard.insert_text(ANSWER)
            _run_all_cells(page)
            verdict = _check_output(page)
            assert verdict.startswith("[PASS] linear projection"), verdict
            page.screenshot(path=ARTIFACTS / "learner-lesson-02-pass.png")
            page.keyboard.press("ControlOrMeta+s")
            deadline = time.monotonic() + 30
            while "return x @ weight.T + bias" not in copy.read_text(encoding="utf-8"):
                assert time.monotonic() < deadline, "the learner's answer was not saved within 30 s"
                time.sleep(0.5)
        finally:
            page.screenshot(path=ARTIFACTS / "learner-lesson-02-end.png")
            browser.close()
    # The work is in the learner's folder, outside the tracked lessons, which are as they were.
    assert lab["mine"].resolve() not in ROOT.joinpath("notebooks").resolve().parents
    assert LESSON_02.read_bytes() == lesson_before
