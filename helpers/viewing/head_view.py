"""The head view: every layer's and head's attention weights, interactive in the browser, offline.

``head_view(weights, query_tokens, key_tokens, kind=...)`` returns a widget that shows token rows with
a line per (head, query, key) whose opacity is the weight, or a heatmap, with a layer selector, one
colour per head, hover-a-token-to-see-only-its-weights, click-a-head-to-isolate-it and a grid of
layer × head thumbnails (click one to open it). The drawing is JavaScript that ships in this package
(``helpers/viewing/static/head_view.js`` and ``.css``); nothing is fetched from the network.

Where it works, and how:

* **JupyterLab** (live): an anywidget, drawn when its cell runs; hovering needs no kernel (it all happens in
  the browser). Its JavaScript and data travel in the widget state. The course commits its lessons without
  that state (``course.notebook_metadata``: a widget drawn from saved state looks live when it is not), so
  before its cell runs a committed lesson shows the PNG below, and keeps the view's data in the output's
  metadata (``SAVED_HEAD_VIEW``) for the export.
* **Exported HTML, offline**: ``jupyter nbconvert --to html`` on its own loads the widget manager from a
  CDN (unpkg) and require.js and MathJax from cdnjs, so widgets are blank offline. ``export_html(lesson)``
  instead replaces each head view by a self-contained ``<div>`` + ``<script>`` built from this package's
  JavaScript and the saved state (or ``SAVED_HEAD_VIEW``), turns the other widgets into static snapshots of
  what they showed, and loads no remote script: the page works from a USB stick. ``OfflineWidgets`` is the nbconvert
  preprocessor that does it, usable from the command line too.
* **PDF, GitHub, nbval**: the output also carries a PNG (``fallback_figure``: the first layer's heads, sized
  to be read on its own) and a text/plain line with shapes only (no address, no random id), which nbval
  compares.

The head view's JavaScript travels once per notebook (the first view a kernel shows carries it, later ones a
stub) and once per exported page.

The weights travel as bytes: each weight w in [0, 1] as the integer round(255 w) (one byte, an error of at most
1/510, far below what an opacity or a colour shows), all of them in (n_layers, h, L, S) order, base64-encoded:
``weights_uint8`` with its ``weights_shape``. ``decode_weights`` reads them back (as the front end does).

Shapes: weights in any shape ``helpers.viewing.shapes`` accepts ((L, S), (h, L, S), (n_layers, h, L, S), a list
over layers of (h, L, S)); L query tokens (rows), S key tokens (columns); every weight in [0, 1]; at most
``MAX_WEIGHTS`` weights in all.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

import anywidget
import matplotlib.pyplot as plt
import torch
import traitlets

from helpers.tools.files import write_atomically
from helpers.viewing.plotting import head_grid, readable_panel_size
from helpers.viewing.shapes import attention_inputs

STATIC = Path(__file__).resolve().parent / "static"  # shipped as package data (pyproject.toml)
KINDS = ("self", "causal", "cross")
VIEWS = ("lines", "heatmap", "grid")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# The anywidget id of HeadView in saved widget state (anywidget writes module.ClassName there).
HEAD_VIEW_ID = "helpers.viewing.head_view.HeadView"
HEAD_VIEW_IDS = (HEAD_VIEW_ID, HEAD_VIEW_ID + "Stub")  # the view carrying the script, and the later ones
# Where a committed lesson keeps a head view's data (tokens, weights), in its output's metadata: lessons are
# committed without widget state (course.notebook_metadata), and an export draws the view from this instead.
SAVED_HEAD_VIEW = "head_view"
_EXPORT_LINE = "export default { render };"
LEVELS = 255  # weights travel as round(LEVELS * w) in one byte; decoded they are within 1 / (2 * LEVELS)
# layers x h x L x S weights one view may carry: 30 x 9 heads of 20 tokens (lesson 09's model) fit, with room;
# one sentence of 800 tokens (640,000 weights: 850 KB of base64 in the notebook, and a slow redraw) does not.
MAX_WEIGHTS = 250_000


# ---------------------------------------------------------------------------------------------
# The data: validated weights and tokens as the front end receives them
# ---------------------------------------------------------------------------------------------
def head_view_data(
    weights,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    *,
    kind: str = "self",
    layer_names: Sequence[str] | None = None,
    title: str = "",
) -> dict:
    """Check the inputs and return the state the browser draws from.

    ``weights``: (h, L, S), (n_layers, h, L, S) or a list over layers of (h, L, S), each entry in [0, 1].
    ``kind``: "self" (L = S, the keys are the queries' own tokens), "causal" (masked self-attention: also
    zero above the diagonal) or "cross" (queries from the target, keys from the source; ``key_tokens``
    needed). Returns a dict of JSON values: the tokens and names as lists, and the weights as ``weights_shape``
    [layers, h, L, S] and ``weights_uint8`` (``encode_weights``; ``decode_weights`` reads them back).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "cross" and key_tokens is None:
        raise ValueError("cross-attention needs key_tokens: the source tokens the queries look at")
    stacked, query_tokens, key_tokens = attention_inputs(weights, query_tokens, key_tokens)
    stacked = stacked.double()
    layers, heads, L, S = stacked.shape
    if kind != "cross" and L != S:
        raise ValueError(f"{kind} attention has as many keys as queries (L = S), got L = {L}, S = {S}")
    if stacked.numel() > MAX_WEIGHTS:
        raise ValueError(
            f"{layers} layers x {heads} heads x {L} queries x {S} keys = {stacked.numel():,} weights is more than "
            f"the head view's limit of {MAX_WEIGHTS:,} (hundreds of KB in the notebook, a slow redraw): "
            "show fewer layers (weights[a:b]), fewer heads or a shorter sentence"
        )
    if not torch.isfinite(stacked).all():
        raise ValueError("weights contain NaN or infinity (a query whose keys are all masked gives NaN rows)")
    if stacked.min() < -1e-6 or stacked.max() > 1 + 1e-6:
        raise ValueError(
            f"attention weights lie in [0, 1], got values from {float(stacked.min()):.3g} to "
            f"{float(stacked.max()):.3g} (pass softmax outputs, not scores)"
        )
    if kind == "causal":
        future = stacked.triu(diagonal=1)  # (n_layers, h, L, S): weight on keys after the query
        if future.abs().max() > 1e-6:
            raise ValueError(
                "causal weights must be zero above the diagonal (query i may not see key j > i); "
                "use kind='self' for unmasked self-attention"
            )
    if layer_names is None:
        layer_names = [f"layer {i}" for i in range(layers)]
    layer_names = [str(name) for name in layer_names]
    if len(layer_names) != layers:
        raise ValueError(f"got {len(layer_names)} layer names for {layers} layers")
    return {
        "kind": kind,
        "title": str(title),
        "query_tokens": query_tokens,
        "key_tokens": key_tokens,
        "layer_names": layer_names,
        "weights_shape": [layers, heads, L, S],
        "weights_uint8": encode_weights(stacked),
    }


