"""The head view: the state it sends to the browser, its checks on shapes, its fallbacks and the offline export.

What the JavaScript does with that state is tested in a real browser (tests/test_browser.py).
"""

from __future__ import annotations

import base64
import itertools
import json
import tomllib
from pathlib import Path

import nbformat
import pytest
import torch
from torch import nn

import helpers
from helpers.viewing.head_view import (
    HEAD_VIEW_ID,
    STATIC,
    WIDGET_STATE,
    WIDGET_VIEW,
    HeadView,
    decode_weights,
    export_html,
    fallback_png,
    head_view_data,
    make_offline,
    standalone_html,
)

ROOT = Path(__file__).resolve().parents[2]
TOKENS = ["Eine", "Mutter", "und", "ihr", "Sohn"]
TARGET = ["A", "mother", "and", "her", "son", "<eos>"]
STEP = 1 / 255  # the weights travel as round(255 w): decoded, each is within STEP / 2 of the weight


def softmax_weights(*shape, seed=0):
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)), dim=-1)


def test_state_sent_to_the_browser_is_the_weights_layer_by_layer_with_the_tokens():
    weights = softmax_weights(2, 3, 5, 5)  # (n_layers, h, L, S)
    view = helpers.head_view(weights, TOKENS)
    assert isinstance(view, HeadView)
    assert (view.kind, view.query_tokens, view.key_tokens) == ("self", TOKENS, TOKENS)
    assert view.layer_names == ["layer 0", "layer 1"]
    assert (view.layer, view.head, view.view) == (0, -1, "lines")
    # Everything synced to the front end is JSON (what nbclient saves in metadata.widgets).
    synced = view.get_state()
    names = ("weights_shape", "weights_uint8", "query_tokens", "key_tokens", "layer_names", "kind")
    json.dumps({name: synced[name] for name in names})
    # Decoded as the browser does (one byte per weight, (n_layers, h, L, S) order), they are the weights.
    raw = base64.b64decode(synced["weights_uint8"], validate=True)
    assert synced["weights_shape"] == [2, 3, 5, 5] and len(raw) == 2 * 3 * 5 * 5
    sent = torch.tensor(list(raw), dtype=torch.float64).reshape(2, 3, 5, 5) / 255
    torch.testing.assert_close(sent, weights.double(), atol=STEP / 2 + 1e-9, rtol=0)
    torch.testing.assert_close(view.weights.double(), sent, atol=1e-7, rtol=0)
    assert synced["_anywidget_id"] == HEAD_VIEW_ID
    assert "export default" in synced["_esm"] and ".hv-root" in synced["_css"]


def test_a_list_of_layers_and_a_single_layer_are_accepted():
    layers = [softmax_weights(4, 6, 5, seed=s) for s in range(3)]  # each (h, L, S)
    view = helpers.head_view(layers, TARGET, TOKENS, kind="cross", layer_names=["dec 0", "dec 1", "dec 2"])
    assert view.shape() == (3, 4, 6, 5)
    torch.testing.assert_close(view.weights[2].double(), layers[2].double(), atol=STEP / 2 + 1e-7, rtol=0)
    assert helpers.head_view(softmax_weights(2, 5, 5), TOKENS).shape() == (1, 2, 5, 5)


def test_the_weights_of_torch_multihead_attention_can_be_shown_directly():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 5, 8)
    _, weights = mha(x, x, x, average_attn_weights=False)  # (N, h, L, S)
    view = helpers.head_view(weights[0], TOKENS)
    torch.testing.assert_close(view.weights[0].double(), weights[0].double().detach(), atol=STEP / 2 + 1e-7, rtol=0)


