"""Interactive explorers for the lessons (ipywidgets).

Each widget is a thin shell around a plain function in this module that draws or returns what
the widget shows; unit tests call those functions directly, and every lesson draws a static
figure with the default settings before showing the widget (GitHub does not run widgets).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from torch import Tensor

from helpers.viewing.plotting import attention_heatmap
from helpers.viewing.shapes import attention_inputs, layers_of_heads

# ---------------------------------------------------------------------------------------------
# Lesson 03: how d_k and a temperature change the sharpness of attention
# ---------------------------------------------------------------------------------------------
SHARPNESS_TOKENS = ("A", "mother", "and", "her", "little", "son")


def sharpness_weights(
    d_k: int = 64, temperature: float = 1.0, scaled: bool = True, seed: int = 0, num_tokens: int = len(SHARPNESS_TOKENS)
) -> Tensor:
    """Self-attention weights of random queries and keys with head size ``d_k``: (L, L).

    Queries and keys have entries drawn from N(0, 1) (what trained projections roughly give), so the
    raw scores have variance d_k. ``scaled`` divides them by sqrt(d_k); ``temperature`` divides
    them once more: above 1 the weights spread out, below 1 they sharpen.
    """
    if d_k < 1 or num_tokens < 1:
        raise ValueError(f"d_k and num_tokens must be positive, got {d_k} and {num_tokens}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(num_tokens, d_k, generator=generator)  # (L, d_k)
    k = torch.randn(num_tokens, d_k, generator=generator)  # (L, d_k)
    scores = q @ k.T  # (L, L)
    if scaled:
        scores = scores / math.sqrt(d_k)
    return torch.softmax(scores / temperature, dim=-1)


def sharpness_figure(d_k: int = 64, temperature: float = 1.0, scaled: bool = True, seed: int = 0) -> Figure:
    """Heatmap of ``sharpness_weights`` with the running example's tokens, on the fixed 0-1 scale."""
    weights = sharpness_weights(d_k, temperature, scaled, seed)
    fig, ax = plt.subplots(figsize=(5.2, 4.2), constrained_layout=True)
    scaling = "/ √d_k" if scaled else "unscaled"
    attention_heatmap(
        weights,
        SHARPNESS_TOKENS,
        SHARPNESS_TOKENS,
        ax=ax,
        annotate=True,
        # τ, not T: T is a length in the course's notation
        title=f"d_k = {d_k}, {scaling}, τ = {temperature:g}: mean largest weight per row "
        f"{weights.max(-1).values.mean():.2f}",
    )
    ax.title.set_fontsize(10)
    return fig


def show_sharpness(d_k: int = 64, temperature: float = 1.0, scaled: bool = True) -> Tensor:
    """The widget's callback: draw ``sharpness_figure`` and return the weights it shows."""
    sharpness_figure(d_k, temperature, scaled)
    plt.show()
    return sharpness_weights(d_k, temperature, scaled)


def temperature_explorer():
    """A d_k slider, a temperature slider and a scaling switch that redraw the attention heatmap.

    Children, in order: d_k, temperature, scaled (then the output area); ``ui.result`` holds the
    weights drawn last.
    """
    import ipywidgets as widgets

    return widgets.interactive(
        show_sharpness,
        # continuous_update=False: redraw once when the slider is released, not on every step of a drag
        d_k=widgets.SelectionSlider(
            options=[2**i for i in range(11)], value=64, description="d_k", continuous_update=False
        ),
        temperature=widgets.FloatLogSlider(
            value=1.0, base=10, min=-1, max=1, step=0.1, description="temperature", continuous_update=False
        ),
        scaled=widgets.Checkbox(value=True, description="divide by √d_k"),
    )


# ---------------------------------------------------------------------------------------------
# Lessons 04, 06 and 08: browse attention heads one at a time
# ---------------------------------------------------------------------------------------------
_DEFAULT_DRAWN_ABOVE = "The figure for these settings is drawn above; move a control to redraw it here."


def head_figure(weights: Tensor, query_tokens, key_tokens=None, layer: int = 0, head: int = 0) -> Figure:
    """One head's (L, S) weights, with token labels. ``weights``: any shape ``helpers.viewing.shapes``
    accepts; ``key_tokens`` None: self-attention. Drawn on the fixed 0-1 scale, so switching heads never
    changes the colours' meaning."""
    stacked, query_tokens, key_tokens = attention_inputs(weights, query_tokens, key_tokens)
    layers, heads, L, S = stacked.shape
    if not (0 <= layer < layers and 0 <= head < heads):
        raise ValueError(f"layer must be in 0..{layers - 1} and head in 0..{heads - 1}, got layer={layer}, head={head}")
    fig, ax = plt.subplots(figsize=(0.45 * S + 2.8, 0.4 * L + 1.6), constrained_layout=True)
    where = f"layer {layer}, head {head}" if layers > 1 else f"head {head}"
    attention_heatmap(stacked[layer, head], query_tokens, key_tokens, ax=ax, title=where)
    return fig


def show_head(weights: Tensor, query_tokens, key_tokens=None, layer: int = 0, head: int = 0) -> Tensor:
    """The head browser's callback: draw ``head_figure`` and return the (L, S) weights it shows."""
    head_figure(weights, query_tokens, key_tokens, layer, head)
    plt.show()
    return layers_of_heads(weights)[layer, head]