def encode_weights(weights: torch.Tensor) -> str:
    """Weights in [0, 1], any shape, as base64 text of one byte each, round(255 w), in row-major order."""
    levels = (weights.detach().double().clamp(0, 1) * LEVELS).round().to(torch.uint8)
    return base64.b64encode(levels.contiguous().numpy().tobytes()).decode("ascii")


def decode_weights(state: dict) -> torch.Tensor:
    """The weights a head view's state carries, as float32 (n_layers, h, L, S): what the browser draws.

    Reads ``weights_uint8`` with ``weights_shape``; a state saved before the weights travelled as bytes
    (``weights`` as nested lists [layer][head][query][key]) is read as it is.
    """
    if "weights_uint8" not in state:
        if "weights" not in state:
            raise ValueError("a head view state carries weights_uint8 and weights_shape; this one has neither")
        weights = torch.tensor(state["weights"], dtype=torch.float32)
        if weights.dim() != 4:
            raise ValueError(f"saved weights must be [layer][head][query][key], got {weights.dim()} levels of lists")
        return weights
    shape = [int(n) for n in state.get("weights_shape", [])]
    try:
        raw = base64.b64decode(state["weights_uint8"], validate=True)
    except (ValueError, TypeError) as error:
        raise ValueError(f"weights_uint8 must be base64 text: {error}") from None
    if len(shape) != 4 or math.prod(shape) != len(raw):
        raise ValueError(
            f"weights_shape {shape} (n_layers, h, L, S) does not match the {len(raw):,} bytes of weights_uint8"
        )
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(shape).float() / LEVELS