@pytest.mark.parametrize(
    ("weights", "query_tokens", "key_tokens", "kind", "message"),
    [
        (softmax_weights(5), TOKENS, None, "self", r"expected weights of shape \(L, S\), \(h, L, S\)"),
        (softmax_weights(1, 2, 3, 5, 5), TOKENS, None, "self", "pick one sentence"),
        ([softmax_weights(2, 5, 5), softmax_weights(3, 5, 5)], TOKENS, None, "self", "same .* shape"),
        ([], TOKENS, None, "self", "empty list"),
        (None, TOKENS, None, "self", "weights is None"),
        ([softmax_weights(2, 5, 5), [[0.5] * 5] * 5], TOKENS, None, "self", "mixes tensors and plain lists"),
        (softmax_weights(2, 5, 5), TOKENS[:4], None, "self", "query_tokens has 4 tokens; the weights need 5"),
        (softmax_weights(2, 5, 5), None, None, "self", "query_tokens is None"),
        (softmax_weights(2, 5, 5), "Eine Mutter und ihr Sohn", None, "self", "query_tokens is one string"),
        (softmax_weights(2, 5, 5), ["Eine", None, "und", "ihr", "Sohn"], None, "self", r"query_tokens\[1\] is None"),
        (softmax_weights(2, 6, 5), TARGET, [1, 2, 3, 4, 5], "cross", r"key_tokens\[0\] is 1 \(int\)"),
        (softmax_weights(2, 6, 5), TARGET, None, "cross", "cross-attention needs key_tokens"),
        (softmax_weights(2, 6, 5), TARGET, TOKENS, "self", r"L = S"),
        (softmax_weights(2, 5, 5), TOKENS, None, "causal", "zero above the diagonal"),
        (torch.randn(2, 5, 5), TOKENS, None, "self", "softmax outputs, not scores"),
        (torch.full((2, 5, 5), float("nan")), TOKENS, None, "self", "NaN"),
        (softmax_weights(2, 5, 5), TOKENS, None, "sideways", "kind must be one of"),
    ],
)
def test_bad_input_gets_a_clear_error(weights, query_tokens, key_tokens, kind, message):
    with pytest.raises(ValueError, match=message):
        helpers.head_view(weights, query_tokens, key_tokens, kind=kind)


def test_layer_names_must_match_the_layers():
    with pytest.raises(ValueError, match="2 layer names for 3 layers"):
        head_view_data(softmax_weights(3, 2, 5, 5), TOKENS, layer_names=["a", "b"])


def test_causal_weights_are_accepted_when_the_future_is_masked():
    future = torch.ones(5, 5, dtype=torch.bool).triu(diagonal=1)
    scores = torch.randn(2, 5, 5).masked_fill(future, float("-inf"))
    view = helpers.head_view(torch.softmax(scores, dim=-1), TOKENS, kind="causal")
    assert view.weights.triu(diagonal=1).abs().max() == 0


def test_selection_is_validated_like_the_front_end_expects():
    view = helpers.head_view(softmax_weights(2, 3, 5, 5), TOKENS)
    view.layer, view.head, view.view = 1, 2, "grid"
    assert (view.layer, view.head, view.view) == (1, 2, "grid")
    for name, value in [("layer", 2), ("head", 3), ("head", -2), ("view", "3d")]:
        with pytest.raises(Exception, match=name):
            setattr(view, name, value)


def test_text_repr_is_stable_for_nbval_and_the_bundle_carries_a_png_fallback():
    view = helpers.head_view(softmax_weights(2, 4, 6, 5), TARGET, TOKENS, kind="cross")
    again = helpers.head_view(softmax_weights(2, 4, 6, 5, seed=1), TARGET, TOKENS, kind="cross")
    expected = "HeadView(kind='cross', layers=2, heads=4, queries=6, keys=5)"
    assert repr(view) == repr(again) == expected  # shapes only: no address, no id, no numbers
    data, _ = view._repr_mimebundle_()
    assert data["text/plain"] == expected
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == view.model_id
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")