def head_browser(weights: Tensor, query_tokens, key_tokens=None, *, draw_default: bool = True):
    """Sliders for the layer and the head that redraw one head's heatmap (``weights`` as ``head_figure``).

    Children, in order: the layer slider (only with several layers), the head slider, then the output
    area; ``ui.result`` holds the (L, S) weights drawn last. ``draw_default=False``: the output area starts
    with a note instead of the figure (when the lesson draws that figure just above: saved once, not twice).
    """
    import ipywidgets as widgets

    stacked, query_tokens, key_tokens = attention_inputs(weights, query_tokens, key_tokens)
    layers, heads = stacked.shape[:2]
    pending = [not draw_default]

    def update(layer, head):
        if pending and pending.pop():
            print(_DEFAULT_DRAWN_ABOVE)
            return stacked[layer, head]
        return show_head(stacked, query_tokens, key_tokens, layer, head)

    return widgets.interactive(
        update,
        layer=widgets.IntSlider(value=0, min=0, max=layers - 1, description="layer")
        if layers > 1
        else widgets.fixed(0),
        head=widgets.IntSlider(value=0, min=0, max=heads - 1, description="head"),
    )


# ---------------------------------------------------------------------------------------------
# Lessons 06 and 08: explore attention sentence by sentence
# ---------------------------------------------------------------------------------------------
def _example(item) -> tuple:
    """``(weights, query_tokens, key_tokens)`` of one explorer item, which is one of:

    - such a triple (``key_tokens`` None for self-attention);
    - an object with ``attention`` and ``tokens`` (self-attention over its tokens, such as
      ``helpers.models.pretrained.AttentionView``);
    - a ``helpers.models.translation.Translation``: its cross-attention, output tokens reading source tokens.
    """
    if isinstance(item, (tuple, list)):
        if len(item) != 3:
            raise ValueError(f"an explorer item is (weights, query_tokens, key_tokens), got {len(item)} values")
        return tuple(item)
    if hasattr(item, "attention") and hasattr(item, "tokens"):
        return item.attention, item.tokens, None
    if all(hasattr(item, name) for name in ("attention", "output_tokens", "source_tokens")):
        if item.attention is None:
            raise ValueError("this translation carries no attention: translate it with translate_with_attention")
        return item.attention, item.output_tokens, item.source_tokens
    raise ValueError(
        "an explorer item is (weights, query_tokens, key_tokens), an object with attention and tokens, or a "
        f"Translation; got a {type(item).__name__}"
    )


def _label(item, index: int, query_tokens) -> str:
    source = getattr(item, "source", None)
    return str(source) if source else f"{index}: " + " ".join(query_tokens[:12])


def show_attention(examples, sentence: int = 0, layer: int = 0, head: int = 0) -> Tensor:
    """The attention explorer's callback: draw one head of one example; returns the (L, S) weights drawn.

    ``examples``: a list of ``(weights, query_tokens, key_tokens)`` triples (``weights`` any shape
    ``helpers.viewing.shapes`` accepts, ``key_tokens`` None for self-attention), of objects with
    ``attention`` and ``tokens`` (self-attention, e.g. ``helpers.models.pretrained.AttentionView``), or of
    translations (``helpers.models.translation.Translation``: output tokens on the y axis, source tokens on
    the x axis).
    """
    if not 0 <= sentence < len(examples):
        raise ValueError(f"sentence must be in 0..{len(examples) - 1}, got {sentence}")
    weights, query_tokens, key_tokens = _example(examples[sentence])
    return show_head(weights, query_tokens, key_tokens, layer, head)


def attention_explorer(examples, labels=None, *, draw_default: bool = True):
    """A sentence menu and layer and head sliders over several examples' attention (``show_attention``'s).

    ``labels``: one menu entry per example (default: a translation's source sentence, else its first
    query tokens). Children, in order: sentence, layer, head, then the output area; the layer starts on
    the last layer; ``ui.result`` holds the (L, S) weights drawn last. ``draw_default=False``: the output
    area starts with a note instead of the figure (when the lesson draws it just above).
    """
    import ipywidgets as widgets

    if not examples:
        raise ValueError("attention_explorer needs at least one example")
    checked = []
    for index, item in enumerate(examples):
        stacked, query_tokens, key_tokens = attention_inputs(*_example(item))
        checked.append((stacked, query_tokens, key_tokens))
        if stacked.shape[:2] != checked[0][0].shape[:2]:
            raise ValueError(
                f"every example needs the same (n_layers, h): example 0 has {tuple(checked[0][0].shape[:2])}, "
                f"example {index} has {tuple(stacked.shape[:2])}"
            )
    if labels is None:
        labels = [_label(item, i, q) for i, (item, (_, q, _)) in enumerate(zip(examples, checked, strict=True))]
    labels = [str(label) for label in labels]
    if len(labels) != len(checked):
        raise ValueError(f"got {len(labels)} labels for {len(checked)} examples")
    layers, heads = checked[0][0].shape[:2]
    pending = [not draw_default]

    def update(sentence, layer, head):
        if pending and pending.pop():
            print(_DEFAULT_DRAWN_ABOVE)
            return checked[sentence][0][layer, head]
        return show_attention(checked, sentence, layer, head)

    return widgets.interactive(
        update,
        sentence=widgets.Dropdown(
            options=[(label, i) for i, label in enumerate(labels)],
            value=0,
            description="sentence",
            layout=widgets.Layout(width="95%"),
        ),
        layer=widgets.IntSlider(value=layers - 1, min=0, max=layers - 1, description="layer", continuous_update=False),
        head=widgets.IntSlider(value=0, min=0, max=heads - 1, description="head", continuous_update=False),
    )


# Lesson 06's names for the same explorer over translations' cross-attention.
show_cross_attention = show_attention
cross_attention_explorer = attention_explorer