def _encoded(state: dict) -> dict:
    """``state`` with its weights as ``weights_uint8`` and ``weights_shape`` (an older saved state converted)."""
    if "weights_uint8" in state:
        return state
    weights = decode_weights(state)
    rest = {name: value for name, value in state.items() if name != "weights"}
    return rest | {"weights_shape": list(weights.shape), "weights_uint8": encode_weights(weights)}


# ---------------------------------------------------------------------------------------------
# The widget
# ---------------------------------------------------------------------------------------------
class HeadView(anywidget.AnyWidget):
    """The head view widget (build it with ``head_view``). Synced state as in ``head_view_data``, plus
    ``layer``, ``head`` (-1: all heads) and ``view`` ("lines", "heatmap" or "grid"), which clicks change."""

    _esm = STATIC / "head_view.js"
    _css = STATIC / "head_view.css"
    kind = traitlets.Unicode("self").tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    query_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    key_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    layer_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    weights_shape = traitlets.List(traitlets.Int(), [0, 0, 0, 0]).tag(sync=True)  # [layers, h, L, S]
    weights_uint8 = traitlets.Unicode("").tag(sync=True)  # base64, one byte per weight (encode_weights)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(-1).tag(sync=True)
    view = traitlets.Unicode("lines").tag(sync=True)

    @traitlets.validate("layer")
    def _valid_layer(self, proposal):
        layers = self.weights_shape[0]
        if not 0 <= proposal["value"] < max(1, layers):
            raise traitlets.TraitError(f"layer must be in 0..{layers - 1}, got {proposal['value']}")
        return proposal["value"]

    @traitlets.validate("head")
    def _valid_head(self, proposal):
        heads = self.weights_shape[1]
        if not -1 <= proposal["value"] < max(1, heads):
            raise traitlets.TraitError(f"head must be -1 (all heads) or in 0..{heads - 1}, got {proposal['value']}")
        return proposal["value"]

    @traitlets.validate("view")
    def _valid_view(self, proposal):
        if proposal["value"] not in VIEWS:
            raise traitlets.TraitError(f"view must be one of {VIEWS}, got {proposal['value']!r}")
        return proposal["value"]

    def shape(self) -> tuple[int, int, int, int]:
        """(n_layers, h, L, S) of the weights shown."""
        layers, heads, L, S = self.weights_shape
        return layers, heads, L, S

    @property
    def weights(self) -> torch.Tensor:
        """The weights as the browser receives them, (n_layers, h, L, S) float32 (``decode_weights``)."""
        return decode_weights(self.state())

    def __repr__(self) -> str:
        # Shapes only: stable across runs and machines, so nbval can compare it.
        layers, heads, L, S = self.shape()
        return f"HeadView(kind={self.kind!r}, layers={layers}, heads={heads}, queries={L}, keys={S})"

    def figure(self):
        """The static fallback: every layer × head as heatmaps on one colour scale (helpers.viewing.plotting)."""
        return fallback_figure(self.state())

    def state(self) -> dict:
        """The data as ``head_view_data`` returns it (plus the current layer, head and view)."""
        return {
            name: getattr(self, name)
            for name in (
                "kind",
                "title",
                "query_tokens",
                "key_tokens",
                "layer_names",
                "weights_shape",
                "weights_uint8",
                "layer",
                "head",
                "view",
            )
        }

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        assert bundle is not None, "AnyWidget gives None only to a widget without a view, and this one has one"
        data, metadata = bundle
        # A PNG for front ends without widgets (PDF via LaTeX, GitHub); JupyterLab prefers the widget.
        data["image/png"] = fallback_png(self.state())
        return data, metadata


