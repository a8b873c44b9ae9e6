"""Figures for the lessons: attention heatmaps with token labels, grids of heads.

Conventions, kept in every figure of the course: rows are queries (the tokens doing the looking,
on the y axis), columns are keys (the tokens looked at, on the x axis); weights are drawn with one
colour-blind-safe colour map (viridis) on one shared scale, 0 to 1 unless stated.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch import Tensor

CMAP = "viridis"


def attention_heatmap(
    weights: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    ax: Axes | None = None,
    title: str | None = None,
    vmin: float = 0.0,
    vmax: float = 1.0,
    annotate: bool = False,
    colorbar: bool = True,
) -> Axes:
    """Draw one (L, S) attention matrix: queries on the y axis, keys on the x axis.

    ``annotate`` writes each weight in its cell (for small examples a learner checks by hand).
    """
    weights = _as_2d(weights)
    L, S = weights.shape
    if len(query_tokens) != L or len(key_tokens) != S:
        raise ValueError(
            f"weights of shape (L, S) = {(L, S)} need {L} query tokens and {S} key tokens, "
            f"got {len(query_tokens)} and {len(key_tokens)}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(0.5 * S + 2.5, 0.45 * L + 1.5))
    image = ax.imshow(weights.numpy(), cmap=CMAP, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(S), list(key_tokens), rotation=60, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(L), list(query_tokens))
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries")
    if title:
        ax.set_title(title)
    if annotate:
        for i in range(L):
            for j in range(S):
                value = float(weights[i, j])
                colour = "black" if value > vmin + 0.6 * (vmax - vmin) else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", color=colour, fontsize=8)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def head_grid(
    weights: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    row_label: str = "layer",
    title: str | None = None,
    vmin: float = 0.0,
    vmax: float = 1.0,
    panel_size: float = 2.6,
) -> Figure:
    """Draw every head: (h, L, S) as one row, or (layers, h, L, S) as a layer x head grid.

    All panels share one colour scale and one colour bar, so heads can be compared by eye.
    """
    weights = weights.detach().float().cpu()
    if weights.dim() == 3:
        weights = weights.unsqueeze(0)
    if weights.dim() != 4:
        raise ValueError(f"head_grid expects (h, L, S) or (layers, h, L, S) weights, got shape {tuple(weights.shape)}")
    rows, heads, L, S = weights.shape
    fig, axes = plt.subplots(
        rows, heads, figsize=(panel_size * heads + 1.0, panel_size * rows + 0.6), squeeze=False, constrained_layout=True
    )
    for r in range(rows):
        for h in range(heads):
            ax = axes[r][h]
            image = ax.imshow(weights[r, h].numpy(), cmap=CMAP, vmin=vmin, vmax=vmax, aspect="auto")
            ax.set_xticks(range(S), list(key_tokens) if r == rows - 1 else [], rotation=90, fontsize=7)
            ax.set_yticks(range(L), list(query_tokens) if h == 0 else [], fontsize=7)
            heading = f"head {h}" if rows == 1 else f"{row_label} {r}, head {h}"
            ax.set_title(heading, fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def _as_2d(weights: Tensor) -> Tensor:
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.dim() != 2:
        raise ValueError(f"expected one (L, S) attention matrix, got shape {tuple(weights.shape)}")
    return weights
