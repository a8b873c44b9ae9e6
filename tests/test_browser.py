"""The course in a real browser: JupyterLab served as `make lab` does, and exported HTML opened offline.

Headless Chromium (Debian's `chromium` package; Playwright's own browser download is never used) is
driven by Playwright for Python. What is checked is what a learner sees: lesson 03's slider redraws its
figure; a lesson as committed draws no widget before its cells run (no saved widget state: a widget drawn from
it would look live and do nothing), only its static pictures; the head view appears when its cell runs, and
hovering a token changes what it shows; an exported page works with every network request refused.
The browser console must stay free of errors. Screenshots go to test-artifacts/browser/.

Without a `chromium` on PATH the tests are skipped, loudly (a warning in pytest's summary); `.ci/run`
installs it first, so CI always runs them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from chromium import CHROMIUM, CHROMIUM_FLAGS, skip_without_browser, sync_playwright

from course import notebook_metadata
from helpers.viewing.head_view import export_html

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
LESSON_03 = ROOT / "notebooks" / "03_scaled_dot_product_attention.ipynb"
LESSON_06 = ROOT / "notebooks" / "06_translation.ipynb"
pytestmark = skip_without_browser

# A notebook with one view of each kind: self-attention, masked self-attention, cross-attention.
HEAD_VIEW_CELLS = [
    "import torch\n"
    "from helpers import head_view\n\n"
    "generator = torch.Generator().manual_seed(0)\n"
    "tokens = ['Eine', 'Mutter', 'und', 'ihr', 'Sohn', '.']\n"
    "scores = 2 * torch.randn(2, 4, 6, 6, generator=generator)  # (n_layers, h, L, S)",
    "head_view(torch.softmax(scores, dim=-1), tokens)",
    "future = torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1)\n"
    "head_view(torch.softmax(scores.masked_fill(future, float('-inf')), dim=-1), tokens, kind='causal')",
    "target = ['A', 'mother', 'and', 'her', 'son', '.', '<eos>']\n"
    "cross = torch.softmax(2 * torch.randn(2, 4, 7, 6, generator=generator), dim=-1)  # (n_layers, h, L, S)\n"
    "head_view(cross, target, tokens, kind='cross', layer_names=['decoder 0', 'decoder 1'])",
]


def _lesson_06_has_a_head_view() -> bool:
    return any("head_view(" in "".join(c["source"]) for c in nbformat.read(LESSON_06, as_version=4).cells)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder for the server: copies of the lessons (so the repository's files are never saved over)
    and a small head-view notebook executed by nbclient and committed as `make notebooks` commits a lesson."""
    base = tmp_path_factory.mktemp("browser")
    root, home = base / "notebooks", base / "jupyter"
    root.mkdir()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),  # also where notebook trust is recorded
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "lab-workspaces"),
    }
    settings = home / "lab-settings" / "@jupyterlab"
    # Render every cell (JupyterLab 4 otherwise renders only the cells in view) and fetch no news.
    for extension, name, values in [
        ("notebook-extension", "tracker", {"windowingMode": "none"}),
        ("apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False}),
    ]:
        (settings / extension).mkdir(parents=True, exist_ok=True)
        (settings / extension / f"{name}.jupyterlab-settings").write_text(json.dumps(values))

    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in HEAD_VIEW_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    NotebookClient(nb, timeout=300, kernel_name="python3", shutdown_kernel="immediate").execute()
    nbformat.write(nb, root / "head_view.ipynb")
    notebook_metadata.main([str(root / "head_view.ipynb")])  # no widget state, as make notebooks leaves a lesson
    shutil.copy(LESSON_03, root)
    if _lesson_06_has_a_head_view():
        shutil.copy(LESSON_06, root)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return {"root": root, "env": env}


@pytest.fixture(scope="module")
def lab(workspace):
    """JupyterLab started with `make lab`'s options (no browser, loopback, a port), on the copies."""
    port, token = _free_port(), "browser-test-token"
    argv = [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}"]
    argv += [f"--ServerApp.root_dir={workspace['root']}"] + (["--allow-root"] if os.getuid() == 0 else [])
    server = subprocess.Popen(
        argv,
        env={**workspace["env"], "JUPYTER_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, f"jupyter lab exited early: {server.stderr.read().decode()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "JupyterLab did not answer within 90 s"
                time.sleep(0.5)
        yield {"base": base, "token": token}
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        server.wait(timeout=60)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


class Console:
    """Collects the page's uncaught exceptions and console errors."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)


@pytest.fixture
def pages(request):
    """New pages are listed here; each is photographed at the end of the test (passed or failed), then closed."""
    opened = []
    yield opened
    for n, page in enumerate(opened):
        if not page.is_closed():
            page.screenshot(path=ARTIFACTS / f"{request.node.name}-end-{n}.png")
            page.close()


def _open_notebook(browser, lab, name: str, pages: list):
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    pages.append(page)
    console = Console(page)
    page.set_default_timeout(60_000)
    page.goto(f"{lab['base']}/lab/tree/{name}?reset&token={lab['token']}")
    page.wait_for_selector(".jp-Notebook >> visible=true")
    _wait_for_connected_kernel(lab, name)
    return page, console


def _wait_for_connected_kernel(lab, name: str, timeout_s: float = 120) -> None:
    """Until the notebook's kernel is idle with the page connected to it (JupyterLab's own indicator reads
    "idle" for a moment before the kernel has even started, so the server is asked instead)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{lab['base']}/api/sessions?token={lab['token']}", timeout=5) as response:
            sessions = json.load(response)
        kernels = [s["kernel"] for s in sessions if s["path"] == name]
        if kernels and kernels[0]["execution_state"] == "idle" and kernels[0]["connections"] > 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"the kernel of {name} was not ready within {timeout_s:.0f} s")


def _run_all_cells(page, timeout_ms: int) -> None:
    """Run > Run All Cells, then wait until every code cell shows an execution count and none is queued."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    page.wait_for_function(
        r"""() => {
            const panel = [...document.querySelectorAll('.jp-NotebookPanel')].find(p => p.offsetParent !== null);
            // the input area's own prompt: a folded solution cell shows a placeholder whose prompt stays empty
            const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent);
            return prompts.length > 0 && prompts.every(p => /\[\d+\]/.test(p));
        }""",
        timeout=timeout_ms,
    )


def _visible_lines(view) -> int:
    return view.locator(".hv-line:not(.hv-hidden)").count()


def _check_hover_and_clicks(page, view, label: str) -> None:
    """Hovering a token keeps only its lines; clicking a head isolates it; a thumbnail opens its head."""
    view.scroll_into_view_if_needed()
    if view.locator(".hv-lines-view").count() == 0:
        view.locator(".hv-view-button[data-view='lines']").click()
    all_lines = _visible_lines(view)
    view.locator(".hv-query-token").nth(1).hover()
    page.wait_for_timeout(100)
    focused = _visible_lines(view)
    assert 0 < focused < all_lines, f"{label}: hovering a token should keep only its lines ({all_lines} -> {focused})"
    assert view.locator(".hv-bar").count() > 0, f"{label}: hovering a token should draw its weights as bars"
    heads = {int(h) for h in view.locator(".hv-line").evaluate_all("ls => ls.map(l => l.dataset.head)")}
    page.screenshot(path=ARTIFACTS / f"{label}-hover.png")
    page.mouse.move(0, 0)
    view.locator(".hv-head-swatch[data-head='1']").click()
    isolated = {int(h) for h in view.locator(".hv-line").evaluate_all("ls => ls.map(l => l.dataset.head)")}
    assert len(heads) > 1 and isolated == {1}, f"{label}: clicking head 1 should show it alone, got heads {isolated}"
    view.locator(".hv-view-button[data-view='grid']").click()
    thumbnails = view.locator(".hv-thumb")
    assert thumbnails.count() >= 2, f"{label}: the grid should show a thumbnail per layer and head"
    last = thumbnails.nth(thumbnails.count() - 1)
    layer, head = last.get_attribute("data-layer"), last.get_attribute("data-head")
    last.click()
    assert view.locator(".hv-head-swatch.hv-active").get_attribute("data-head") == head
    if view.locator(".hv-layer-select").count():
        assert view.locator(".hv-layer-select").input_value() == layer


def test_lesson_03_slider_redraws_the_figure(browser, lab, pages):
    page, console = _open_notebook(browser, lab, LESSON_03.name, pages)
    _run_all_cells(page, timeout_ms=240_000)
    slider = page.locator(".widget-slider").nth(1)  # temperature
    slider.scroll_into_view_if_needed()
    figure = page.locator(".widget-output img").first
    before = figure.get_attribute("src")
    slider.locator(".noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "(before) => document.querySelector('.widget-output img')?.getAttribute('src') !== before",
        arg=before,
        timeout=60_000,
    )
    page.screenshot(path=ARTIFACTS / "lesson-03-slider.png")
    assert console.errors == []


def _no_widget_drawn(page, label: str) -> None:
    """Nothing on the page is a widget (nor the error a widget without its state shows); pictures may be."""
    page.wait_for_timeout(2000)  # a widget manager draws saved widgets within moments of opening
    page.screenshot(path=ARTIFACTS / f"{label}-before-running.png")
    assert page.locator(".jupyter-widgets, .hv-root").count() == 0, f"{label}: a widget is drawn before running"
    assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()


def test_head_view_in_jupyterlab_appears_when_its_cell_runs(browser, lab, pages):
    page, console = _open_notebook(browser, lab, "head_view.ipynb", pages)
    # Before any cell runs: each view's static picture, and no widget (there is no saved state to draw one from).
    _no_widget_drawn(page, "head-view")
    assert page.locator(".jp-OutputArea-output img").count() == 3
    _run_all_cells(page, timeout_ms=120_000)
    views = page.locator(".hv-root")
    views.nth(2).wait_for()  # the later views draw with the first one's script (they carry a stub)
    assert views.count() == 3
    _check_hover_and_clicks(page, views.nth(0), "head-view-live-self")
    _check_hover_and_clicks(page, views.nth(2), "head-view-live-cross")
    assert console.errors == []


@pytest.mark.parametrize("lesson", [LESSON_03, LESSON_06], ids=lambda p: p.stem[:2])
def test_a_committed_lesson_draws_no_widget_before_it_runs(browser, lab, pages, lesson):
    """Lesson 03's explorer and lesson 06's head views and explorer: only static pictures until their cells run.

    Running lesson 06 here would train its model once more (nbval already runs the lesson); the live path, a
    kernel sending the same widgets, is driven on the small notebook above and on lesson 03.
    """
    page, console = _open_notebook(browser, lab, lesson.name, pages)
    _no_widget_drawn(page, f"lesson-{lesson.stem[:2]}")
    assert page.locator(".jp-OutputArea-output img").count() > 0
    assert console.errors == []


def test_exported_html_works_with_the_network_off(browser, workspace):
    exported = [export_html(workspace["root"] / "head_view.ipynb", ARTIFACTS / "head_view.html")]
    if _lesson_06_has_a_head_view():
        exported.append(export_html(LESSON_06, ARTIFACTS / "06_translation.html"))
    for path in exported:
        context = browser.new_context(offline=True, viewport={"width": 1300, "height": 1000})
        refused: list[str] = []

        def refuse_the_network(route, refused=refused):
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        context.route("**/*", refuse_the_network)
        page = context.new_page()
        console = Console(page)
        page.goto(path.as_uri())
        views = page.locator(".hv-root")
        views.first.wait_for(timeout=10_000)
        assert views.count() == path.read_text(encoding="utf-8").count('<div class="hv-standalone">')
        assert path.read_text(encoding="utf-8").count("function staticModel(") == 1  # the script, once a page
        _check_hover_and_clicks(page, views.first, f"offline-{path.stem}")
        page.screenshot(path=ARTIFACTS / f"offline-{path.stem}.png", full_page=True)
        assert refused == [], f"{path.name} tried to fetch {refused}"
        assert console.errors == []
        context.close()


def _open_offline(browser, path: Path):
    """A page of the written file ``path`` in a context with the network off: (context, page, its console)."""
    context = browser.new_context(offline=True, viewport={"width": 1300, "height": 1000})
    page = context.new_page()
    console = Console(page)
    page.goto(path.as_uri())
    return context, page, console


def test_hostile_tokens_neither_blank_the_view_nor_swallow_the_rest_of_the_page(browser, tmp_path):
    import torch

    from helpers.viewing.head_view import head_view_data, standalone_html

    tokens = ["<!--<script>", "</script><p>", "-->", "a\u2028b", "&amp;", "\"'"]
    weights = torch.softmax(torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(0)), dim=-1)
    data = head_view_data(weights, tokens, title="<!--<script>")
    body = standalone_html(data) + "<p id='between'>between</p>" + standalone_html(data, library=False)
    path = tmp_path / "hostile.html"
    path.write_text(f"<!doctype html><html><body>{body}<p id='after'>after</p></body></html>", encoding="utf-8")
    context, page, console = _open_offline(browser, path)
    views = page.locator(".hv-root")
    views.nth(1).wait_for(timeout=10_000)
    assert views.count() == 2
    assert page.locator("#between").inner_text() == "between" and page.locator("#after").inner_text() == "after"
    shown = views.first.inner_text()
    assert "<!--<script>" in shown and "</script><p>" in shown  # drawn as text, not parsed as markup
    page.screenshot(path=ARTIFACTS / "hostile-tokens.png", full_page=True)
    assert console.errors == []
    context.close()


def test_the_view_draws_the_weights_that_were_sent(browser, tmp_path):
    import torch

    from helpers.viewing.head_view import head_view_data, standalone_html

    tokens = ["Eine", "Mutter", "und", "ihr", "Sohn"]
    weights = torch.softmax(2 * torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(1)), dim=-1)
    step = 1 / 255  # one byte per weight on the way: each drawn weight within step / 2 of the weight
    path = tmp_path / "weights.html"
    body = standalone_html(head_view_data(weights, tokens))
    path.write_text(f"<!doctype html><html><body>{body}</body></html>", encoding="utf-8")
    context, page, console = _open_offline(browser, path)
    view = page.locator(".hv-root")
    view.wait_for(timeout=10_000)
    read = "els => els.map(e => [+e.dataset.head, +e.dataset.query, +e.dataset.key, +e.dataset.weight])"
    lines = view.locator(".hv-line").evaluate_all(read)  # layer 0, every head: a line per weight of 0.01 or more
    drawn = {(h, i, j): w for h, i, j, w in lines}
    assert set(drawn) >= {tuple(k) for k in (weights[0] >= 0.01 + step).nonzero().tolist()}
    assert max(abs(w - weights[0, h, i, j].item()) for (h, i, j), w in drawn.items()) <= step / 2 + 1e-6
    view.locator(".hv-layer-select").select_option("1")
    view.locator(".hv-head-swatch[data-head='2']").click()
    view.locator(".hv-view-button[data-view='heatmap']").click()
    cells = view.locator(".hv-cell").evaluate_all(read)  # layer 1, head 2 alone: its (L, S) matrix
    shown = torch.zeros(5, 5)
    for _, i, j, w in cells:
        shown[i, j] = w
    assert len(cells) == 25
    torch.testing.assert_close(shown, weights[1, 2], atol=step / 2 + 1e-6, rtol=0)
    assert console.errors == []
    context.close()