def head_view(
    weights,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    *,
    kind: str = "self",
    layer_names: Sequence[str] | None = None,
    title: str = "",
    view: str = "lines",
) -> HeadView:
    """An interactive view of every layer and head of one attention (see the module docstring).

    ``weights``: (h, L, S), (n_layers, h, L, S) or a list over layers of (h, L, S), for one sentence.
    ``query_tokens`` (L) label the rows, ``key_tokens`` (S) the columns (default: the query tokens).
    ``kind``: "self", "causal" (masked self-attention) or "cross". ``view``: the view shown first,
    "lines", "heatmap" or "grid" (all layers × heads). The title defaults to a sentence about ``kind``.
    """
    data = head_view_data(weights, query_tokens, key_tokens, kind=kind, layer_names=layer_names, title=title)
    global _library_sent
    view_class = HeadViewStub if _library_sent else HeadView
    _library_sent = True
    return view_class(**data, view=view)


class HeadViewStub(HeadView):
    """A head view whose module is a stub of a few hundred bytes (static/head_view_stub.js) that draws with
    the code of the first head view (``HeadView``, 16.8 KB of head_view.js) the kernel showed. The browser
    loads every saved view's module when it restores a notebook's widgets, so that code is there whichever
    view is drawn first. (A class of its own: anywidget keys a module by its class.)"""

    _esm = STATIC / "head_view_stub.js"


_library_sent = False  # whether this kernel has shown a HeadView, which carries head_view.js


# ---------------------------------------------------------------------------------------------
# Static fallbacks: a PNG, and a self-contained HTML fragment for exported pages
# ---------------------------------------------------------------------------------------------
FALLBACK_LABEL_SIZE = 9  # points; at the PNG's 80 dpi, 10 pixels


def fallback_figure(state: dict):
    """The static stand-in for ``state`` (as ``head_view_data`` returns it, or saved), readable on its own.

    One layer (the one the view shows first) with every head, wrapped into rows of at most 4 panels, each
    panel sized from the token count so that no token label overlaps another; the title says which layer of
    how many, since the interactive view is where the others are.
    """
    weights = decode_weights(state)  # (n_layers, h, L, S)
    layers, heads, L, S = weights.shape
    layer = int(state.get("layer", 0))
    heading = {"self": "self-attention", "causal": "masked self-attention", "cross": "cross-attention"}
    title = state.get("title") or heading[state["kind"]]
    if layers > 1:
        names = state.get("layer_names") or [f"layer {i}" for i in range(layers)]
        title = f"{title}: {names[layer]} ({layer + 1} of {layers} layers; the interactive view shows them all)"
    return head_grid(
        weights[layer],
        state["query_tokens"],
        state["key_tokens"],
        title=title,
        columns=min(4, math.ceil(math.sqrt(heads))),
        labels="all",
        label_size=FALLBACK_LABEL_SIZE,
        panel_size=max(2.4, readable_panel_size(max(L, S), FALLBACK_LABEL_SIZE)),
    )