def test_fallback_figure_shows_the_first_layer_readably_and_says_which():
    view = helpers.head_view(softmax_weights(2, 3, 5, 5), TOKENS, layer_names=["enc 0", "enc 1"])
    fig = view.figure()
    assert len(fig.axes) == 3 + 1  # the shown layer's 3 heads and one shared colour bar
    assert [ax.get_title() for ax in fig.axes[:3]] == ["head 0", "head 1", "head 2"]
    assert "enc 0 (1 of 2 layers" in fig._suptitle.get_text()
    # every panel labelled, at 9 points, and large enough that its 5 labels do not overlap
    for ax in fig.axes[:3]:
        assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
        assert all(t.get_fontsize() >= 9 for t in ax.get_xticklabels() + ax.get_yticklabels())
    png = base64.b64decode(fallback_png(view.state()))
    assert png.startswith(b"\x89PNG") and len(png) > 5_000


@pytest.mark.parametrize("tokens", [13, 30])
def test_fallback_panels_grow_with_the_token_count_so_labels_never_overlap(tokens):
    names = [f"w{i}" for i in range(tokens)]
    view = helpers.head_view(softmax_weights(1, 4, tokens, tokens), names)
    fig = view.figure()
    fig.canvas.draw()
    for ax in fig.axes[:4]:
        boxes = [t.get_window_extent() for t in ax.get_yticklabels()]
        assert len(boxes) == tokens
        assert all(not a.overlaps(b) for a, b in itertools.pairwise(boxes))
    png = base64.b64decode(fallback_png(view.state()))
    width = int.from_bytes(png[16:20], "big")
    assert width >= 2 * 2.4 * 80  # 4 heads as 2 x 2 panels of at least 2.4 inches at 80 dpi


def _page_data(page: str) -> dict:
    return json.loads(page.rsplit("hv.staticModel(", 1)[1].split("), el: el")[0])


def test_standalone_html_embeds_the_script_and_the_data_without_any_remote_reference():
    view = helpers.head_view(softmax_weights(1, 2, 5, 5), ["</script>", *TOKENS[1:]])
    page = standalone_html(view.state())
    assert "export default { render };" not in page  # a classic inline script, not a module
    assert "function staticModel(" in page and "hv.render(" in page
    assert page.count("</script>") == 2  # the library's and the view's; the token "</script>" is escaped
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    data = _page_data(page)
    assert data["query_tokens"][0] == "</script>" and data["weights_uint8"] == view.weights_uint8
    assert data["weights_shape"] == [1, 2, 5, 5]
    later = standalone_html(view.state(), library=False)
    assert "function staticModel(" not in later and "<style>" not in later and _page_data(later) == data


# Tokens aimed at each context a head view's data passes through in an exported page.
HOSTILE = {
    "script end": "</script><p>",
    "comment then script (double-escaped state)": "<!--<script>",
    "comment end": "-->",
    "line separators": "a\u2028b\u2029c",
    "entity": "&lt;&amp;",
    "quote and backslash": "\"\\'",
}


@pytest.mark.parametrize("token", HOSTILE.values(), ids=HOSTILE.keys())
def test_inline_script_data_cannot_end_or_escape_its_script_element(token):
    tokens = [token, *TOKENS[1:]]
    view = helpers.head_view(softmax_weights(1, 2, 5, 5), tokens, title=token, layer_names=[token])
    page = standalone_html(view.state(), library=False)
    script = page.split("<script>", 1)[1].rsplit("</script>", 1)[0]
    for dangerous in ("<", ">", "&", "\u2028", "\u2029"):
        assert dangerous not in script, f"{dangerous!r} reached the inline script"
    data = _page_data(page)  # and the browser reads back exactly what was sent
    assert data["query_tokens"][0] == token and data["title"] == token and data["layer_names"] == [token]


