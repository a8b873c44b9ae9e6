"""Lesson 05's map of the transformer: no "× N" beside the batch N, and a residual arrow around every sublayer."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.colors import to_rgba

from helpers.viewing.plotting import transformer_diagram


def test_layers_repeat_n_layers_times_not_n():
    fig = transformer_diagram()
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("× n_layers") == 2  # one per stack
    assert not any(t.strip() in ("× N", "x N") for t in texts)
    assert any("n_layers: layers in each stack" in t and "N: sentences in a batch" in t for t in texts)
    assert any("memory (N, S, E)" in t for t in texts)
    plt.close(fig)


def test_every_sublayer_has_a_residual_arrow():
    fig = transformer_diagram()
    residual_grey = to_rgba("0.35")
    bypasses = [line for line in fig.axes[0].lines if to_rgba(line.get_color()) == residual_grey]
    assert len(bypasses) == 2 + 3  # encoder: attention, feed-forward; decoder: self-, cross-attention, feed-forward
    plt.close(fig)