def fallback_png(state: dict) -> str:
    """``fallback_figure`` as a base64 PNG (80 dpi, 256 colours), the form notebooks store images in."""
    from PIL import Image  # matplotlib's own dependency

    fig = fallback_figure(state)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    # 256 colours are plenty for viridis and black text, and a third of the bytes of full colour.
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB").quantize(colors=256)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# Characters that mean something to the HTML parser inside <script> ("</script>", "<!--" with "<script",
# "-->"), or end a JavaScript line (U+2028, U+2029), written as JSON escapes: JSON.parse reads the same string.
_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_safe_json(value) -> str:
    """``value`` as JSON that can sit inside an HTML <script> element whatever its strings hold."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.translate({ord(character): escape for character, escape in _SCRIPT_ESCAPES.items()})


_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")


def png_img(data) -> str:
    """An <img> of base64 PNG ``data`` (as notebooks store it); anything that is not base64 is left out."""
    text = "".join(data) if isinstance(data, list) else str(data)
    if not _BASE64.fullmatch(text):
        return '<p class="widget-snapshot-missing">(an image that was not valid base64 was left out)</p>'
    compact = html.escape("".join(text.split()), quote=True)  # base64 holds no quote; escaped all the same
    return f'<img src="data:image/png;base64,{compact}">'


def library_html() -> str:
    """The head view's CSS and JavaScript for an HTML page, once per page: it defines
    ``window.helpersHeadView``, which every ``standalone_html(state, library=False)`` draws with."""
    script = (STATIC / "head_view.js").read_text(encoding="utf-8")
    if _EXPORT_LINE not in script:
        raise RuntimeError(f"head_view.js must end with {_EXPORT_LINE!r}, which the standalone page replaces")
    script = script.replace(_EXPORT_LINE, "")
    css = (STATIC / "head_view.css").read_text(encoding="utf-8")
    return f"<style>{css}</style>\n<script>\n(function () {{\n{script}\n}})();\n</script>\n"


def standalone_html(state: dict, library: bool = True) -> str:
    """A <div> that draws the head view for ``state`` with inline JavaScript and CSS: no widget manager,
    no kernel, no network. The element is found with document.currentScript, so no ids are needed.
    ``library=False`` leaves out the script and style (``library_html``), which an earlier view on the page
    carries. A state saved with its weights as nested lists is converted to the bytes the script reads."""
    state = _encoded(state)
    keys = ("kind", "title", "query_tokens", "key_tokens", "layer_names", "weights_shape", "weights_uint8")
    data = {name: state[name] for name in (*keys, "layer", "head", "view") if name in state}
    data.setdefault("layer", 0)
    data.setdefault("head", -1)
    data.setdefault("view", "lines")
    return (
        '<div class="hv-standalone">\n' + (library_html() if library else "") + "<script>\n(function () {\n"
        "var el = document.currentScript.parentElement, hv = window.helpersHeadView;\n"
        f"hv.render({{ model: hv.staticModel({script_safe_json(data)}), el: el }});\n"
        "})();\n</script>\n</div>"
    )


# ---------------------------------------------------------------------------------------------
# Offline HTML export
# ---------------------------------------------------------------------------------------------
def _widget_models(nb) -> dict:
    widgets = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {})
    return widgets.get("state", {})


def _snapshot_html(model_id: str, models: dict) -> str:
    """What a non-head-view widget showed when the notebook was saved, as plain HTML.

    Output areas give their saved figures and text, labels and HTML widgets their value, controls
    "description: value" (a selection: its chosen label); boxes their children in order. The controls no longer
    do anything: their callbacks need a kernel.
    """
    model = models.get(model_id, {}).get("state", {})
    name = model.get("_model_name", "")
    if name == "OutputModel":
        parts = []
        for output in model.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                parts.append(png_img(data["image/png"]))
            elif output.get("output_type") == "stream":
                parts.append(f"<pre>{html.escape(''.join(output.get('text', '')))}</pre>")
            elif "text/plain" in data:
                parts.append(f"<pre>{html.escape(''.join(data['text/plain']))}</pre>")
        return "".join(parts)
    if "children" in model:
        inner = "".join(_snapshot_html(child.removeprefix("IPY_MODEL_"), models) for child in model["children"])
        direction = "row" if name == "HBoxModel" else "column"
        return f'<div style="display:flex;flex-direction:{direction};gap:4px">{inner}</div>'
    if name in ("HTMLModel", "HTMLMathModel"):
        return f"<div>{model.get('value', '')}</div>"
    if "value" in model:
        label = f"{model.get('description', '')}: " if model.get("description") else ""
        value = model["value"]
        if name.endswith("ProgressModel"):
            return ""  # tqdm's bar: the HTML widgets beside it already say how far it got
        if "_options_labels" in model and isinstance(value, int) and 0 <= value < len(model["_options_labels"]):
            value = model["_options_labels"][value]
        return f"<div>{html.escape(label + str(value))}</div>"
    labels, index = model.get("_options_labels"), model.get("index")
    if isinstance(labels, list) and isinstance(index, int) and 0 <= index < len(labels):
        # a selection (SelectionSlider, Dropdown) saves the index of its choice, not a value
        label = f"{model.get('description', '')}: " if model.get("description") else ""
        return f"<div>{html.escape(label + str(labels[index]))}</div>"
    return ""


def make_offline(nb) -> None:
    """Rewrite a notebook (nbformat node, in place) so that an HTML export needs nothing from a CDN.

    Head views become ``standalone_html`` (from the widget state, or from the data a committed lesson keeps in
    the output's metadata, ``SAVED_HEAD_VIEW``); other widgets become static snapshots of what they showed
    (marked as such); the saved widget state is then dropped, so the exporter includes no widget manager.
    """
    models = _widget_models(nb)
    library_written = False  # the head view's script and style go into the page once, with its first view
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            saved = output.get("metadata", {}).get(SAVED_HEAD_VIEW)
            if WIDGET_VIEW not in data and saved is not None:  # a committed lesson's head view, without widget state
                data["text/html"] = standalone_html(saved, library=not library_written)
                library_written = True
                data.pop("image/png", None)
                continue
            if WIDGET_VIEW not in data:
                continue
            model_id = data[WIDGET_VIEW].get("model_id", "")
            state = models.get(model_id, {}).get("state")
            if state is None:
                del data[WIDGET_VIEW]  # never saved: the exporter falls back on the other formats
                continue
            if state.get("_anywidget_id") in HEAD_VIEW_IDS:
                data["text/html"] = standalone_html(state, library=not library_written)
                library_written = True
            else:
                snapshot = _snapshot_html(model_id, models)
                data["text/html"] = (
                    '<div class="widget-snapshot" title="saved snapshot: the controls need a running kernel">'
                    f"{snapshot}</div>"
                )
            data.pop("image/png", None)
            del data[WIDGET_VIEW]
    nb.get("metadata", {}).pop("widgets", None)


@functools.cache
def _offline_widgets_class():
    # Built on first use: importing nbconvert costs seconds, and `import helpers` should not pay for it.
    from nbconvert.preprocessors import Preprocessor

    class OfflineWidgets(Preprocessor):
        """nbconvert preprocessor that runs ``make_offline``: head views self-contained, no widget manager.

        From the command line (``export_html`` does the same)::

            jupyter nbconvert --to html --HTMLExporter.preprocessors=helpers.viewing.head_view.OfflineWidgets \\
                --HTMLExporter.require_js_url= --HTMLExporter.mathjax_url= LESSON.ipynb
        """

        def preprocess(self, nb, resources):
            make_offline(nb)
            return nb, resources

    OfflineWidgets.__module__ = __name__
    return OfflineWidgets


def __getattr__(name: str):
    # `helpers.viewing.head_view.OfflineWidgets` (what nbconvert's --HTMLExporter.preprocessors imports) is made lazily.
    if name == "OfflineWidgets":
        return _offline_widgets_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Scripts and style sheets an HTML page would fetch from elsewhere (plain links to read are fine).
_REMOTE_FETCH = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//[^\"']+", re.IGNORECASE)


def export_html(notebook: str | Path, html_path: str | Path | None = None) -> Path:
    """Export an executed notebook to one HTML file that works offline, head views included.

    Unlike plain ``jupyter nbconvert --to html``, the page loads no widget manager, require.js or
    MathJax from a CDN (formulas stay as TeX source). Returns the path written (default: beside the
    notebook, ``.html``). ``html_path`` may not be the notebook itself (by any name); the page is written
    atomically, so an interrupted export leaves the file that was there before.
    """
    import nbformat
    from nbconvert import HTMLExporter

    notebook = Path(notebook)
    html_path = Path(html_path) if html_path is not None else notebook.with_suffix(".html")
    if html_path.resolve() == notebook.resolve() or (html_path.exists() and html_path.samefile(notebook)):
        raise ValueError(f"export_html would overwrite the notebook {notebook} with HTML: give another html_path")
    if html_path.is_dir():
        raise ValueError(f"html_path {html_path} is a folder: expected the HTML file's path, e.g. lesson.html")
    nb = nbformat.read(notebook, as_version=4)
    # An empty URL makes the template's <script src=""> fetch nothing (HTML: an empty src is an error).
    exporter = HTMLExporter(require_js_url="", mathjax_url="")
    exporter.register_preprocessor(_offline_widgets_class()(), enabled=True)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": notebook.stem}})
    remote = _REMOTE_FETCH.findall(body)
    if remote or "html-manager" in body:
        raise RuntimeError(f"the export would still fetch {remote or 'a widget manager'}: it would not work offline")
    html_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(html_path, body)
    return html_path