def test_snapshot_images_and_texts_are_escaped_for_their_context():
    from helpers.viewing.head_view import _snapshot_html, png_img

    good = base64.b64encode(b"\x89PNG fake").decode()
    assert png_img(good) == f'<img src="data:image/png;base64,{good}">'
    assert png_img([good[:4], "\n", good[4:]]) == png_img(good)  # notebooks may split it into lines
    attack = 'AAAA"><script>alert(1)</script>'
    assert "<script" not in png_img(attack) and '"><' not in png_img(attack)
    models = {
        "out": {
            "state": {
                "_model_name": "OutputModel",
                "outputs": [
                    {"output_type": "display_data", "data": {"image/png": attack, "text/plain": "x"}},
                    {"output_type": "stream", "text": "<b>bold</b>"},
                ],
            }
        },
        "slider": {"state": {"_model_name": "IntSliderModel", "description": '<img src=x onerror="1">', "value": 3}},
    }
    snapshot = _snapshot_html("out", models) + _snapshot_html("slider", models)
    assert "<script" not in snapshot and "<b>" not in snapshot and "<img src=x" not in snapshot
    assert "&lt;b&gt;bold&lt;/b&gt;" in snapshot and "&lt;img src=x onerror=&quot;1&quot;&gt;: 3" in snapshot


def test_package_data_ships_the_static_files():
    # A non-editable install only carries files that pyproject.toml lists as package data.
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    listed = {path for pattern in package_data["helpers.viewing"] for path in STATIC.parent.glob(pattern)}
    assert {STATIC / "head_view.js", STATIC / "head_view.css"} <= listed


# The tests of an executed notebook start a kernel, and one test a Python process: `make test` runs them, `make unit`
# not (tests/conftest.py's `integration` marker; the rest of this file is plain unit tests).
starts_a_kernel = pytest.mark.integration


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Path:
    """A notebook with a head view and an ordinary widget, executed by nbclient as `make notebooks` does."""
    from nbclient import NotebookClient

    cells = [
        "import torch, ipywidgets\nfrom helpers import head_view\n"
        "w = torch.softmax(torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0)), dim=-1)",
        "head_view(w, ['a', 'b', 'c', 'd'])",
        "ipywidgets.IntSlider(value=3, description='steps')",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", shutdown_kernel="immediate").execute()
    path = tmp_path_factory.mktemp("executed") / "lesson.ipynb"
    nbformat.write(nb, path)
    return path


@starts_a_kernel
def test_saved_widget_state_carries_the_view_and_the_export_is_self_contained(executed, tmp_path):
    nb = nbformat.read(executed, as_version=4)
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    head_views = [m["state"] for m in state.values() if m["state"].get("_anywidget_id") == HEAD_VIEW_ID]
    assert len(head_views) == 1 and head_views[0]["weights_shape"] == [2, 3, 4, 4]  # redrawn without a kernel
    assert nb.cells[1].outputs[0]["data"]["text/plain"] == "HeadView(kind='self', layers=2, heads=3, queries=4, keys=4)"

    html = export_html(executed, tmp_path / "out" / "lesson.html").read_text()
    assert html.count('class="hv-standalone"') == 1
    assert "steps: 3" in html  # the other widget, as a snapshot
    assert "application/vnd.jupyter.widget-state+json" not in html and "html-manager" not in html
    for cdn in ("unpkg.com", "jsdelivr", 'src="https://cdnjs'):
        assert cdn not in html


@starts_a_kernel
def test_pdf_export_shows_the_png_fallback(executed):
    # nbconvert's LaTeX (PDF) exporter cannot show widgets; it must pick the head view's PNG.
    from nbconvert import LatexExporter

    body, resources = LatexExporter().from_notebook_node(nbformat.read(executed, as_version=4))
    assert "output_1_0.png" in resources["outputs"] and "output_1_0.png" in body
    assert resources["outputs"]["output_1_0.png"].startswith(b"\x89PNG")


@starts_a_kernel
def test_plain_nbconvert_html_would_fetch_the_widget_manager_from_a_cdn(executed):
    # Why export_html exists: the default exporter keeps widget views for a CDN-loaded manager.
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(executed, as_version=4))
    assert "html-manager" in body and "unpkg.com" in body
    assert 'class="hv-standalone"' not in body


def test_make_offline_leaves_notebooks_without_widgets_alone():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    nb.cells[0].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)]
    before = json.dumps(nb, sort_keys=True)
    make_offline(nb)
    assert json.dumps(nb, sort_keys=True) == before


