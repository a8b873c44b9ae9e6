"""Lesson 03's d_k / temperature explorer and the figures lessons 01 and 03 draw."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F

from helpers.attention import causal_mask
from helpers.embeddings import sinusoidal_positional_encoding
from helpers.viewing.plotting import (
    mask_plot,
    position_similarity_plot,
    positional_encoding_heatmap,
    scaling_experiment_plot,
)
from helpers.viewing.widgets import (
    SHARPNESS_TOKENS,
    sharpness_figure,
    sharpness_weights,
    show_sharpness,
    temperature_explorer,
)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_sharpness_weights_equal_torch_sdpa_with_temperature():
    d_k, temperature = 16, 0.5
    weights = sharpness_weights(d_k, temperature, scaled=True, seed=3)
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(len(SHARPNESS_TOKENS), d_k, generator=generator)
    k = torch.randn(len(SHARPNESS_TOKENS), d_k, generator=generator)
    # F.sdpa with scale = 1 / (sqrt(d_k) T) and the identity as values returns the weights themselves
    identity = torch.eye(len(SHARPNESS_TOKENS))
    expected = F.scaled_dot_product_attention(q, k, identity, scale=1 / (math.sqrt(d_k) * temperature))
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(SHARPNESS_TOKENS)))


def test_unscaled_weights_sharpen_as_d_k_grows_and_scaled_do_not():
    def mean_max(d_k, scaled):
        return float(sum(sharpness_weights(d_k, scaled=scaled, seed=s).max(-1).values.mean() for s in range(20)) / 20)

    assert mean_max(512, scaled=False) > 0.9 > mean_max(4, scaled=False)
    assert abs(mean_max(512, scaled=True) - mean_max(4, scaled=True)) < 0.15


def test_temperature_spreads_or_sharpens():
    cold, warm = sharpness_weights(64, 0.2), sharpness_weights(64, 5.0)
    assert cold.max(-1).values.mean() > sharpness_weights(64, 1.0).max(-1).values.mean() > warm.max(-1).values.mean()


@pytest.mark.parametrize("kwargs, fragment", [({"d_k": 0}, "d_k"), ({"temperature": 0.0}, "temperature")])
def test_sharpness_weights_reject_bad_settings(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        sharpness_weights(**kwargs)


def test_sharpness_figure_shows_the_weights_with_token_labels():
    fig = sharpness_figure(d_k=8, temperature=2.0, scaled=False, seed=1)
    ax = fig.axes[0]
    shown = torch.as_tensor(ax.images[0].get_array().data)
    torch.testing.assert_close(shown, sharpness_weights(8, 2.0, scaled=False, seed=1))
    assert [t.get_text() for t in ax.get_xticklabels()] == list(SHARPNESS_TOKENS)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(SHARPNESS_TOKENS)
    assert ax.images[0].get_clim() == (0.0, 1.0)  # the same scale for every setting
    assert "d_k = 8" in ax.get_title() and "unscaled" in ax.get_title()


def test_explorer_callback_redraws_for_new_settings():
    ui = temperature_explorer()
    d_k, temperature, scaled = ui.children[:3]
    torch.testing.assert_close(ui.result, sharpness_weights(64, 1.0, True))
    d_k.value = 512
    scaled.value = False
    torch.testing.assert_close(ui.result, sharpness_weights(512, 1.0, False))
    temperature.value = 10.0
    torch.testing.assert_close(ui.result, sharpness_weights(512, 10.0, False))
    torch.testing.assert_close(show_sharpness(4, 0.5, True), sharpness_weights(4, 0.5, True))


def test_positional_encoding_heatmap_and_similarity_plot():
    table = sinusoidal_positional_encoding(40, 16)
    ax = positional_encoding_heatmap(table)
    torch.testing.assert_close(torch.as_tensor(ax.images[0].get_array().data), table)
    assert ax.images[0].get_clim() == (-1.0, 1.0)
    fig = position_similarity_plot(table, reference_positions=(3, 30))
    torch.testing.assert_close(torch.as_tensor(fig.axes[0].images[0].get_array().data), table @ table.T)
    assert len(fig.axes[1].lines) == 2
    with pytest.raises(ValueError, match=r"\[0, 39\]"):
        position_similarity_plot(table, reference_positions=(40,))


def test_scaling_experiment_plot_draws_both_panels():
    fig = scaling_experiment_plot([1, 4, 16], [1, 4, 16], [1, 1, 1], [0.3, 0.6, 0.9], [0.3, 0.3, 0.3], num_keys=8)
    left, right = fig.axes
    assert list(left.lines[0].get_ydata()) == [1, 4, 16]
    assert list(right.lines[1].get_ydata()) == [0.3, 0.3, 0.3]


def test_mask_plot_draws_both_conventions_alike():
    tokens = ["a", "b", "c"]
    blocked = causal_mask(3)
    bright_blocked = mask_plot(blocked, tokens, tokens, true_means="blocked").images[0].get_array().data
    bright_allowed = mask_plot(~blocked, tokens, tokens, true_means="may attend").images[0].get_array().data
    torch.testing.assert_close(torch.as_tensor(bright_blocked), torch.as_tensor(bright_allowed))
    torch.testing.assert_close(torch.as_tensor(bright_blocked), (~blocked).float())
    with pytest.raises(ValueError, match="true_means"):
        mask_plot(blocked, tokens, tokens, true_means="keep")
    with pytest.raises(ValueError, match="3 key tokens, got 3 and 2"):
        mask_plot(blocked, tokens, tokens[:2], true_means="blocked")
