"""The head browser's plain functions, and the widget driven without a front end."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch

from helpers.viewing.plotting import head_split_diagram, transformer_diagram
from helpers.viewing.widgets import head_browser, head_figure, show_head

TOKENS_Q = ["A", "mother", "and"]
TOKENS_K = ["Eine", "Mutter", "und", "ihr"]


def _weights(layers: int = 2, heads: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.softmax(torch.randn(layers, heads, len(TOKENS_Q), len(TOKENS_K), generator=generator), dim=-1)


def test_head_figure_draws_the_chosen_head_with_token_labels():
    weights = _weights()
    fig = head_figure(weights, TOKENS_Q, TOKENS_K, layer=1, head=2)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS_K
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS_Q
    assert torch.allclose(torch.as_tensor(ax.images[0].get_array().data), weights[1, 2])
    assert ax.images[0].get_clim() == (0.0, 1.0)  # the fixed scale, whatever the head
    assert ax.get_title() == "layer 1, head 2"
    plt.close(fig)


def test_head_figure_accepts_one_layer_and_rejects_bad_choices():
    weights = _weights()[0]  # (h, L, S)
    fig = head_figure(weights, TOKENS_Q, TOKENS_K, head=1)
    assert fig.axes[0].get_title() == "head 1"
    plt.close(fig)
    with pytest.raises(ValueError, match=r"head in 0\.\.2"):
        head_figure(weights, TOKENS_Q, TOKENS_K, head=3)
    with pytest.raises(ValueError, match="expected"):
        head_figure(weights[0, 0], TOKENS_Q, TOKENS_K)
    with pytest.raises(ValueError, match="query_tokens"):
        head_figure(weights, TOKENS_Q[:2], TOKENS_K)


def test_show_head_returns_what_it_draws():
    weights = _weights()
    assert torch.equal(show_head(weights, TOKENS_Q, TOKENS_K, layer=0, head=1), weights[0, 1])
    plt.close("all")


def test_widget_sliders_update_the_result():
    weights = _weights()
    ui = head_browser(weights, TOKENS_Q, TOKENS_K)
    layer_slider, head_slider = ui.children[0], ui.children[1]
    assert (layer_slider.max, head_slider.max) == (1, 2)
    head_slider.value = 2
    assert torch.equal(ui.result, weights[0, 2])
    layer_slider.value = 1
    assert torch.equal(ui.result, weights[1, 2])
    plt.close("all")


def test_widget_for_one_layer_has_only_a_head_slider():
    weights = _weights()[1]
    ui = head_browser(weights, TOKENS_Q, TOKENS_K)
    head_slider = ui.children[0]
    assert head_slider.description == "head" and head_slider.max == 2
    head_slider.value = 1
    assert torch.equal(ui.result, weights[1])
    plt.close("all")


def test_diagrams_draw():
    fig = head_split_diagram(num_tokens=3, embed_dim=6, num_heads=3)
    assert len(fig.axes) == 3 and "(3, 3, 2)" in fig.axes[1].get_title()
    with pytest.raises(ValueError, match="divisible"):
        head_split_diagram(embed_dim=7, num_heads=2)
    fig2 = transformer_diagram()
    texts = [t.get_text() for t in fig2.axes[0].texts]
    assert "cross-attention (h heads)" in texts and "masked self-attention (h heads)" in texts
    plt.close("all")