@starts_a_kernel
def test_the_offline_preprocessor_works_from_nbconvert_options(executed):
    # What `jupyter nbconvert --to html --HTMLExporter.preprocessors=helpers.viewing.head_view.OfflineWidgets ...` runs.
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        preprocessors=["helpers.viewing.head_view.OfflineWidgets"], require_js_url="", mathjax_url=""
    )
    body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
    assert body.count('class="hv-standalone"') == 1 and "html-manager" not in body


@starts_a_kernel  # a Python process, as the kernel would import helpers
def test_importing_helpers_does_not_import_nbconvert():
    # nbconvert takes seconds to import; only the export functions need it.
    import subprocess
    import sys

    code = "import sys, helpers; print('nbconvert' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_a_nested_list_of_numbers_is_one_array_not_a_list_of_layers():
    weights = softmax_weights(3, 5, 5)  # (h, L, S)
    view = helpers.head_view(weights.tolist(), TOKENS)
    assert view.shape() == (1, 3, 5, 5)
    assert torch.allclose(view.weights, weights[None], atol=STEP / 2 + 1e-7)


def test_too_many_weights_are_refused_with_the_limit():
    from helpers.viewing.head_view import MAX_WEIGHTS

    tokens = [f"t{i}" for i in range(800)]
    with pytest.raises(ValueError, match=f"limit of {MAX_WEIGHTS:,}"):
        helpers.head_view(torch.full((1, 800, 800), 1 / 800), tokens)


def test_a_30_layer_9_head_causal_view_builds_and_draws_its_fallback_quickly():
    import time

    tokens = [f"tok{i}" for i in range(20)]
    scores = torch.randn(30, 9, 20, 20, generator=torch.Generator().manual_seed(0))
    weights = scores.masked_fill(torch.ones(20, 20, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    # CPU time of this process: what the view costs, not how busy the machine's other processes keep it
    start = time.process_time()
    view = helpers.head_view(weights, tokens, kind="causal", view="grid")
    built = time.process_time() - start
    png = base64.b64decode(fallback_png(view.state()))
    drawn = time.process_time() - start
    assert view.shape() == (30, 9, 20, 20)
    assert built < 5.0, f"building took {built:.1f} s of CPU"
    assert drawn < 20.0, f"building and drawing the fallback took {drawn:.1f} s of CPU"
    assert len(png) < 400_000  # one layer's 9 heads, not 270 panels


def test_only_the_first_head_view_of_a_kernel_carries_the_script():
    import helpers.viewing.head_view as hv

    script = (STATIC / "head_view.js").read_text(encoding="utf-8")
    hv._library_sent = False  # as in a fresh kernel
    first, second = (helpers.head_view(softmax_weights(2, 5, 5), TOKENS) for _ in range(2))
    assert first._esm == script and "globalThis.helpersHeadView = " in script
    assert second._esm == (STATIC / "head_view_stub.js").read_text(encoding="utf-8")
    assert len(second._esm) < 2_000 and "globalThis.helpersHeadView" in second._esm


def test_an_exported_page_carries_the_script_once_for_several_views():
    views = [helpers.head_view(softmax_weights(1, 2, 5, 5, seed=i), TOKENS) for i in range(3)]
    state = {f"m{i}": {"state": {**v.state(), "_anywidget_id": HEAD_VIEW_ID}} for i, v in enumerate(views)}
    cells = [
        nbformat.v4.new_code_cell(
            "v",
            outputs=[
                nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": f"m{i}"}, "text/plain": "v"})
            ],
        )
        for i in range(3)
    ]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"widgets": {WIDGET_STATE: {"state": state}}})
    make_offline(nb)
    pages = [cell.outputs[0]["data"]["text/html"] for cell in nb.cells]
    assert ["function staticModel(" in page for page in pages] == [True, False, False]
    assert [_page_data(page)["weights_uint8"] for page in pages] == [v.weights_uint8 for v in views]


