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


# ---------------------------------------------------------------------------------------------
# Lesson 01: positional encodings
# ---------------------------------------------------------------------------------------------
def positional_encoding_heatmap(encoding: Tensor, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Draw a (P, E) positional-encoding table: positions down the y axis, features along the x axis.

    Values lie in [-1, 1]; one fixed colour scale (viridis) makes tables of different sizes comparable.
    """
    encoding = _as_2d(encoding)
    P, E = encoding.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.0))
    image = ax.imshow(encoding.numpy(), cmap=CMAP, vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xlabel(f"feature (0 .. {E - 1}): even = sin, odd = cos; frequency falls to the right")
    ax.set_ylabel(f"position (0 .. {P - 1})")
    ax.set_title(title or f"sinusoidal positional encoding, {P} positions x {E} features")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="value")
    return ax


def position_similarity_plot(encoding: Tensor, reference_positions: Sequence[int] = (5, 20, 35)) -> Figure:
    """Dot products between the encodings of every pair of positions, and a slice through them.

    Left: the (P, P) matrix ``encoding @ encoding.T``; its stripes run parallel to the diagonal
    because the dot product depends only on the distance between positions. Right: the rows of a few
    reference positions drawn against the distance to them: the curves lie on top of each other.
    """
    encoding = _as_2d(encoding)
    P = encoding.shape[0]
    if any(not 0 <= p < P for p in reference_positions):
        raise ValueError(f"reference positions must lie in [0, {P - 1}], got {list(reference_positions)}")
    similarity = encoding @ encoding.T  # (P, P)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.2), constrained_layout=True)
    image = left.imshow(similarity.numpy(), cmap=CMAP, aspect="equal", interpolation="nearest")
    left.set_xlabel("position j")
    left.set_ylabel("position i")
    left.set_title("PE[i] · PE[j]")
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.04, label="dot product")
    positions = torch.arange(P)
    for reference, marker in zip(reference_positions, ("o", "s", "^", "D", "v")):
        right.plot((positions - reference).numpy(), similarity[reference].numpy(), marker=marker, markersize=3,
                   linewidth=1, label=f"from position {reference}")
    right.set_xlabel("distance j - i")
    right.set_ylabel("PE[i] · PE[j]")
    right.set_title("the same curve, wherever you start")
    right.legend()
    right.grid(alpha=0.3)
    return fig


# ---------------------------------------------------------------------------------------------
# Lesson 03: why the scores are scaled, and masks
# ---------------------------------------------------------------------------------------------
def scaling_experiment_plot(
    head_sizes: Sequence[int],
    variance_unscaled: Sequence[float],
    variance_scaled: Sequence[float],
    max_weight_unscaled: Sequence[float],
    max_weight_scaled: Sequence[float],
    num_keys: int | None = None,
) -> Figure:
    """Two panels against the head size d_k (log axis): score variance, and the largest softmax weight.

    Without scaling the variance grows like d_k and the softmax saturates (largest weight -> 1);
    dividing by sqrt(d_k) keeps the variance near 1 and the weights spread.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.0), constrained_layout=True)
    sizes = list(head_sizes)
    left.plot(sizes, list(variance_unscaled), "o-", label="q · k (unscaled)")
    left.plot(sizes, list(variance_scaled), "s-", label="q · k / √d_k (scaled)")
    left.plot(sizes, sizes, ":", color="grey", label="d_k (for reference)")
    left.set_xscale("log", base=2)
    left.set_yscale("log", base=2)
    left.set_xlabel("head size d_k")
    left.set_ylabel("variance of the scores")
    left.set_title("score variance")
    left.legend()
    right.plot(sizes, list(max_weight_unscaled), "o-", label="softmax(q · k)")
    right.plot(sizes, list(max_weight_scaled), "s-", label="softmax(q · k / √d_k)")
    if num_keys:
        right.axhline(1.0 / num_keys, linestyle=":", color="grey", label=f"uniform (1/{num_keys})")
    right.set_xscale("log", base=2)
    right.set_ylim(0.0, 1.05)
    right.set_xlabel("head size d_k")
    right.set_ylabel("largest weight in a row (mean)")
    right.set_title("softmax sharpness")
    right.legend()
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return fig


def mask_plot(
    mask: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    true_means: str,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw a boolean (L, S) mask, stating its convention: ``true_means`` is "blocked" or "may attend".

    Whatever the convention, cells where a query may attend are drawn bright, blocked cells dark
    with a cross, so masks in either convention look the same when they mean the same.
    """
    if true_means not in ("blocked", "may attend"):
        raise ValueError(f'true_means must be "blocked" or "may attend", got {true_means!r}')
    mask = torch.as_tensor(mask).detach().cpu()
    if mask.dtype != torch.bool or mask.dim() != 2:
        raise ValueError(f"expected a boolean (L, S) mask, got dtype {mask.dtype} and shape {tuple(mask.shape)}")
    L, S = mask.shape
    if len(query_tokens) != L or len(key_tokens) != S:
        raise ValueError(
            f"a mask of shape (L, S) = {(L, S)} needs {L} query tokens and {S} key tokens, "
            f"got {len(query_tokens)} and {len(key_tokens)}"
        )
    allowed = ~mask if true_means == "blocked" else mask
    if ax is None:
        _, ax = plt.subplots(figsize=(0.5 * S + 2.0, 0.45 * L + 1.5))
    ax.imshow(allowed.float().numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(L):
        for j in range(S):
            ax.text(j, i, "" if allowed[i, j] else "x", ha="center", va="center", color="white", fontsize=9)
    ax.set_xticks(range(S), list(key_tokens), rotation=60, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(L), list(query_tokens))
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries")
    ax.set_title(title or f"mask (True = {true_means}); bright = may attend, x = blocked", fontsize=10)
    return ax
