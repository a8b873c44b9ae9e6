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
# Lesson 04 (and 06): browse attention heads one at a time
# ---------------------------------------------------------------------------------------------
def _as_layers_of_heads(weights: Tensor) -> Tensor:
    """(h, L, S) or (layers, h, L, S) -> (layers, h, L, S), detached on the CPU."""
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.dim() == 3:
        weights = weights.unsqueeze(0)
    if weights.dim() != 4:
        raise ValueError(f"expected (h, L, S) or (layers, h, L, S) attention weights, got shape {tuple(weights.shape)}")
    return weights


def head_figure(weights: Tensor, query_tokens, key_tokens, layer: int = 0, head: int = 0) -> Figure:
    """One head's (L, S) weights from ``weights`` (h, L, S) or (layers, h, L, S), with token labels.

    Drawn on the fixed 0-1 scale, so switching heads never changes the colours' meaning.
    """
    weights = _as_layers_of_heads(weights)
    layers, heads = weights.shape[:2]
    if not (0 <= layer < layers and 0 <= head < heads):
        raise ValueError(f"layer must be in 0..{layers - 1} and head in 0..{heads - 1}, got layer={layer}, head={head}")
    L, S = weights.shape[2:]
    fig, ax = plt.subplots(figsize=(0.45 * S + 2.8, 0.4 * L + 1.6), constrained_layout=True)
    where = f"layer {layer}, head {head}" if layers > 1 else f"head {head}"
    attention_heatmap(weights[layer, head], query_tokens, key_tokens, ax=ax, title=where)
    return fig


def show_head(weights: Tensor, query_tokens, key_tokens, layer: int = 0, head: int = 0) -> Tensor:
    """The head browser's callback: draw ``head_figure`` and return the (L, S) weights it shows."""
    head_figure(weights, query_tokens, key_tokens, layer, head)
    plt.show()
    return _as_layers_of_heads(weights)[layer, head]


def head_browser(weights: Tensor, query_tokens, key_tokens):
    """Sliders for the layer and the head that redraw one head's heatmap.

    Children, in order: the layer slider (only for (layers, h, L, S) weights with several layers),
    the head slider, then the output area; ``ui.result`` holds the (L, S) weights drawn last.
    """
    import ipywidgets as widgets

    stacked = _as_layers_of_heads(weights)
    layers, heads = stacked.shape[:2]
    return widgets.interactive(
        lambda layer, head: show_head(stacked, query_tokens, key_tokens, layer, head),
        layer=widgets.IntSlider(value=0, min=0, max=layers - 1, description="layer")
        if layers > 1
        else widgets.fixed(0),
        head=widgets.IntSlider(value=0, min=0, max=heads - 1, description="head"),
    )


# ---------------------------------------------------------------------------------------------
# Lesson 06: explore a translator's cross-attention, sentence by sentence
# ---------------------------------------------------------------------------------------------
def show_cross_attention(translations, sentence: int = 0, layer: int = 0, head: int = 0) -> Tensor:
    """The translation explorer's callback: draw one head's cross-attention for one translated sentence.

    ``translations`` is a list of ``helpers.models.translation.Translation`` (anything with ``attention``
    (layers, h, T, S), ``source_tokens`` (S labels) and ``output_tokens`` (T labels)). Output tokens
    are on the y axis (the queries), source tokens on the x axis; returns the (T, S) weights drawn.
    """
    if not 0 <= sentence < len(translations):
        raise ValueError(f"sentence must be in 0..{len(translations) - 1}, got {sentence}")
    chosen = translations[sentence]
    if chosen.attention is None:
        raise ValueError("this translation carries no attention: translate it with translate_with_attention")
    head_figure(chosen.attention, chosen.output_tokens, chosen.source_tokens, layer, head)
    plt.show()
    return _as_layers_of_heads(chosen.attention)[layer, head]


def cross_attention_explorer(translations):
    """A sentence menu and layer and head sliders over translated sentences' cross-attention.

    Children, in order: sentence (a drop-down of the German sources), layer, head, then the output
    area; ``ui.result`` holds the (T, S) weights drawn last.
    """
    import ipywidgets as widgets

    if not translations:
        raise ValueError("cross_attention_explorer needs at least one translation")
    layers, heads = _as_layers_of_heads(translations[0].attention).shape[:2]
    return widgets.interactive(
        lambda sentence, layer, head: show_cross_attention(translations, sentence, layer, head),
        sentence=widgets.Dropdown(
            options=[(t.source, i) for i, t in enumerate(translations)],
            value=0,
            description="sentence",
            layout=widgets.Layout(width="95%"),
        ),
        layer=widgets.IntSlider(value=layers - 1, min=0, max=layers - 1, description="layer", continuous_update=False),
        head=widgets.IntSlider(value=0, min=0, max=heads - 1, description="head", continuous_update=False),
    )