def test_weights_travel_as_one_byte_each_and_keep_zero_and_one_exact():
    weights = torch.tensor([[[[0.0, 1.0, 0.5, 1 / 510 - 1e-6], [0.25, 0.25, 0.25, 0.25]]]])  # (1, 1, 2, 4)
    view = helpers.head_view(weights[0], ["a", "b"], ["w", "x", "y", "z"], kind="cross")
    assert list(base64.b64decode(view.weights_uint8)) == [0, 255, 128, 0, 64, 64, 64, 64]
    decoded = view.weights
    assert decoded[0, 0, 0, 0] == 0 and decoded[0, 0, 0, 1] == 1
    torch.testing.assert_close(decoded, weights, atol=STEP / 2 + 1e-7, rtol=0)
    # lesson 08's view, 6 layers x 12 heads of 14 tokens: base64 of one byte per weight, not a JSON list
    big = helpers.head_view(softmax_weights(6, 12, 14, 14), [f"t{i}" for i in range(14)])
    assert len(big.weights_uint8) == 4 * -(-6 * 12 * 14 * 14 // 3)


def test_a_state_saved_with_weights_as_lists_is_still_read_and_exported():
    weights = softmax_weights(2, 3, 5, 5)
    saved = {"kind": "self", "title": "", "query_tokens": TOKENS, "key_tokens": TOKENS}
    saved |= {"layer_names": ["layer 0", "layer 1"], "weights": weights.tolist()}  # as older notebooks hold it
    torch.testing.assert_close(decode_weights(saved), weights, atol=1e-6, rtol=0)
    data = _page_data(standalone_html(saved, library=False))
    assert "weights" not in data and data["weights_shape"] == [2, 3, 5, 5]
    torch.testing.assert_close(decode_weights(data), weights, atol=STEP / 2 + 1e-7, rtol=0)
    assert base64.b64decode(fallback_png(saved)).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"weights_uint8": "AAAA", "weights_shape": [1, 1, 2, 2]}, r"\[1, 1, 2, 2\] .* does not match the 3 bytes"),
        ({"weights_uint8": "AAA", "weights_shape": [1, 1, 1, 3]}, "must be base64 text"),
        ({"weights_uint8": "AAAA", "weights_shape": [3]}, r"weights_shape \[3\] \(n_layers, h, L, S\)"),
        ({"weights": [[0.5, 0.5]]}, r"\[layer\]\[head\]\[query\]\[key\], got 2 levels"),
        ({"kind": "self"}, "carries weights_uint8 and weights_shape; this one has neither"),
    ],
)
def test_a_malformed_state_gets_a_clear_error(state, message):
    with pytest.raises(ValueError, match=message):
        decode_weights(state)


def _small_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A lesson"), nbformat.v4.new_code_cell("1")])
    nbformat.write(nb, path)
    return path


def test_export_html_refuses_to_write_over_the_notebook_by_any_name(tmp_path):
    notebook = _small_notebook(tmp_path / "lesson.ipynb")
    before = notebook.read_bytes()
    (tmp_path / "link.ipynb").symlink_to(notebook)
    (tmp_path / "sub").mkdir()
    for same in (notebook, tmp_path / "sub" / ".." / "lesson.ipynb", tmp_path / "link.ipynb"):
        with pytest.raises(ValueError, match="would overwrite the notebook"):
            export_html(notebook, same)
    with pytest.raises(ValueError, match="is a folder"):
        export_html(notebook, tmp_path / "sub")
    assert notebook.read_bytes() == before and json.loads(before)["cells"]


def test_an_interrupted_export_leaves_the_previous_page(tmp_path, monkeypatch):
    import helpers.tools.files

    notebook = _small_notebook(tmp_path / "lesson.ipynb")
    page = tmp_path / "lesson.html"
    page.write_text("the page as it was")

    def interrupted(descriptor):
        raise KeyboardInterrupt  # Ctrl-C after the new page's bytes, before they replace the old ones

    monkeypatch.setattr(helpers.tools.files.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_html(notebook, page)
    assert page.read_text() == "the page as it was"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lesson.html", "lesson.ipynb"]  # nothing half-written
    monkeypatch.undo()
    assert "A lesson" in export_html(notebook, page).read_text()
